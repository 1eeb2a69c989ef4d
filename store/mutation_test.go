package store

import (
	"fmt"
	"strings"
	"testing"

	"rawwatch/api/v1alpha1"
	"rawwatch/openfinding"
)

// The mutation detector is on in every test (this binary runs no
// benchmark), and a store changed in place by a reader panics at its next
// write of that object: by an event, a deletion, a relist or Retain.
func TestAnObjectChangedInPlacePanicsAtItsNextWrite(t *testing.T) {
	if New[*v1alpha1.MyResource]().detector == nil {
		t.Fatal("the mutation detector is off in a test")
	}
	for name, write := range map[string]func(s *Store[*v1alpha1.MyResource]){
		"Upsert": func(s *Store[*v1alpha1.MyResource]) { s.Upsert(obj("ns", "a", "2")) },
		"Delete": func(s *Store[*v1alpha1.MyResource]) { s.Delete(obj("ns", "a", "2")) },
		"relist": func(s *Store[*v1alpha1.MyResource]) { r := s.NewReplacement(); r.Add(obj("ns", "b", "3")); r.Commit() },
		"Retain": func(s *Store[*v1alpha1.MyResource]) { s.Retain(func(*v1alpha1.MyResource) bool { return false }) },
		"Check": func(s *Store[*v1alpha1.MyResource]) {
			if err := s.CheckMutations(); err != nil {
				panic(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := New[*v1alpha1.MyResource]()
			s.Upsert(obj("ns", "a", "1"))
			a, _ := s.Get("ns/a")
			a.Spec.Message = "changed by a reader" // the bug
			if got := panicOf(func() { write(s) }); !strings.Contains(got, "ns/a was changed in place") || !strings.Contains(got, "changed by a reader") {
				t.Errorf("%s after ns/a was changed in place: %q, want a panic naming ns/a and the change", name, got)
			}
		})
	}
}

// A changed object no write touches is found within as many writes of
// others as the store holds (at least 64); and an edit of a labels map that
// objects share (Share) is an edit of each.
func TestAnObjectChangedInPlaceIsFoundByTheWritesOfOthers(t *testing.T) {
	s := shared()
	s.Upsert(labelled("a", "1", map[string]string{"app": "x"}))
	s.Upsert(labelled("b", "1", map[string]string{"app": "x"}))
	b, _ := s.Get("ns/b")
	b.Labels["edited"] = "in place" // a's too: one map
	got := panicOf(func() {
		for i := range 64 {
			s.Upsert(obj("ns", fmt.Sprint("other-", i), "1"))
		}
	})
	if !strings.Contains(got, "was changed in place") || !strings.Contains(got, "edited") {
		t.Errorf("64 writes after ns/b's shared labels were edited: %q, want a panic", got)
	}
}

// Readers that only read, and the store's own writes, never panic: every
// other test of the store, the watcher and the controller runs with the
// detector on.
func TestTheDetectorIsQuietWithoutAChange(t *testing.T) {
	s := shared()
	for i := range 200 {
		s.Upsert(labelled(fmt.Sprint(i%50), fmt.Sprint(i), map[string]string{"app": "x", "n": fmt.Sprint(i % 3)}))
	}
	r := s.NewReplacement()
	for i := range 40 {
		r.Add(labelled(fmt.Sprint(i), fmt.Sprint(150+i), map[string]string{"app": "x", "n": fmt.Sprint(i % 3)}))
	}
	r.Commit()
	if err := s.CheckMutations(); err != nil {
		t.Fatal(err)
	}
}

// panicOf is what f panics with ("" if it returns).
func panicOf(f func()) (got string) {
	defer func() {
		if r := recover(); r != nil {
			got = fmt.Sprint(r)
		}
	}()
	f()
	return ""
}

// An object handed out as it left the store (a Deleted delta's object, an
// Updated delta's Old) is the handler's to read for as long as it holds it,
// and a reader may hold it a while (a worker, a queue) before it writes to
// it: with Share, its labels map is shared (here the deleted object's final
// state holds the stored object's map). The edit is still reported, however
// many writes of other objects came first, as client-go's detector, which
// keeps what it checks for minutes and compares it every second, reports it.
func TestAnEditOfAnObjectThatLeftTheStoreIsFoundAfterOtherWrites(t *testing.T) {
	openfinding.Skip(t)
	for name, leave := range map[string]func(s *Store[*v1alpha1.MyResource]) *v1alpha1.MyResource{
		"a Deleted delta's object": func(s *Store[*v1alpha1.MyResource]) *v1alpha1.MyResource {
			d, _ := s.Delete(labelled("a", "2", map[string]string{"app": "a"}))
			return d.Object
		},
		"an Updated delta's Old": func(s *Store[*v1alpha1.MyResource]) *v1alpha1.MyResource {
			d, _, _ := s.Upsert(labelled("a", "2", map[string]string{"app": "b"}))
			return d.Old
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := shared()
			s.Upsert(labelled("a", "1", map[string]string{"app": "a"}))
			left := leave(s)
			for i := range 64 { // a busy store: the others' writes go on
				s.Upsert(obj("ns", fmt.Sprint("other-", i), "1"))
			}
			left.Labels["edited"] = "in place" // the handler's bug, a little later
			got := panicOf(func() {
				if err := s.CheckMutations(); err != nil {
					panic(err)
				}
				for i := range 200 {
					s.Upsert(obj("ns", fmt.Sprint("more-", i), "1"))
				}
			})
			if !strings.Contains(got, "edited") {
				t.Errorf("%s edited after 64 writes of others: CheckMutations and 200 more writes reported nothing (%q)", name, got)
			}
		})
	}
}
