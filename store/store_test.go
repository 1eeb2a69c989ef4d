package store

import (
	"fmt"
	"sort"
	"sync"
	"testing"
	"unsafe"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"rawwatch/api/v1alpha1"
)

func obj(ns, name, rv string) *v1alpha1.MyResource {
	return &v1alpha1.MyResource{ObjectMeta: metav1.ObjectMeta{
		Namespace: ns, Name: name, ResourceVersion: rv,
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
	}}
}

// withUID is o with the UID uid.
func withUID(o *v1alpha1.MyResource, uid types.UID) *v1alpha1.MyResource {
	o.UID = uid
	return o
}

func names(objs []*v1alpha1.MyResource) []string {
	var out []string
	for _, o := range objs {
		out = append(out, KeyOf(o))
	}
	sort.Strings(out)
	return out
}

func TestAKeyIsNamespaceSlashNameOrTheNameAlone(t *testing.T) {
	if k := KeyOf(obj("ns", "a", "")); k != "ns/a" {
		t.Fatal(k)
	}
	if k := Key("", "cluster-wide"); k != "cluster-wide" {
		t.Fatal(k)
	}
}

func TestUpsertDeleteAndIndex(t *testing.T) {
	s := New[*v1alpha1.MyResource]()
	d, changed, _ := s.Upsert(obj("a", "x", "1"))
	if !changed || d.Type != Added || d.Key != "a/x" {
		t.Fatalf("first upsert: %+v %v", d, changed)
	}
	if got, _ := s.Get("a/x"); got.ManagedFields != nil {
		t.Fatal("managedFields must be stripped before storing")
	}
	// Repeated strings are shared with Share only: two objects of one
	// namespace hold the same bytes for it, not two copies.
	s.Upsert(obj(string([]byte("a")), "y2", "1"))
	x, _ := s.Get("a/x")
	y, _ := s.Get("a/y2")
	if unsafe.StringData(x.Namespace) == unsafe.StringData(y.Namespace) {
		t.Error("namespace strings are interned in a store that does not Share")
	}
	s.Delete(y)
	sh := shared()
	sh.Upsert(obj("a", "x", "1"))
	sh.Upsert(obj(string([]byte("a")), "y2", "1"))
	x, _ = sh.Get("a/x")
	y, _ = sh.Get("a/y2")
	if unsafe.StringData(x.Namespace) != unsafe.StringData(y.Namespace) {
		t.Error("namespace strings are not interned in a store that does Share")
	}
	if _, changed, _ := s.Upsert(obj("a", "x", "1")); changed {
		t.Fatal("same resourceVersion again must be a no-op")
	}
	d, changed, _ = s.Upsert(obj("a", "x", "2"))
	if !changed || d.Type != Updated || d.Old.ResourceVersion != "1" || d.Object.ResourceVersion != "2" {
		t.Fatalf("update: %+v", d)
	}
	s.Upsert(obj("a", "y", "3"))
	s.Upsert(obj("b", "z", "4"))
	if s.Len() != 3 || fmt.Sprint(s.Keys()) != "[a/x a/y b/z]" {
		t.Fatalf("keys = %v", s.Keys())
	}
	d, known := s.Delete(obj("b", "z", "5"))
	if !known || d.Type != Deleted || d.FinalStateUnknown || d.Object.ResourceVersion != "5" {
		t.Fatalf("delete: %+v", d)
	}
	if _, ok := s.Get("b/z"); ok {
		t.Fatal("deleted object still stored")
	}
	if _, known := s.Delete(obj("b", "z", "6")); known {
		t.Fatal("deleting an unknown key must report it unknown")
	}
}

func TestReplaceProducesDeltasAndKeepsUnchangedObjects(t *testing.T) {
	s := New[*v1alpha1.MyResource]()
	for _, o := range []*v1alpha1.MyResource{obj("a", "same", "1"), obj("a", "changed", "2"), obj("a", "gone", "3"), obj("b", "broken", "4")} {
		s.Upsert(o)
	}
	before, _ := s.Get("a/same")

	r := s.NewReplacement()
	r.Add(obj("a", "same", "1"))
	r.Add(obj("a", "changed", "20"))
	r.Add(obj("c", "new", "30"))
	r.Keep("b/broken", "") // listed, but undecodable: not a deletion
	deltas := r.Commit()

	got := map[string]Delta[*v1alpha1.MyResource]{}
	for _, d := range deltas {
		got[d.Key] = d
	}
	if len(deltas) != 3 {
		t.Fatalf("deltas = %+v", deltas)
	}
	if d := got["a/changed"]; d.Type != Updated || d.Old.ResourceVersion != "2" {
		t.Errorf("changed: %+v", d)
	}
	if d := got["c/new"]; d.Type != Added {
		t.Errorf("new: %+v", d)
	}
	if d := got["a/gone"]; d.Type != Deleted || !d.FinalStateUnknown || d.Object.ResourceVersion != "3" {
		t.Errorf("gone: %+v (must carry the last known object)", d)
	}
	if after, _ := s.Get("a/same"); after != before {
		t.Error("an unchanged object must keep its stored copy (no second copy in memory)")
	}
	if _, ok := s.Get("b/broken"); !ok {
		t.Error("a kept key must stay in the store")
	}
	if fmt.Sprint(s.Keys()) != "[a/changed a/same b/broken c/new]" {
		t.Errorf("keys after replace: %v", s.Keys())
	}
}

