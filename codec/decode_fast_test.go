package codec

import (
	"reflect"
	"strings"
	"testing"

	"rawwatch/api/v1alpha1"
	"rawwatch/codec/metajson"
	"rawwatch/watcher"
)

// Kubernetes decodes objects with keys matched case-sensitively
// (sigs.k8s.io/json); a key in another case is an unknown field. The Codec
// does the same on both of its paths: T's own decoder, and the plain one it
// falls back to (here forced by an escaped key, which the fast one declines).
func TestCodecMatchesKeysCaseSensitively(t *testing.T) {
	for name, obj := range map[string]string{
		"fast path":  `{"apiVersion":"example.com/v1alpha1","kind":"MyResource","metadata":{"name":"a","resourceVersion":"1","Labels":{"x":"y"}},"Spec":{"message":"x"},"spec":{"Message":"y"}}`,
		"plain path": `{"apiVersion":"example.com/v1alpha1","kind":"MyResource","metadata":{"n\u0061me":"a","resourceVersion":"1","Labels":{"x":"y"}},"Spec":{"message":"x"},"spec":{"Message":"y"}}`,
	} {
		obj, err := codec.Decode("test", []byte(obj))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if obj.Name != "a" || obj.Spec.Message != "" || obj.Labels != nil {
			t.Errorf("%s: name %q, spec.message %q, labels %v; want a, empty, none (Spec, Message and Labels are unknown fields)",
				name, obj.Name, obj.Spec.Message, obj.Labels)
		}
	}
}

// fastProbe is a MyResource whose decoder records how it was called.
type fastProbe struct {
	v1alpha1.MyResource
}

var probeCalls []metajson.Options

func (p *fastProbe) DecodeJSONFrom(d *metajson.Decoder) error {
	probeCalls = append(probeCalls, d.Options())
	return p.MyResource.DecodeJSONFrom(d)
}

// A type with a JSONDecoder is decoded by it: whole for a list item, with
// managedFields reduced to the newest write for a watch event; when it
// declines, the plain decoder's object is the answer.
func TestCodecUsesTheTypesDecoder(t *testing.T) {
	c := JSON[*fastProbe]{GVK: v1alpha1.GroupVersionKind}
	const mf = `"managedFields":[{"manager":"a","time":"2026-12-01T10:00:00Z","fieldsV1":{"f:spec":{}}},{"manager":"b","time":"2026-12-01T11:00:00Z"}]`
	obj := `{"apiVersion":"example.com/v1alpha1","kind":"MyResource","metadata":{"name":"a","resourceVersion":"7",` + mf + `},"spec":{"message":"m"}}`

	probeCalls = nil
	got, err := c.Decode("list item", []byte(obj))
	if err != nil || len(probeCalls) != 1 || probeCalls[0].NewestWriteOnly || len(got.ManagedFields) != 2 {
		t.Fatalf("list item: calls %+v, err %v, managedFields %+v; want one whole decode", probeCalls, err, got.ManagedFields)
	}

	probeCalls = nil
	dec := newEventDecoder(strings.NewReader(`{"type":"MODIFIED","object":`+obj+"}\n"), c)
	ev, err := dec.Next()
	if err != nil || len(probeCalls) != 1 || !probeCalls[0].NewestWriteOnly {
		t.Fatalf("event: calls %+v, err %v; want one decode with NewestWriteOnly", probeCalls, err)
	}
	if at, ok := watcher.WrittenAt(ev.Object); !ok || at.UTC().Hour() != 11 || len(ev.Object.ManagedFields) != 1 {
		t.Fatalf("event: written at %v (%v), managedFields %+v; want the 11:00 entry alone", at, ok, ev.Object.ManagedFields)
	}

	// Declined (a repeated key): the plain decoder decides, and merges.
	probeCalls = nil
	repeated := strings.Replace(obj, `"spec":{"message":"m"}`, `"metadata":{"uid":"u"}`, 1)
	got, err = c.Decode("list item", []byte(repeated))
	var want *fastProbe
	if perr := metajson.Plain([]byte(repeated), &want); perr != nil {
		t.Fatal(perr)
	}
	if err != nil || len(probeCalls) != 1 || !reflect.DeepEqual(got, want) || got.UID != "u" || got.Name != "a" {
		t.Fatalf("declined: calls %+v, err %v\ngot  %+v\nwant %+v", probeCalls, err, got, want)
	}
}

// What decoding a watch event costs in allocations, the benchmark's frame
// (compare's replayData) read by Next: the object, its strings, maps and
// times, and nothing per frame besides (no envelope struct, no error target,
// no Decoder, no apiVersion, kind or namespace copied again): 7, the object,
// one block for its five plain strings (metajson's Batch), the label map and
// its two strings, the managedFields entry with its time; the bound leaves two
// for a Go release whose maps allocate otherwise.
func TestNextAllocatesForTheObjectOnly(t *testing.T) {
	const frame = `{"object":{"apiVersion":"example.com/v1alpha1","kind":"MyResource","metadata":{"creationTimestamp":"2026-12-01T00:00:00Z","generation":7,"labels":{"app":"compare"},"managedFields":[{"apiVersion":"example.com/v1alpha1","fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{"f:labels":{".":{},"f:app":{}}},"f:spec":{".":{},"f:message":{}}},"manager":"compare","operation":"Update","time":"2026-12-01T00:00:00Z"}],"name":"obj-000005","namespace":"bench","resourceVersion":"7","uid":"6f1e9a1c-0000-4000-8000-000000000005"},"spec":{"message":"update 7"},"status":{"message":"processed","observedGeneration":7,"phase":"Processed"}},"type":"MODIFIED"}` + "\n"
	const runs = 200
	stream := strings.NewReader(strings.Repeat(frame, runs+1))
	d := newEventDecoder(stream, codec)
	allocs := testing.AllocsPerRun(runs, func() {
		if ev, err := d.Next(); err != nil || ev.Object.Status.Phase != "Processed" {
			t.Fatalf("%+v, %v", ev, err)
		}
	})
	if allocs > 9 {
		t.Errorf("%.1f allocations per event, want at most 9", allocs)
	}
}
