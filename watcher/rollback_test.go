package watcher

import (
	"testing"

	"rawwatch/api/v1alpha1"
	"rawwatch/store"
)

// After an etcd restore without --bump-revision, an object written again
// reuses a resourceVersion the watcher saw, with other content: the relist
// after the time travel takes what the server lists, not the stored copy of
// the same UID and resourceVersion.
func TestARelistAfterARollbackTakesTheContentWrittenAgain(t *testing.T) {
	s := &answers{
		lists: []string{
			page("110", item("x", `,"uid":"u-x","resourceVersion":"101"`, `,"spec":{"message":"before the restore"}`)),
			page("103", item("x", `,"uid":"u-x","resourceVersion":"101"`, `,"spec":{"message":"written again"}`)),
		},
		watches: []string{expired},
	}
	p := play(t, s, Options[*v1alpha1.MyResource]{})
	if s.listed != 2 {
		t.Fatalf("%d lists, want 2 (the 410 relists)", s.listed)
	}
	x, _ := p.store.Get("ns/x")
	if x == nil || x.Spec.Message != "written again" {
		t.Errorf("ns/x after the relist: %v; want the content written again at resourceVersion 101", x)
	}
	if last := p.deltas[len(p.deltas)-1]; last.Type != store.Updated || last.Key != "ns/x" {
		t.Errorf("the relist's delta: %s %s, want Updated ns/x", last.Type, last.Key)
	}
}
