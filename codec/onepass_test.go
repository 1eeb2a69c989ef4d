package codec

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"

	"rawwatch/api/v1alpha1"
)

// envelopeVariants are envelope and object variants (FuzzFastDecoder's seeds
// too) the one-pass decode must decode as Kubernetes does (compareStreams:
// the reference decoder of decode_ref_test.go), or leave to the walk.
func envelopeVariants() map[string]string {
	const md = `"name":"a","namespace":"ns","resourceVersion":"5"`
	obj := func(metadata, rest string) string {
		return `{` + objHead + `,"metadata":{` + metadata + `}` + rest + `}`
	}
	o := obj(md, `,"spec":{"message":"hi"}`)
	deep := strings.Repeat(`[`, 990) + strings.Repeat(`]`, 990)
	tooDeep := strings.Repeat(`{"a":`, 1100) + `1` + strings.Repeat(`}`, 1100)
	long := strings.Repeat("x", 1<<16)
	return map[string]string{
		"type after object":                  `{"object":` + o + `,"type":"MODIFIED"}`,
		"unknown members around":             `{"extra":1,"type":"ADDED","object":` + o + `,"extra":{"type":"DELETED","object":null}}`,
		"kind WatchEvent":                    `{"kind":"WatchEvent","type":"ADDED","object":` + o + `}`,
		"apiVersion v1":                      `{"kind":"WatchEvent","type":"ADDED","apiVersion":"v1","object":` + o + `}`,
		"KIND Pod after":                     `{"type":"ADDED","object":` + o + `,"KIND":"Pod"}`,
		"object null":                        `{"type":"ADDED","object":null}`,
		"object null, type after":            `{"object":null,"type":"DELETED"}`,
		"object a string":                    `{"type":"ADDED","object":"x"}`,
		"object an array":                    `{"type":"DELETED","object":[]}`,
		"duplicate type, same value":         `{"type":"ADDED","type":"ADDED","object":` + o + `}`,
		"duplicate type after the object":    `{"type":"ADDED","object":` + o + `,"type":"DELETED"}`,
		"duplicate object, second garbled":   `{"type":"DELETED","object":` + o + `,"object":{"metadata":{"name":"b","generation":"x"}}}`,
		"type in other case after":           `{"type":"ADDED","object":` + o + `,"Type":"DELETED"}`,
		"OBJECT in other case after":         `{"type":"ADDED","object":` + o + `,"OBJECT":{"metadata":{"name":"z"}}}`,
		"unicode escape in an envelope key":  `{"\u0074ype":"ADDED","object":` + o + `}`,
		"unicode escape in the type":         `{"type":"\u0041DDED","object":` + o + `}`,
		"unicode escape in an unknown key":   `{"type":"ADDED","\u00e9":1,"object":` + o + `}`,
		"escaped values in the object":       `{"type":"ADDED","object":` + obj(`"name":"\u0061","namespace":"n\u0073","resourceVersion":"\u0035","labels":{"k":"\u00e9\ud83d\ude00"}`, `,"status":{"phase":"Pro\u0063essed"}`) + `}`,
		"lone surrogate in a value":          `{"type":"ADDED","object":` + obj(md+`,"labels":{"k":"\ud800"}`, ``) + `}`,
		"invalid UTF-8 in a value":           "{\"type\":\"ADDED\",\"object\":" + obj(md+",\"annotations\":{\"k\":\"\xff\xfe\"}", ``) + "}",
		"invalid UTF-8 in the namespace":     "{\"type\":\"ADDED\",\"object\":" + obj("\"name\":\"a\",\"namespace\":\"n\xffs\",\"resourceVersion\":\"5\"", ``) + "}",
		"resourceVersion a number":           `{"type":"ADDED","object":` + obj(`"name":"a","resourceVersion":1e3`, ``) + `}`,
		"generation 1e3":                     `{"type":"MODIFIED","object":` + obj(md+`,"generation":1e3`, ``) + `}`,
		"generation 1.0":                     `{"type":"MODIFIED","object":` + obj(md+`,"generation":1.0`, ``) + `}`,
		"generation -0":                      `{"type":"MODIFIED","object":` + obj(md+`,"generation":-0`, ``) + `}`,
		"generation overflows":               `{"type":"MODIFIED","object":` + obj(md+`,"generation":9223372036854775808`, ``) + `}`,
		"observedGeneration 1E+2":            `{"type":"MODIFIED","object":` + obj(md, `,"status":{"observedGeneration":1E+2}`) + `}`,
		"a very long string":                 `{"type":"ADDED","object":` + obj(md+`,"annotations":{"big":"`+long+`"}`, ``) + `}`,
		"a very long namespace":              `{"type":"ADDED","object":` + obj(`"name":"a","namespace":"`+long[:100]+`","resourceVersion":"5"`, ``) + `}`,
		"deep nesting in an unknown member":  `{"type":"ADDED","deep":` + deep + `,"object":` + o + `}`,
		"deep nesting in the object":         `{"type":"ADDED","object":` + obj(md, `,"x":`+deep) + `}`,
		"too deep in an unknown member":      `{"type":"ADDED","deep":` + tooDeep + `,"object":` + o + `}`,
		"too deep in the object":             `{"type":"ADDED","object":` + obj(md, `,"x":`+tooDeep) + `}`,
		"wrong kind, type after":             `{"object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"ns","resourceVersion":"6","uid":"u"}},"type":"DELETED"}`,
		"garbled DELETED keeps its key":      `{"type":"DELETED","object":` + obj(md+`,"uid":"u","generation":"seven"`, ``) + `}`,
		"garbled DELETED, type after":        `{"object":` + obj(md+`,"uid":"u","labels":[1]`, ``) + `,"type":"DELETED"}`,
		"bookmark after the object":          `{"object":{"kind":"MyResource","apiVersion":"example.com/v1alpha1","metadata":{"resourceVersion":"9"}},"type":"BOOKMARK"}`,
		"error after the object":             `{"object":{"kind":"Status","apiVersion":"v1","status":"Failure","code":410,"reason":"Expired","message":"gone"},"type":"ERROR"}`,
		"unknown type after the object":      `{"object":` + o + `,"type":"SYNC"}`,
		"type null":                          `{"type":null,"object":` + o + `}`,
		"empty type":                         `{"type":"","object":` + o + `}`,
		"managedFields time null and others": `{"type":"ADDED","object":` + obj(md+`,"managedFields":[{"time":null},{"time":"2026-12-01T10:00:00+01:00"},{"time":"2026-12-01T09:30:00Z"}]`, ``) + `}`,
		"managedFields time escaped":         `{"type":"ADDED","object":` + obj(md+`,"managedFields":[{"time":"2026-12-01T10:00:00\u005a"}]`, ``) + `}`,
		"metadata null":                      `{"type":"ADDED","object":{` + objHead + `,"metadata":null}}`,
		"trailing comma in the envelope":     `{"type":"ADDED","object":` + o + `,}`,
		"whitespace everywhere":              " \t{ \"object\" :\r" + o + " , \"type\"\n:\"ADDED\" } ",
	}
}

