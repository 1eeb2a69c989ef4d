package codec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kjsonserializer "k8s.io/apimachinery/pkg/runtime/serializer/json"
	kjson "sigs.k8s.io/json"

	"rawwatch/api/v1alpha1"
	"rawwatch/codec/metajson"
	"rawwatch/internal/kuberef"
	"rawwatch/store"
	"rawwatch/watcher"
	"rawwatch/wire"
)

// The event decoder against Kubernetes' own decoding of a WATCH stream,
// client-go's: the stream split into frames by its JSON framer
// (k8s.io/apimachinery/pkg/util/framer: a json.Decoder reading one
// json.RawMessage after another), each frame read as a metav1.WatchEvent
// and its object through sigs.k8s.io/json (the JSON serializer's
// UnmarshalCaseSensitivePreserveInts), with the event types client-go's
// watch decoder accepts. On every stream both must agree, event by event:
// the same objects (their managedFields reduced on both sides to one entry
// with the newest time, which is all the watcher keeps), the same errors
// (by their class), the same frames skipped with the same identity, the
// stream broken at the same frame. Where they differ by design:
//
//   - client-go ends the stream at a frame it cannot decode; the watcher
//     skips it and reads on (kubernetesDecoder reports it skipped, with the
//     identity its metadata gives through the same decoder: kuberef.IdentityOf);
//   - a bookmark: the watcher reads its metadata only (what a Reflector
//     reads of it), client-go the whole object;
//   - a bare number, true, false or null where a frame should be (never sent
//     by a server) breaks the stream instead of being skipped: no event is
//     lost either way; so does a newline inside a frame, once the stream
//     showed itself line-framed (frames.go): a cut, after which client-go
//     may still parse the next frame as part of the cut one.

// kubernetesDecoder decodes a WATCH stream as client-go does (see above).
type kubernetesDecoder struct {
	frames *json.Decoder
}

func (d *kubernetesDecoder) Next() (watcher.Event[*v1alpha1.MyResource], error) {
	var raw json.RawMessage
	if err := d.frames.Decode(&raw); err != nil {
		return watcher.Event[*v1alpha1.MyResource]{}, err
	}
	var f metav1.WatchEvent
	err := kjson.UnmarshalCaseSensitivePreserveInts(raw, &f)
	if err == nil {
		err = envelopeRefused(raw)
	}
	if err != nil {
		return watcher.Event[*v1alpha1.MyResource]{}, &watcher.SkipError{What: "watch frame", Err: err}
	}
	ev := watcher.Event[*v1alpha1.MyResource]{Type: f.Type}
	object := f.Object.Raw
	switch f.Type {
	case watcher.Added, watcher.Modified, watcher.Deleted:
		what := f.Type + " event"
		if object == nil {
			return ev, &watcher.SkipError{What: what, Err: errors.New("no object")}
		}
		obj, err := kuberef.Object(object, false)
		if err != nil {
			id := kuberef.IdentityOf(object)
			return ev, &watcher.SkipError{What: what, Key: id.Key, RV: id.RV, UID: id.UID, Err: err}
		}
		ev.Object, ev.RV = obj, obj.ResourceVersion
	case watcher.Bookmark:
		var tm struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		if err := kjson.UnmarshalCaseSensitivePreserveInts(object, &tm); err != nil || tm.Metadata.ResourceVersion == "" {
			return ev, &watcher.SkipError{What: "BOOKMARK", Err: errors.New("no resourceVersion")}
		}
		ev.RV, ev.InitialEventsEnd = tm.Metadata.ResourceVersion, tm.Metadata.Annotations[metav1.InitialEventsAnnotationKey] == "true"
	case watcher.Error:
		obj, err := runtime.Decode(kuberef.DynamicObjects, object)
		if err == nil {
			err = apierrors.FromObject(obj)
		}
		if _, ok := err.(*apierrors.StatusError); !ok {
			err = &watcher.UnexpectedErrorObject{Err: err}
		}
		ev.Err = err
	default:
		return ev, &watcher.SkipError{What: "watch frame", Err: errors.New("unknown event type")}
	}
	return ev, nil
}

