package v1alpha1

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"rawwatch/codec/metajson"
	"rawwatch/wire"
)

// The fast decoder (DecodeJSON) against the oracle, Kubernetes' own decoding
// (metajson.Plain, sigs.k8s.io/json): whenever DecodeJSON accepts an input,
// the oracle must accept it too and give the same object. When DecodeJSON
// declines, callers decode with the oracle, so declining is always allowed;
// TestDecodeJSONTakesTheServersObjects keeps it from declining what a server
// sends.
//
// With Options.NewestWriteOnly, the same holds of the oracle's object with
// its managedFields reduced by metajson.NewestWrite.
func checkAgainstOracle(t *testing.T, data []byte) (accepted bool) {
	t.Helper()
	var plain *MyResource
	perr := metajson.Plain(data, &plain)
	// The last two with one LabelCache: the first fills it, the second
	// takes the labels from it.
	labels := new(metajson.LabelCache)
	for _, opts := range []metajson.Options{{}, {NewestWriteOnly: true}, {Labels: labels}, {NewestWriteOnly: true, Labels: labels}} {
		var fast MyResource
		if fast.DecodeJSON(data, opts) != nil {
			continue
		}
		if perr != nil {
			t.Fatalf("DecodeJSON(%+v) accepted what Kubernetes' decoder refuses (%v):\n%q", opts, perr, data)
		}
		want := plain.DeepCopy()
		if want != nil && opts.NewestWriteOnly {
			want.ManagedFields = metajson.NewestWrite(want.ManagedFields)
		}
		if want == nil || !reflect.DeepEqual(&fast, want) {
			t.Fatalf("DecodeJSON(%+v) and Kubernetes' decoder differ on\n%q\nfast  %+v\nplain %+v", opts, data, &fast, want)
		}
		accepted = true
	}
	return accepted
}

