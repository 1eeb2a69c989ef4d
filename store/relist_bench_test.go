package store

import (
	"fmt"
	"testing"

	"rawwatch/api/v1alpha1"
	"rawwatch/codec/metajson"
)

// BenchmarkRelistUnchanged is a relist of 10,000 objects that did not
// change (the usual relist, after a 410): each listed object, decoded as
// the watcher decodes it, is found to be the stored one (its UID,
// resourceVersion and content) and dropped.
//
//	go test -run '^$' -bench RelistUnchanged ./store
func BenchmarkRelistUnchanged(b *testing.B) {
	const n = 10000
	frames := make([][]byte, n)
	for i := range frames {
		frames[i] = fmt.Appendf(nil, `{"apiVersion":"example.com/v1alpha1","kind":"MyResource","metadata":{"name":"obj-%05d","namespace":"compare-1733370000","uid":"8c5e3f0a-4b6e-4f3d-9a51-%012d","resourceVersion":"%d","generation":1,"creationTimestamp":"2026-12-05T02:16:10Z","labels":{"app":"compare"},"managedFields":[{"manager":"compare","operation":"Update","apiVersion":"example.com/v1alpha1","time":"2026-12-05T02:16:10Z","fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{"f:labels":{".":{},"f:app":{}}},"f:spec":{".":{},"f:message":{}}}}]},"spec":{"message":"created"},"status":{"phase":"Processed","message":"processed","observedGeneration":1}}`, i, i, 100000+i)
	}
	decode := func(f []byte) *v1alpha1.MyResource {
		obj := new(v1alpha1.MyResource)
		if err := obj.DecodeJSON(f, metajson.Options{NewestWriteOnly: true}); err != nil {
			b.Fatal(err)
		}
		return obj
	}
	s := New[*v1alpha1.MyResource]()
	s.Share()
	for _, f := range frames {
		s.Upsert(decode(f))
	}
	for b.Loop() {
		r := s.NewReplacement()
		for _, f := range frames {
			r.Add(decode(f))
		}
		if d := r.Commit(); len(d) != 0 {
			b.Fatalf("%d deltas from a relist of unchanged objects", len(d))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/object")
}