// envelopeSerializers are client-go's stream serializers of a watch
// frame's envelope: the typed client's (its scheme the controller's: the
// MyResource types, meta/v1's in example.com/v1alpha1) and the dynamic
// client's (meta/v1's types in v1).
var envelopeSerializers = func() []runtime.Decoder {
	typed, dynamic := runtime.NewScheme(), runtime.NewScheme()
	if err := v1alpha1.AddToScheme(typed); err != nil {
		panic(err)
	}
	metav1.AddToGroupVersion(dynamic, schema.GroupVersion{Version: "v1"})
	var out []runtime.Decoder
	for _, s := range []*runtime.Scheme{typed, dynamic} {
		out = append(out, kjsonserializer.NewSerializerWithOptions(kjsonserializer.DefaultMetaFactory, s, s, kjsonserializer.SerializerOptions{}))
	}
	return out
}()

// envelopeRefused is why a client of client-go fails the frame's envelope
// (rest/watch.Decoder: decoded into a metav1.WatchEvent, or not that one),
// nil when both take it.
func envelopeRefused(frame []byte) error {
	for _, s := range envelopeSerializers {
		var got metav1.WatchEvent
		res, _, err := s.Decode(frame, nil, &got)
		if err == nil && res != &got {
			err = errors.New("unable to decode to metav1.WatchEvent")
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// outcome is one Next's result, reduced to what must agree.
type outcome struct {
	kind string // "event", "skip", "end" (io.EOF), "broken"
	ev   watcher.Event[*v1alpha1.MyResource]
	// class is an ERROR's (watcher.Classify)
	class watcher.ErrorClass
	skip  watcher.SkipError // a skip's identity (its Err apart): what a DELETED deletes, a relist keeps
}

func outcomeOf(ev watcher.Event[*v1alpha1.MyResource], err error) outcome {
	var skip *watcher.SkipError
	switch {
	case err == nil:
		if ev.Object != nil {
			ev.Object.ManagedFields = metajson.NewestWrite(ev.Object.ManagedFields)
		}
		class, _ := watcher.Classify(ev.Err)
		ev.Err = nil // compared by its class
		return outcome{kind: "event", ev: ev, class: class}
	case errors.As(err, &skip):
		return outcome{kind: "skip", ev: watcher.Event[*v1alpha1.MyResource]{Type: ev.Type},
			skip: watcher.SkipError{What: skip.What, Key: skip.Key, RV: skip.RV, UID: skip.UID}}
	case errors.Is(err, io.EOF):
		return outcome{kind: "end"}
	}
	return outcome{kind: "broken"}
}

// compareStreams decodes data both ways and fails at the first disagreement.
func compareStreams(t *testing.T, data []byte) {
	t.Helper()
	if d := streamsDiffer(data); d != "" {
		t.Fatal(d)
	}
}

// streamsDiffer decodes data with each codec, the fast one and the
// watcher's own, and with Kubernetes' decoder (kubernetesDecoder), and says
// where one first disagrees ("" if none does).
func streamsDiffer(data []byte) string {
	labelled := codec
	labelled.labels = new(metajson.LabelCache) // as a watcher's store without a transform has it
	if d := eventsDiffer(data, newEventDecoder(bytes.NewReader(data), labelled)); d != "" {
		return "the fast codec: " + d
	}
	if d := eventsDiffer(data, plainCodec.DecodeEvents(bytes.NewReader(data))); d != "" {
		return "watcher.JSONCodec: " + d
	}
	return ""
}

// eventsDiffer says where fast, reading data, first disagrees with
// Kubernetes' decoder.
func eventsDiffer(data []byte, fast watcher.Events[*v1alpha1.MyResource]) string {
	ref := &kubernetesDecoder{frames: json.NewDecoder(bytes.NewReader(data))}
	for i := 0; i <= len(data)+1; i++ {
		fe, ferr := fast.Next()
		re, rerr := ref.Next()
		f, r := outcomeOf(fe, ferr), outcomeOf(re, rerr)
		bare := r.kind == "skip" && errors.Is(ferr, ErrBareWord)
		lined := errors.Is(ferr, ErrBrokenFrame) && strings.Contains(ferr.Error(), newlineInside)
		switch {
		case bare:
			return "" // a bare word: Kubernetes' framer takes it, the watcher breaks the stream
		case lined:
			return "" // a newline inside a frame of a line-framed stream: a cut Kubernetes may read on past
		case f.kind != r.kind:
			return fmt.Sprintf("frame %d: the watcher's %s (%v), Kubernetes' %s (%v)", i, f.kind, ferr, r.kind, rerr)
		case f.kind == "skip" && (f.skip != r.skip || (f.ev.Type == watcher.Deleted) != (r.ev.Type == watcher.Deleted)):
			// (a skip's type counts only as DELETED or not: an unknown one
			// in invalid UTF-8 keeps its bytes on the walk)
			return fmt.Sprintf("frame %d skipped otherwise:\nthe watcher %+v %q (%v)\nKubernetes  %+v %q (%v)", i, f.skip, f.ev.Type, ferr, r.skip, r.ev.Type, rerr)
		case f.kind == "event" && (!reflect.DeepEqual(f.ev, r.ev) || f.class != r.class):
			return fmt.Sprintf("frame %d differs:\nthe watcher %+v %v\nKubernetes  %+v %v", i, f.ev, f.class, r.ev, r.class)
		}
		if f.kind == "end" || f.kind == "broken" {
			return ""
		}
	}
	return "no end after more calls than bytes"
}

// compareLines decodes data with Next, which takes a line-framed stream's
// usual frames by the line, and with next alone, which takes every frame
// from the frame reader's checks, and requires the same result from both,
// call by call: the same events, the same skips and errors (by their text),
// the stream ended or broken at the same frame. The line's shortcut may
// only change what a frame costs. The stream comes in one read (see
// compareLinesIn for others).
func compareLines(t *testing.T, data []byte) {
	t.Helper()
	compareLinesIn(t, "the stream", string(data), max(1, len(data)), 0)
}

func TestTheEventDecoderAgreesWithKubernetes(t *testing.T) {
	for _, name := range []string{wire.WatchList, wire.WatchGone} {
		data := wire.MustRead(t, name)
		t.Run(name, func(t *testing.T) { compareStreams(t, data); compareLines(t, data) })
	}
	bad, err := os.ReadFile(filepath.Join("testdata", "fixtures", "watch-stream-bad.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	t.Run("watch-stream-bad.jsonl", func(t *testing.T) { compareStreams(t, bad); compareLines(t, bad) })
	for name, stream := range fastPathCases {
		t.Run(name, func(t *testing.T) { compareStreams(t, []byte(stream)); compareLines(t, []byte(stream)) })
	}
}

// A write time survives the cut: WrittenAt reads the newest entry's.
// (In UTC the newest literal wins a byte comparison; with an offset it is
// parsed.)
func TestTheNewestManagedFieldsTimeIsKept(t *testing.T) {
	for _, name := range []string{"several managers, one offset time", "several managers, UTC times"} {
		dec := newEventDecoder(strings.NewReader(fastPathCases[name]), codec)
		ev, err := dec.Next()
		if err != nil {
			t.Fatal(err)
		}
		at, ok := watcher.WrittenAt(ev.Object)
		if !ok || at.UTC().Format("2006-01-02T15:04:05Z") != "2026-12-01T10:00:05Z" {
			t.Fatalf("%s: written at %v (%v), want 2026-12-01T10:00:05Z", name, at, ok)
		}
		if len(ev.Object.ManagedFields) != 1 || ev.Object.ManagedFields[0].Manager != "" {
			t.Errorf("%s: managedFields kept: %+v, want one entry with the time only", name, ev.Object.ManagedFields)
		}
	}
}

// The fallback keeps the newest time too: an object MyResource's decoder
// declines (a field twice: the last wins, as in encoding/json) is decoded by
// withoutManagedFields then metajson.Plain, which no other test (nor the
// explorer, whose objects all take the fast way) gives several managers.
// The mutation managed-fields-oldest-time fails it.
func TestTheFallbackKeepsTheNewestManagedFieldsTime(t *testing.T) {
	twice := strings.Replace(fastPathCases["several managers, UTC times"], `"spec":{"message":"x"}`, `"spec":{"message":"w","message":"x"}`, 1)
	var fast v1alpha1.MyResource
	_, object, _ := strings.Cut(strings.TrimSuffix(twice, "}\n"), `"object":`)
	if err := fast.DecodeJSON([]byte(object), metajson.Options{NewestWriteOnly: true}); err == nil {
		t.Fatal("MyResource's decoder took a field twice: this does not reach the fallback")
	}
	ev, err := newEventDecoder(strings.NewReader(twice), codec).Next()
	if err != nil {
		t.Fatal(err)
	}
	if at, ok := watcher.WrittenAt(ev.Object); !ok || at.UTC().Format(time.RFC3339) != "2026-12-01T10:00:05Z" || ev.Object.Spec.Message != "x" {
		t.Fatalf("written at %v (%v), message %q; want 2026-12-01T10:00:05Z, \"x\"", at, ok, ev.Object.Spec.Message)
	}
}

const objHead = `"apiVersion":"example.com/v1alpha1","kind":"MyResource"`

func ev(typ, metadata, rest string) string {
	return `{"type":"` + typ + `","object":{` + objHead + `,"metadata":{` + metadata + `}` + rest + `}}` + "\n"
}

var fastPathCases = map[string]string{
	"plain": ev("ADDED", `"name":"a","namespace":"ns","uid":"u1","resourceVersion":"5"`, `,"spec":{"message":"hi"}`),
	"several managers, one offset time": ev("MODIFIED", `"name":"a","namespace":"ns","resourceVersion":"6","managedFields":[`+
		`{"manager":"kubectl","operation":"Update","time":"2026-12-01T10:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{"f:message":{}}}},`+
		`{"manager":"rawwatch","operation":"Update","subresource":"status","time":"2026-12-01T12:00:05+02:00","fieldsType":"FieldsV1","fieldsV1":{"f:status":{".":{}}}},`+
		`{"manager":"other","time":"2026-12-01T09:59:59Z"}]`, `,"spec":{"message":"x"}`),
	"several managers, UTC times": ev("MODIFIED", `"name":"a","namespace":"ns","resourceVersion":"6","managedFields":[`+
		`{"manager":"kubectl","operation":"Update","time":"2026-12-01T10:00:00Z"},`+
		`{"manager":"rawwatch","operation":"Update","subresource":"status","time":"2026-12-01T10:00:05Z"},`+
		`{"manager":"other","time":"2026-12-01T09:59:59Z"}]`, `,"spec":{"message":"x"}`),
	"no times":            ev("MODIFIED", `"name":"a","resourceVersion":"7","managedFields":[{"manager":"m"},{"manager":"n","time":null}]`, ``),
	"empty managedFields": ev("MODIFIED", `"name":"a","resourceVersion":"8","managedFields":[]`, ``),
	"null managedFields":  ev("MODIFIED", `"name":"a","resourceVersion":"9","managedFields":null`, ``),
	"managedFields a string: refused both ways": ev("MODIFIED", `"name":"a","resourceVersion":"9","managedFields":"no"`, ``),
	"unicode and escapes": ev("ADDED", `"name":"a","resourceVersion":"10","labels":{"k":"v\"}{]["},"annotations":{"x":"caf\u00e9 \\\" ✓ \n"},"managedFields":[{"manager":"a\"b","time":"2026-12-01T10:00:00Z"}]`,
		`,"spec":{"message":"\"managedFields\":[ }"}`),
	"keys in other cases":           `{"TYPE":"ADDED","Object":{` + objHead + `,"Metadata":{"name":"a","resourceVersion":"11","ManagedFields":[{"Time":"2026-12-01T10:00:00Z"}]}}}` + "\n",
	"duplicate keys, the last wins": `{"type":"ADDED","type":"MODIFIED","object":{"spec":{}},"object":{` + objHead + `,"metadata":{"name":"a","resourceVersion":"12"}}}` + "\n",
	"duplicate managedFields":       ev("ADDED", `"name":"a","resourceVersion":"13","managedFields":[{"time":"2026-12-01T10:00:00Z"}],"managedFields":[{"time":"2026-12-01T11:00:00Z"}]`, ``),
	"escaped key":                   `{"typ\u0065":"ADDED","object":{` + objHead + `,"metadata":{"name":"a","resourceVersion":"14"}}}` + "\n",
	"escaped managedFields key":     ev("ADDED", `"name":"a","resourceVersion":"15","managed\u0046ields":[{"time":"2026-12-01T10:00:00Z"}]`, ``),
	"object first, spaces":          "  {\n \"object\" : {" + objHead + ` , "metadata" : { "name" : "a" , "resourceVersion" : "16" , "managedFields" : [ { "time" : "2026-12-01T10:00:00Z" } , { } ] } } ,` + "\t\"type\" : \"DELETED\" }\r\n",
	"extra envelope members":        `{"type":"ADDED","x":[1,{"y":null}],"object":{` + objHead + `,"metadata":{"name":"a","resourceVersion":"17"}},"z":true}` + "\n",
	"bad scalar outside the object": `{"type":"ADDED","x":tru,"object":{` + objHead + `,"metadata":{"name":"a"}}}` + "\n",
	"bad scalar in the object":      ev("ADDED", `"name":"a","resourceVersion":"18","generation":1x`, ``),
	"invalid time":                  ev("ADDED", `"name":"a","resourceVersion":"19","managedFields":[{"time":"yesterday"}]`, ``),
	"wrong kind":                    `{"type":"ADDED","object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","resourceVersion":"20"}}}` + "\n",
	"object null":                   `{"type":"ADDED","object":null}` + "\n",
	"no object":                     `{"type":"MODIFIED"}` + "\n",
	"type not a string":             `{"type":3,"object":{}}` + "\n",
	"not an object":                 `[1,2]` + "\n" + `"str"` + "\n" + `42 ` + ev("ADDED", `"name":"after","resourceVersion":"21"`, ``),
	"bookmark and error":            `{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"22"}}}` + "\n" + `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","code":410,"reason":"Expired","message":"gone"}}` + "\n",
	"truncated":                     `{"type":"ADDED","object":{` + objHead + `,"metadata":{"name":"a"`,
	"stray closer":                  ev("ADDED", `"name":"a","resourceVersion":"23"`, ``) + "}\n" + ev("ADDED", `"name":"b","resourceVersion":"24"`, ``),
	"cut after a colon":             ev("ADDED", `"name":"a","resourceVersion":"27"`, ``) + `{"type":"ADDED","object":` + "\n" + ev("ADDED", `"name":"b","resourceVersion":"28"`, ``) + ev("ADDED", `"name":"c","resourceVersion":"29"`, ``),
	"cut mid-string":                ev("ADDED", `"name":"a","resourceVersion":"30"`, ``) + `{"type":"ADDED","object":{"metadata":{"name":"b","resou` + "\n" + ev("ADDED", `"name":"c","resourceVersion":"31"`, ``),
	"declined after its strings, then one taken": ev("MODIFIED", `"name":"a","uid":"u1","resourceVersion":"32"`, `,"spec":{"message":"first"},"status":{"message":"m","observedGeneration":1.5}`) +
		ev("MODIFIED", `"name":"b","resourceVersion":"33"`, `,"status":{"phase":"Processed"}`),
	"labels alike, then not": ev("ADDED", `"name":"a","resourceVersion":"40","labels":{"app":"x"}`, ``) + ev("MODIFIED", `"name":"b","resourceVersion":"41","labels":{"app":"x"}`, ``) +
		ev("MODIFIED", `"name":"a","resourceVersion":"42","labels":{"app":"x","app":"y"}`, ``) + ev("MODIFIED", `"name":"a","resourceVersion":"43","labels":{"app":"x","app":"y"}`, ``) +
		ev("MODIFIED", `"name":"a","resourceVersion":"44","labels":{"app":"x\u0041"}`, ``) + ev("MODIFIED", `"name":"a","resourceVersion":"45","labels":{"app":"x\u0041"}`, ``) +
		ev("MODIFIED", `"name":"a","resourceVersion":"46","labels":{"app":"`+"\xff"+`"}`, ``) + ev("MODIFIED", `"name":"a","resourceVersion":"47","labels":{"app":"`+"\xff"+`"}`, ``) +
		ev("MODIFIED", `"name":"a","resourceVersion":"48","labels":{"app":"x"},"labels":{"app":"z"}`, ``) + ev("MODIFIED", `"name":"a","resourceVersion":"49","labels":{"app":"x"}`, ``) +
		ev("MODIFIED", `"name":"a","resourceVersion":"50","labels":{"app":"x"`, ``) + ev("MODIFIED", `"name":"a","resourceVersion":"51","labels":{}`, ``) + ev("MODIFIED", `"name":"a","resourceVersion":"52","labels":{}`, ``),
	"ownerReferences and conditions": ev("ADDED", `"name":"a","resourceVersion":"60","ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"rs","uid":"u","controller":true,"blockOwnerDeletion":null},null]`,
		`,"status":{"conditions":[{"type":"Ready","status":"True","observedGeneration":3,"lastTransitionTime":"2026-12-01T10:00:00Z","reason":"R","message":"m\u00e9"},null]}`) +
		ev("MODIFIED", `"name":"a","resourceVersion":"61","ownerReferences":[{"Name":"x","name":"y","controller":null}]`, `,"status":{"conditions":[{"Type":"A","type":"B"}]}`) +
		ev("MODIFIED", `"name":"a","resourceVersion":"62","ownerReferences":[{"name":"x","name":"y"}]`, `,"status":{"conditions":[{"type":"A","type":"B"}]}`) +
		ev("MODIFIED", `"name":"a","resourceVersion":"63","ownerReferences":[{"controller":1}]`, `,"status":{"conditions":[{"observedGeneration":1.5}]}`),
	"frames back to back": strings.TrimSpace(ev("ADDED", `"name":"a","resourceVersion":"25"`, ``)) + strings.TrimSpace(ev("ADDED", `"name":"b","resourceVersion":"26"`, ``)),
}

// FuzzFastDecoder searches for a stream the watcher decodes otherwise than
// Kubernetes does:
//
//	go test ./codec -run '^$' -fuzz FuzzFastDecoder -fuzztime 5m
func FuzzFastDecoder(f *testing.F) {
	for _, c := range fastPathCases {
		f.Add([]byte(c))
	}
	for _, c := range envelopeVariants() {
		f.Add([]byte(c + "\n"))
	}
	f.Add(wire.MustRead(f, wire.WatchList))
	f.Fuzz(func(t *testing.T, data []byte) { compareStreams(t, data); compareLines(t, data) })
}

// An object whose managedFields hold a time shaped like the apiserver's
// ("YYYY-MM-DDTHH:MM:SSZ") that is no time (month 00) is refused, as
// metajson.Plain (Kubernetes' decoder) refuses it, though that entry is not
// the newest and is not kept. (compareStreams tolerates what only the plain
// way looks at in managedFields, so the fuzz targets cannot hold this.)
func TestAnInvalidTimeOfTheApiserversShapeIsRefusedAsKubernetesRefusesIt(t *testing.T) {
	obj := `{` + objHead + `,"metadata":{"name":"a","namespace":"default","resourceVersion":"5","managedFields":[` +
		`{"manager":"m","time":"2026-12-01T10:00:00Z"},{"manager":"n","time":"2026-00-00T00:00:00Z"}]},"spec":{"message":"x"}}`
	var plain *v1alpha1.MyResource
	perr := metajson.Plain([]byte(obj), &plain)
	if perr == nil {
		t.Fatal("Plain took the invalid time: no finding")
	}
	got, err := codec.decode("MODIFIED event", []byte(obj), true)
	if err == nil {
		t.Errorf("an object whose managedFields hold the time \"2026-00-00T00:00:00Z\": Plain refuses it (%v), the event decoder took it (%s)", perr, store.KeyOf(got))
	}
}