// objects returns the objects the repository's fixtures hold: every item of
// the recorded LIST pages, every object of the recorded watch streams and of
// the bad stream (testdata/ at the root, watcher/testdata), whole frames too.
func objects(t testing.TB) [][]byte {
	var out [][]byte
	for _, name := range []string{wire.ListPage1, wire.ListPage2} {
		data := wire.MustRead(t, name)
		var l struct{ Items []json.RawMessage }
		if err := json.Unmarshal(data, &l); err != nil {
			t.Fatal(err)
		}
		for _, it := range l.Items {
			out = append(out, it)
		}
	}
	var streams [][]byte
	for _, name := range []string{wire.WatchList, wire.WatchGone} {
		streams = append(streams, wire.MustRead(t, name))
	}
	bad, err := os.ReadFile(filepath.Join("..", "..", "watcher", "testdata", "fixtures", "watch-stream-bad.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	streams = append(streams, bad)
	for _, stream := range streams {
		for _, frame := range bytes.Split(stream, []byte("\n")) {
			if len(bytes.TrimSpace(frame)) == 0 {
				continue
			}
			out = append(out, frame)
			var f struct{ Object json.RawMessage }
			if json.Unmarshal(frame, &f) == nil && len(f.Object) > 0 {
				out = append(out, f.Object)
			}
		}
	}
	return out
}

const head = `"apiVersion":"example.com/v1alpha1","kind":"MyResource"`

// cases are the inputs the fast decoder must get right or decline: unknown
// fields, nulls, repeated keys, escapes, big numbers, wrong types, keys in
// other cases, and the fields it hands to the oracle.
var cases = []string{
	`{` + head + `,"metadata":{"name":"a","namespace":"ns","uid":"u","resourceVersion":"5","generation":3,"creationTimestamp":"2026-12-01T10:00:00Z","labels":{"app":"x","k":""},"annotations":{"a":"b"},"finalizers":["f1","f2"]},"spec":{"message":"hi"},"status":{"phase":"Processed","message":"ok","observedGeneration":3}}`,
	`{` + head + `,"metadata":{"name":"a","generateName":"g-","selfLink":"/s","uid":"u","resourceVersion":"1"},"spec":{"message":""},"status":{"message":"s\u00e9"}}`,
	`{` + head + `,"metadata":{"name":"a","unknown":{"x":[1,2.5e-3,true,false,null,"s"]},"labels":{}},"extra":[],"spec":{"message":"hi","more":1}}`,
	`{` + head + `,"metadata":{"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"rs","uid":"u1","controller":true,"blockOwnerDeletion":false},{"apiVersion":"v1","kind":"ConfigMap","name":"c","uid":"u2"}]},"status":{"conditions":[{"type":"Ready","status":"False","observedGeneration":7,"lastTransitionTime":"2026-12-01T10:00:00Z","reason":"Waiting","message":"m"},{"type":"Synced","status":"True","lastTransitionTime":"2026-12-01T12:00:00+02:00","reason":"Done","message":""}]}}`,
	`{` + head + `,"metadata":{"name":null,"labels":null,"deletionTimestamp":null,"managedFields":null,"finalizers":null},"spec":null,"status":null}`,
	`{` + head + `,"metadata":{"name":"a","name":"b"}}`,
	`{` + head + `,"metadata":{"labels":{"a":"1"},"labels":null}}`,
	`{` + head + `,"metadata":{"labels":{"a":"1","a":"2"}}}`,
	`{` + head + `,"metadata":{"name":"a"},"metadata":{"namespace":"b"}}`,
	`{` + head + `,"metadata":{"name":"caf\u00e9 \"q\" \\ \n","labels":{"k":"v\/"}},"spec":{"message":"✓ ünïcode"}}`,
	`{` + head + `,"metadata":{"na\u006de":"escaped key","labels":{"\u0041":"b"}}}`,
	`{` + head + `,"metadata":{"name":"bad utf8 ` + "\xff\xfe" + `","labels":{"` + "\xff" + `":"v"}}}`,
	`{` + head + `,"metadata":{"generation":9223372036854775807},"status":{"observedGeneration":-9223372036854775808}}`,
	`{` + head + `,"metadata":{"generation":9223372036854775808}}`,
	`{` + head + `,"metadata":{"generation":1.0}}`,
	`{` + head + `,"metadata":{"generation":1e3}}`,
	`{` + head + `,"metadata":{"generation":-0}}`,
	`{` + head + `,"metadata":{"generation":01}}`,
	`{` + head + `,"metadata":{"generation":"1"}}`,
	`{` + head + `,"metadata":{"name":5}}`,
	`{` + head + `,"metadata":{"labels":{"a":null}}}`,
	`{` + head + `,"metadata":{"labels":{"a":1}}}`,
	`{` + head + `,"metadata":{"finalizers":["a",null]}}`,
	`{` + head + `,"metadata":[]}`,
	`{` + head + `,"spec":"text"}`,
	`{"APIVERSION":"example.com/v1alpha1","Kind":"MyResource","Metadata":{"name":"a"},"metadata":{"Name":"b","ResourceVersion":"1"},"Spec":{"message":"x"},"spec":{"Message":"y"}}`,
	`{` + head + `,"metadata":{"creationTimestamp":"2026-12-01T12:00:00+02:00","deletionTimestamp":"2026-12-01T10:00:00Z","deletionGracePeriodSeconds":30}}`,
	`{` + head + `,"metadata":{"creationTimestamp":"yesterday"}}`,
	`{` + head + `,"metadata":{"creationTimestamp":"2026-12-01T10:00:00\u005a"}}`,
	`{` + head + `,"metadata":{"creationTimestamp":1}}`,
	`{` + head + `,"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"c","uid":"u","controller":true}]}}`,
	`{` + head + `,"status":{"conditions":[{"type":"Ready","status":"True","lastTransitionTime":"2026-12-01T10:00:00Z","reason":"R","message":"m"}]}}`,
	`{` + head + `,"metadata":{"ownerReferences":[{"name":"a","name":"b"}]}}`,
	`{` + head + `,"metadata":{"ownerReferences":[{"controller":true,"controller":false}]}}`,
	`{` + head + `,"status":{"conditions":[{"type":"A","type":"B"}]}}`,
	`{` + head + `,"metadata":{"ownerReferences":[{"name":"a"}],"ownerReferences":[{"name":"b"}]},"status":{"conditions":[{"type":"A"}],"conditions":[{"reason":"r"}]}}`,
	`{` + head + `,"metadata":{"ownerReferences":[{"Kind":"K","APIVersion":"v","name":"a"}]}}`,
	`{` + head + `,"metadata":{"ownerReferences":[{"na\u006de":"escaped key"}]},"status":{"conditions":[{"typ\u0065":"escaped key"}]}}`,
	`{` + head + `,"metadata":{"ownerReferences":[{"controller":"true"}]}}`,
	`{` + head + `,"metadata":{"ownerReferences":[{"controller":1}]}}`,
	`{` + head + `,"metadata":{"ownerReferences":[{"controller":True}]}}`,
	`{` + head + `,"metadata":{"ownerReferences":[{"controller":truex}]}}`,
	`{` + head + `,"metadata":{"ownerReferences":[{"controller":nul}]}}`,
	`{` + head + `,"metadata":{"ownerReferences":[1,"a",[]]}}`,
	`{` + head + `,"metadata":{"ownerReferences":{"name":"a"}}}`,
	`{` + head + `,"metadata":{"ownerReferences":[{"uid":5}]}}`,
	`{` + head + `,"status":{"conditions":[{"observedGeneration":1.0}]}}`,
	`{` + head + `,"status":{"conditions":[{"observedGeneration":9223372036854775808}]}}`,
	`{` + head + `,"status":{"conditions":[{"observedGeneration":"3"}]}}`,
	`{` + head + `,"status":{"conditions":[{"lastTransitionTime":"yesterday"}]}}`,
	`{` + head + `,"status":{"conditions":[{"lastTransitionTime":""}]}}`,
	`{` + head + `,"status":{"conditions":[{"lastTransitionTime":"2026-12-01T10:00:00\u005a"}]}}`,
	`{` + head + `,"status":{"conditions":[{"status":true}]}}`,
	`{` + head + `,"status":{"conditions":[{"type":"A",}]}}`,
	`{` + head + `,"status":{"conditions":[{"type":"A"},]}}`,
	`{` + head + `,"status":{"conditions":[{"type":"A"}}}`,
	`{` + head + `,"metadata":{"managedFields":[{"manager":"m","operation":"Apply","apiVersion":"v","time":"2026-12-01T10:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{}},"subresource":"status"},{},{"time":null,"fieldsV1":null}]}}`,
	`{` + head + `,"metadata":{"managedFields":[null]}}`,
	`{` + head + `,"metadata":{"managedFields":[{"Time":"2026-12-01T10:00:00Z","time":"2026-12-01T11:00:00Z"}]}}`,
	`{` + head + `,"metadata":{"name":"a"}}  ` + "\n\t",
	`{` + head + `,"metadata":{"name":"a"}} {}`,
	`{` + head + `,"metadata":{"name":"a",}}`,
	`{` + head + `,"metadata":{"name":"a"}`,
	`{` + head + `,"metadata":{"name":"a` + "\x01" + `"}}`,
	`{` + head + `,"x":[1,2,]}`,
	`{` + head + `,"x":tru}`,
	`{` + head + `,"x":"\x"}`,
	`{` + head + `,"x":"\u12"}`,
	`{` + head + `,"x":-}`,
	`{` + head + `,"x":1.}`,
	`{` + head + `,"x":1e}`,
	`{` + head + `,"x":` + strings.Repeat("[", 1200) + strings.Repeat("]", 1200) + `}`,
	`{}`, `null`, `[]`, `"s"`, ``, `{`, `{"a"}`, `{"a":}`, `{"a" 1}`,
}

// handDecoded are inputs of the fields the fast decoder reads by hand
// (ownerReferences, conditions, managedFields) that it must take, not decline, so that the
// oracle checks its reading of them: null elements and members, escapes,
// keys in other cases, spaces, -0.
var handDecoded = []string{
	`{` + head + `,"metadata":{"ownerReferences":[]},"status":{"conditions":[]}}`,
	`{` + head + `,"metadata":{"ownerReferences":null},"status":{"conditions":null}}`,
	`{` + head + `,"metadata":{"ownerReferences":[null,{"name":"a"},null]},"status":{"conditions":[null,{"type":"Ready"},null]}}`,
	`{` + head + `,"metadata":{"ownerReferences":[{"name":null,"uid":null,"controller":null,"blockOwnerDeletion":null,"apiVersion":null,"kind":null}]},"status":{"conditions":[{"type":null,"status":null,"observedGeneration":null,"lastTransitionTime":null,"reason":null,"message":null}]}}`,
	`{` + head + `,"metadata":{"ownerReferences":[{"name":"caf\u00e9 \"q\" \\","uid":"u\/1","kind":"K\u0069nd"}]},"status":{"conditions":[{"type":"Re\u0061dy","message":"line\nnext ✓","reason":"` + "\xff" + `"}]}}`,
	`{` + head + `,"metadata":{"ownerReferences":[{"Name":"a","name":"b","UID":"U","Controller":true,"BlockOwnerDeletion":true}]},"status":{"conditions":[{"Type":"A","type":"B","Status":"True","Reason":"r","LastTransitionTime":"x","ObservedGeneration":"y"}]}}`,
	`{` + head + `,"metadata":{"ownerReferences":[{"blockOwnerDeletion":false ,"controller" : true }]}}`,
	`{` + head + `,"status":{"conditions":[{"observedGeneration":-0}]}}`,
	`{` + head + `,"metadata":{"managedFields":[null,{"manager":"m","time":null},null]}}`,
	// The newest write among times in the server's form and in others.
	`{` + head + `,"metadata":{"managedFields":[{"time":"2026-12-01T10:00:00Z"},{"time":"2026-12-01T12:00:00+01:00"},{"time":"2026-12-01T10:00:01Z"}]}}`,
	`{` + head + `,"metadata":{"managedFields":[{"time":"2026-12-01T10:30:00+01:00"},{"time":"2026-12-01T09:00:00Z"},{"time":"2026-12-01T09:40:00Z"}]}}`,
	`{` + head + `,"metadata":{"managedFields":[{"time":"2026-12-01T10:00:00Z"},{"time":"2026-12-01T10:00:00.5Z"},{"time":"2026-12-01T10:00:00Z"},{"time":"2025-12-31T23:59:59Z"}]}}`,
}

// The oracle sees the fast decoder's own reading of these, not a fallback.
func TestArraysOfObjectsAreReadByHand(t *testing.T) {
	for _, c := range handDecoded {
		if !checkAgainstOracle(t, []byte(c)) {
			t.Errorf("DecodeJSON declined\n%s", c)
		}
	}
}

func TestDecodeJSONAgreesWithKubernetes(t *testing.T) {
	for _, c := range append(cases, handDecoded...) {
		checkAgainstOracle(t, []byte(c))
	}
	for _, obj := range objects(t) {
		checkAgainstOracle(t, obj)
	}
}

// The fast decoder must take what kube-apiserver sends (else it is only a
// detour to the plain one): every recorded object, and the usual cases above
// (the first four, ownerReferences and conditions among them).
func TestDecodeJSONTakesTheServersObjects(t *testing.T) {
	n := 0
	for _, obj := range objects(t) {
		var r *MyResource
		if metajson.Plain(obj, &r) != nil || r == nil || r.Kind != "MyResource" {
			continue // frames, bookmarks, statuses, the bad stream's junk
		}
		n++
		if !checkAgainstOracle(t, obj) {
			t.Errorf("DecodeJSON declined a recorded object:\n%s", obj)
		}
	}
	if n < 5 {
		t.Fatalf("only %d recorded objects", n)
	}
	for _, c := range cases[:4] {
		if !checkAgainstOracle(t, []byte(c)) {
			t.Errorf("DecodeJSON declined\n%s", c)
		}
	}
}

// FuzzDecodeJSON searches for an input the fast decoder decodes otherwise
// than Kubernetes' decoder:
//
//	go test ./api/v1alpha1 -run '^$' -fuzz FuzzDecodeJSON -fuzztime 3m
func FuzzDecodeJSON(f *testing.F) {
	for _, c := range append(cases, handDecoded...) {
		f.Add([]byte(c))
	}
	for _, obj := range objects(f) {
		f.Add(obj)
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkAgainstOracle(t, data) })
}

// cpuLoop runs f b.N times and reports the CPU time the process took per call (the garbage collector included)
// besides the wall time: on a shared machine the wall time is the
// scheduler's as much as the decoder's.
func cpuLoop(b *testing.B, f func() error) {
	b.ReportAllocs()
	var before, after syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	for b.Loop() {
		if err := f(); err != nil {
			b.Fatal(err)
		}
	}
	syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// benchObject is what compare's BenchmarkDelivery streams.
const benchObject = `{"apiVersion":"example.com/v1alpha1","kind":"MyResource","metadata":{"name":"obj-000042","namespace":"bench","uid":"6f1e9a1c-0000-4000-8000-000000000042","resourceVersion":"1044","generation":1044,"creationTimestamp":"2026-12-01T00:00:00Z","labels":{"app":"compare"},"managedFields":[{"manager":"compare","operation":"Update","apiVersion":"example.com/v1alpha1","time":"2026-12-01T00:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{"f:labels":{".":{},"f:app":{}}},"f:spec":{".":{},"f:message":{}}}}]},"spec":{"message":"update 1044"},"status":{"phase":"Processed","message":"processed","observedGeneration":1044}}`

// One object as compare's BenchmarkDelivery streams it, decoded by the fast
// decoder (whole, and as a watch event needs it), by the oracle, and only
// checked (Skip: the floor of a one-pass decoder).
//
//	go test -run '^$' -bench DecodeObject ./api/v1alpha1
func BenchmarkDecodeObject(b *testing.B) {
	obj := []byte(benchObject)
	for _, opts := range []metajson.Options{{}, {NewestWriteOnly: true}} {
		b.Run(fmt.Sprintf("fast/newest-write-only=%v", opts.NewestWriteOnly), func(b *testing.B) {
			cpuLoop(b, func() error { var r MyResource; return r.DecodeJSON(obj, opts) })
		})
	}
	b.Run("plain", func(b *testing.B) {
		cpuLoop(b, func() error { var r *MyResource; return metajson.Plain(obj, &r) })
	})
	b.Run("skip", func(b *testing.B) {
		cpuLoop(b, func() error { _, err := metajson.NewDecoder(obj, metajson.Options{}).Skip(); return err })
	})
}