func TestOnePassEnvelopeVariantsAgreeWithThePlainWay(t *testing.T) {
	for name, frame := range envelopeVariants() {
		if _, ok, _ := newEventDecoder(strings.NewReader(""), codec).onePass([]byte(frame)); ok != onePassTakes[name] {
			t.Errorf("%s: onePass ok %v, want %v", name, ok, onePassTakes[name])
		}
		t.Run(name, func(t *testing.T) { compareStreams(t, []byte(frame+"\n")) })
	}
}

// The variants onePass decodes itself (the rest it leaves to the walk): so
// the comparison above holds onePass to Kubernetes' decoding, not only the walk.
var onePassTakes = map[string]bool{
	"type after object": true, "unknown members around": true, "escaped values in the object": true,
	"lone surrogate in a value": true, "invalid UTF-8 in a value": true, "invalid UTF-8 in the namespace": true,
	"generation -0": true, "a very long string": true, "a very long namespace": true,
	"deep nesting in an unknown member": true, "deep nesting in the object": true, "wrong kind, type after": true,
	"managedFields time null and others": true, "managedFields time escaped": true, "metadata null": true,
	"whitespace everywhere": true, "type in other case after": true, "OBJECT in other case after": true,
}

// Nothing an event hands out refers to the frame's bytes or the reused
// Decoder: scribbling over the frame after onePass, and decoding other frames
// with the same decoder, leaves the first object as it was.
func TestOnePassObjectsDoNotAliasTheFrame(t *testing.T) {
	frame := func(ns, name, rv string) []byte {
		return []byte(`{"object":{"apiVersion":"example.com/v1alpha1","kind":"MyResource","metadata":{"name":"` + name + `","namespace":"` + ns +
			`","uid":"u-` + name + `","resourceVersion":"` + rv + `","generation":3,"creationTimestamp":"2026-12-01T00:00:00Z",` +
			`"labels":{"app":"` + name + `","` + name + `":"v"},"annotations":{"a":"` + name + `"},"finalizers":["f/` + name + `"],` +
			`"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"` + name + `","uid":"o"}],` +
			`"managedFields":[{"manager":"m","time":"2026-12-01T10:00:00Z","fieldsV1":{"f:spec":{}}}]},` +
			`"spec":{"message":"` + name + `"},"status":{"phase":"Processed","message":"` + name + `","observedGeneration":3,` +
			`"conditions":[{"type":"Ready","status":"True","reason":"` + name + `","message":"m","lastTransitionTime":"2026-12-01T00:00:00Z"}]}},"type":"ADDED"}`)
	}
	d := newEventDecoder(strings.NewReader(""), codec)
	first := frame("ns-one", "alpha", "11")
	ev, ok, err := d.onePass(first)
	if !ok || err != nil {
		t.Fatalf("onePass declined the usual frame: %v %v", ok, err)
	}
	// The same frame decoded apart, from bytes nothing overwrites (a DeepCopy
	// would share the strings' bytes with the object it copies).
	wantEv, _, _ := newEventDecoder(strings.NewReader(""), codec).onePass(bytes.Clone(first))
	want, wantType, wantRV := wantEv.Object, strings.Clone(ev.Type), strings.Clone(ev.RV)
	for i := range first {
		first[i] = 'x'
	}
	for i := range 200 { // other frames through the same decoder, over the same buffer
		next := frame(fmt.Sprintf("ns-%d", i), fmt.Sprintf("n%d", i), fmt.Sprint(i))
		copy(first, next)
		if _, ok, err := d.onePass(next); !ok || err != nil {
			t.Fatalf("frame %d: %v %v", i, ok, err)
		}
		for j := range next {
			next[j] = '#'
		}
	}
	if !reflect.DeepEqual(ev.Object, want) || ev.Type != wantType || ev.RV != wantRV {
		t.Fatalf("the first event changed after its frame was overwritten:\ngot  %+v\nwant %+v", ev.Object, want)
	}
}

