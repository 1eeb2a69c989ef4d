package store

import (
	"fmt"
	"runtime"
	"testing"

	"rawwatch/api/v1alpha1"
	"rawwatch/codec/metajson"
)

// BenchmarkHeapPerObject is what the store keeps alive per cached object:
// 10,000 objects shaped as the comparison harness creates them (one label,
// a spec message, the one managedFields entry of a create), decoded as the
// watcher decodes them and upserted, then the live heap after a GC over the
// heap before, per object (heap-B/object). It counts the objects, the
// store's map and keys, and whatever the store shares between objects: in
// a store that shares (Share) and in one that does not.
func BenchmarkHeapPerObject(b *testing.B) {
	for _, share := range []bool{true, false} {
		b.Run(map[bool]string{true: "shared", false: "unshared"}[share], func(b *testing.B) { heapPerObject(b, share) })
	}
}

func heapPerObject(b *testing.B, share bool) {
	const n = 10000
	frames := make([][]byte, n)
	for i := range frames {
		frames[i] = fmt.Appendf(nil, `{"apiVersion":"example.com/v1alpha1","kind":"MyResource","metadata":{"name":"obj-%05d","namespace":"compare-1733370000","uid":"8c5e3f0a-4b6e-4f3d-9a51-%012d","resourceVersion":"%d","generation":1,"creationTimestamp":"2026-12-05T02:16:10Z","labels":{"app":"compare"},"managedFields":[{"manager":"compare","operation":"Update","apiVersion":"example.com/v1alpha1","time":"2026-12-05T02:16:10Z","fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{"f:labels":{".":{},"f:app":{}}},"f:spec":{".":{},"f:message":{}}}}]},"spec":{"message":"created"}}`, i, i, 100000+i)
	}
	var perObject float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		s := New[*v1alpha1.MyResource]()
		if share {
			s.Share()
		}
		for _, f := range frames {
			obj := new(v1alpha1.MyResource)
			if err := obj.DecodeJSON(f, metajson.Options{NewestWriteOnly: true}); err != nil {
				b.Fatal(err)
			}
			s.Upsert(obj)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if s.Len() != n {
			b.Fatalf("%d objects stored, want %d", s.Len(), n)
		}
		perObject = float64(after.HeapAlloc-before.HeapAlloc) / n
		runtime.KeepAlive(s)
	}
	b.ReportMetric(perObject, "heap-B/object")
}