// Readers and a writer (events and relists) may use the store at once (run
// with -race): a reader never sees more objects than were written.
func TestReadersAndAWriterMayUseTheStoreAtOnce(t *testing.T) {
	s := New[*v1alpha1.MyResource]()
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 2000 {
			s.Upsert(obj("ns", fmt.Sprint(i%50), fmt.Sprint(i)))
			if i%100 == 0 {
				r := s.NewReplacement()
				r.Add(obj("ns", "0", fmt.Sprint(i)))
				r.Commit()
			}
		}
	})
	for range 4 {
		wg.Go(func() {
			for range 2000 {
				for _, o := range s.List() {
					if _, ok := s.Get(KeyOf(o)); !ok && s.Len() > 50 {
						t.Error("impossible store size")
					}
				}
			}
		})
	}
	wg.Wait()
}

// A key deleted and re-created while the watch was down is listed with a new
// UID: the relist reports the old object deleted and the new one added.
func TestReplaceReportsAReCreatedKeyAsDeletedThenAdded(t *testing.T) {
	s := New[*v1alpha1.MyResource]()
	old := withUID(obj("a", "phoenix", "1"), "uid-old")
	s.Upsert(old)
	reborn := withUID(obj("a", "phoenix", "9"), "uid-new")
	r := s.NewReplacement()
	r.Add(reborn)
	deltas := r.Commit()
	if len(deltas) != 2 ||
		deltas[0].Type != Deleted || deltas[0].Object.UID != "uid-old" || !deltas[0].FinalStateUnknown ||
		deltas[1].Type != Added || deltas[1].Object.UID != "uid-new" {
		t.Fatalf("deltas = %+v, want Deleted uid-old (final state unknown) then Added uid-new", deltas)
	}
	if got, _ := s.Get("a/phoenix"); got.UID != "uid-new" {
		t.Fatalf("store holds %s", got.UID)
	}
}

// Objects dropped by Retain are gone without a trace: a relist after it
// reports no deletion for them (they moved to another shard, they were not
// deleted), and the ones kept are not reported changed.
func TestRetainDropsWithoutDeltas(t *testing.T) {
	s := New[*v1alpha1.MyResource]()
	for _, name := range []string{"a", "b", "c"} {
		s.Upsert(obj("ns", name, "1"))
	}
	if n := s.Retain(func(o *v1alpha1.MyResource) bool { return o.Name != "b" }); n != 1 {
		t.Fatalf("Retain dropped %d, want 1", n)
	}
	if got := s.Keys(); fmt.Sprint(got) != "[ns/a ns/c]" {
		t.Fatalf("kept %v", got)
	}
	r := s.NewReplacement()
	r.Add(obj("ns", "a", "1"))
	r.Add(obj("ns", "c", "1"))
	r.Add(obj("ns", "d", "1"))
	if ds := r.Commit(); len(ds) != 1 || ds[0].Type != Added || ds[0].Key != "ns/d" {
		t.Fatalf("relist after Retain: %+v, want only ns/d Added", ds)
	}
}

// A transform trims every object the store takes — from a watch event, a
// relist and a deletion alike — and DropAnnotations deletes the named
// annotations only.
func TestTransformTrimsEveryObjectTaken(t *testing.T) {
	const big, keep = "kubectl.kubernetes.io/last-applied-configuration", "example.com/keep"
	annotated := func(name, rv string, a map[string]string) *v1alpha1.MyResource {
		o := obj("ns", name, rv)
		o.Annotations = a
		return o
	}
	s := New[*v1alpha1.MyResource]()
	s.SetTransform(DropAnnotations[*v1alpha1.MyResource](big))

	s.Upsert(annotated("a", "1", map[string]string{big: "{...}", keep: "1"}))
	s.Upsert(annotated("b", "1", map[string]string{big: "{...}"}))
	if a, _ := s.Get("ns/a"); len(a.Annotations) != 1 || a.Annotations[keep] != "1" {
		t.Errorf("upsert: annotations %v, want only %s", a.Annotations, keep)
	}
	if b, _ := s.Get("ns/b"); b.Annotations != nil {
		t.Errorf("upsert: annotations %v, want none (nil)", b.Annotations)
	}

	r := s.NewReplacement()
	r.Add(annotated("a", "2", map[string]string{big: "{...}", keep: "2"}))
	r.Add(annotated("c", "1", map[string]string{big: "{...}"}))
	r.Commit()
	if a, _ := s.Get("ns/a"); len(a.Annotations) != 1 || a.Annotations[keep] != "2" {
		t.Errorf("relist: annotations %v, want only %s", a.Annotations, keep)
	}
	if c, _ := s.Get("ns/c"); c.Annotations != nil {
		t.Errorf("relist: annotations %v, want none", c.Annotations)
	}

	d, _ := s.Delete(annotated("c", "2", map[string]string{big: "{...}"}))
	if d.Object.Annotations != nil {
		t.Errorf("delete: the final state's annotations %v, want none", d.Object.Annotations)
	}
}

// A key written under another UID holds another object: the stored one is
// Deleted (its final state unknown), the new one Added; a deletion under
// another UID deletes the stored one, its final state unknown.
func TestAKeyUnderAnotherUIDIsAnotherObject(t *testing.T) {
	s := New[*v1alpha1.MyResource]()
	first := withUID(obj("ns", "a", "1"), "u-1")
	s.Upsert(first)
	second := withUID(obj("ns", "a", "2"), "u-2")
	d, changed, gone := s.Upsert(second)
	if gone.Type != Deleted || !gone.FinalStateUnknown || gone.Object != first || !changed || d.Type != Added || d.Object != second {
		t.Errorf("upsert under another UID: %+v then %+v, want Deleted (the first, final state unknown) then Added", gone, d)
	}
	third := withUID(obj("ns", "a", "3"), "u-3")
	if d, known := s.Delete(third); !known || d.Type != Deleted || !d.FinalStateUnknown || d.Object != second {
		t.Errorf("delete under another UID: %+v %v, want the stored one, final state unknown", d, known)
	}
}