// Several decoders at once (sharded replicas in one process, the comparison
// harness): the shared string table and each one's reused Decoder give every
// stream its own objects, with -race.
func TestOnePassDecodersRunConcurrently(t *testing.T) {
	const streams, frames = 6, 300
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	for s := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var in bytes.Buffer
			for i := range frames {
				// namespaces and phases that collide in a 64-slot table, and change every frame
				ns := fmt.Sprintf("ns-%d-%d", s, i%97)
				fmt.Fprintf(&in, `{"type":"MODIFIED","object":{"apiVersion":"example.com/v1alpha1","kind":"MyResource","metadata":{"name":"o%d","namespace":"%s","resourceVersion":"%d"},"status":{"phase":"P%d-%d"}}}`+"\n", i, ns, i+1, s, i%89)
			}
			d := newEventDecoder(&in, codec)
			var got []*v1alpha1.MyResource
			for i := range frames {
				ev, err := d.Next()
				if err != nil {
					errs <- fmt.Errorf("stream %d frame %d: %v", s, i, err)
					return
				}
				got = append(got, ev.Object)
			}
			for i, o := range got {
				if o.Namespace != fmt.Sprintf("ns-%d-%d", s, i%97) || o.Status.Phase != fmt.Sprintf("P%d-%d", s, i%89) || o.Name != fmt.Sprintf("o%d", i) {
					errs <- fmt.Errorf("stream %d frame %d: got %s/%s phase %s", s, i, o.Namespace, o.Name, o.Status.Phase)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// onePass takes the usual frame of an object event in one pass, its two
// members in either order, and leaves every other frame to the envelope walk
// and the object's decode (ok false), which FuzzFastDecoder holds equal to
// Kubernetes' decoding.
func TestOnePassTakesTheUsualFramesOnly(t *testing.T) {
	const object = `{` + objHead + `,"metadata":{"name":"a","namespace":"ns","resourceVersion":"5","managedFields":[{"manager":"m","time":"2026-12-01T10:00:00Z","fieldsV1":{"f:spec":{}}}]},"spec":{"message":"hi"}}`
	for frame, want := range map[string]bool{
		`{"type":"MODIFIED","object":` + object + `}`:                             true,
		`{"object":` + object + `,"type":"ADDED"}`:                                true, // as encoding/json writes a map
		` {"type" : "DELETED" , "x":[1,{"y":null}], "object":` + object + "}\r\n": true,
		`{"type":"BOOKMARK","object":` + object + `}`:                             false,
		`{"type":"ERROR","object":{"kind":"Status"}}`:                             false,
		`{"TYPE":"MODIFIED","object":` + object + `}`:                             false, // no "type": keys match case-sensitively
		`{"type":"MODIFIED","Object":` + object + `}`:                             false,
		`{"type":"MODIFIED","Type":"DELETED","object":` + object + `}`:            true, // an unknown member
		`{"type":"MODIFIED","typé":1,"object":` + object + `}`:                    true,
		`{"typ\u0065":"MODIFIED","object":` + object + `}`:                        false,
		`{"type":"MODIFIED","type":"ADDED","object":` + object + `}`:              false, // the last wins: the walk's business
		`{"type":"MODIFIED","object":` + object + `,"object":{}}`:                 false,
		`{"type":"MODIFIED","object":null}`:                                       false,
		`{"type":"MODIFIED"}`:                                                     false,
		`{"type":"MODIFIED","object":` + object + `,"x":tru}`:                     false,
		`{"type":"MODIFIED","object":` + object + `} x`:                           false,
		`{"type":"M\u004fDIFIED","object":` + object + `}`:                        false,
	} {
		d := newEventDecoder(strings.NewReader(""), codec)
		ev, ok, err := d.onePass([]byte(frame))
		if ok != want {
			t.Errorf("onePass(%s): ok %v, want %v", frame, ok, want)
			continue
		}
		if !ok {
			continue
		}
		if err != nil || ev.Object.Name != "a" || ev.RV != "5" || ev.Object.Spec.Message != "hi" || len(ev.Object.ManagedFields) != 1 {
			t.Errorf("onePass(%s): %+v, %v", frame, ev, err)
		}
	}
}
