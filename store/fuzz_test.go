package store

import (
	"fmt"
	"slices"
	"testing"

	"rawwatch/api/v1alpha1"
)

// Fuzz tests of the store's and the queue's invariants. Each input byte
// string is read as a program of operations, run against the real type and
// against a model (a plain map, a plain list) that states the rules in the
// simplest way; after every operation the two must agree. The seed corpus is
// in testdata/fuzz/; to search longer:
//
//	go test ./store -run '^$' -fuzz FuzzStore -fuzztime 5m
//	go test ./store -run '^$' -fuzz FuzzQueue -fuzztime 5m

// program reads operations from fuzz input.
type program struct{ data []byte }

func (p *program) next() (byte, bool) {
	if len(p.data) == 0 {
		return 0, false
	}
	b := p.data[0]
	p.data = p.data[1:]
	return b, true
}

// object returns the next object: 8 names over 2 namespaces, 8 resourceVersions.
func (p *program) object() *v1alpha1.MyResource {
	a, _ := p.next()
	b, _ := p.next()
	return obj(fmt.Sprint("ns", a/8%2), fmt.Sprint("o", a%8), fmt.Sprint(b%8))
}

// The store, against a map from key to resourceVersion: every write returns
// exactly the delta the model says, and the store's contents and namespace
// index always equal the model's.
func FuzzStore(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		s := New[*v1alpha1.MyResource]()
		model := map[string]string{} // key → resourceVersion
		p := &program{data}
		for op, ok := p.next(); ok; op, ok = p.next() {
			switch op % 4 {
			case 0: // a watch ADDED or MODIFIED event
				o := p.object()
				key, rv := KeyOf(o), o.ResourceVersion
				old, had := model[key]
				d, changed := s.Upsert(o)
				switch {
				case had && old == rv:
					if changed {
						t.Fatalf("upsert of %s at the stored RV %s reported a change", key, rv)
					}
				case had:
					if !changed || d.Type != Updated || d.Old.ResourceVersion != old || d.Object != o {
						t.Fatalf("upsert %s %s→%s: delta %+v", key, old, rv, d)
					}
				default:
					if !changed || d.Type != Added || d.Object != o {
						t.Fatalf("upsert of new %s: delta %+v", key, d)
					}
				}
				model[key] = rv
			case 1: // a watch DELETED event
				o := p.object()
				key := KeyOf(o)
				_, had := model[key]
				d, known := s.Delete(o)
				if known != had || (had && (d.Type != Deleted || d.FinalStateUnknown || d.Object != o)) {
					t.Fatalf("delete %s (stored: %v): delta %+v, known %v", key, had, d, known)
				}
				delete(model, key)
			case 2: // a garbled DELETED event: only the key is known
				o := p.object()
				key := KeyOf(o)
				old, had := model[key]
				d, known := s.DeleteKey(key, nil)
				if known != had || (had && (d.Type != Deleted || !d.FinalStateUnknown || d.Object.ResourceVersion != old)) {
					t.Fatalf("delete key %s: delta %+v, known %v", key, d, known)
				}
				delete(model, key)
			case 3: // a relist of n objects, some of them undecodable (kept)
				n, _ := p.next()
				listed, kept := map[string]string{}, map[string]bool{}
				r := s.NewReplacement()
				for range n % 8 {
					o := p.object()
					if o.ResourceVersion == "7" { // stands for an item that did not decode
						kept[KeyOf(o)] = true
						r.Keep(KeyOf(o))
						continue
					}
					listed[KeyOf(o)] = o.ResourceVersion
					r.Add(o)
				}
				want := map[string]string{}
				for k, rv := range model {
					if kept[k] {
						want[k] = rv
					}
				}
				for k, rv := range listed {
					want[k] = rv
				}
				got := map[string]DeltaType{}
				for _, d := range r.Commit() {
					if _, dup := got[d.Key]; dup {
						t.Fatalf("relist: two deltas for %s", d.Key)
					}
					got[d.Key] = d.Type
					old, had := model[d.Key]
					switch d.Type {
					case Added:
						if had || want[d.Key] != d.Object.ResourceVersion {
							t.Fatalf("relist: Added %s, stored before: %v", d.Key, had)
						}
					case Updated:
						if !had || old == want[d.Key] || d.Old.ResourceVersion != old {
							t.Fatalf("relist: Updated %s %s→%s", d.Key, old, want[d.Key])
						}
					case Deleted:
						if _, stays := want[d.Key]; !had || stays || !d.FinalStateUnknown || d.Object.ResourceVersion != old {
							t.Fatalf("relist: Deleted %+v", d)
						}
					}
				}
				for k, rv := range want {
					if old, had := model[k]; (!had || old != rv) && got[k] == 0 {
						t.Fatalf("relist: %s changed (%q→%q) with no delta", k, old, rv)
					}
				}
				for k := range model {
					if _, stays := want[k]; !stays && got[k] != Deleted {
						t.Fatalf("relist: %s vanished with no Deleted delta", k)
					}
				}
				model = want
			}
			checkStore(t, s, model)
		}
	})
}

func checkStore(t *testing.T, s *Store[*v1alpha1.MyResource], model map[string]string) {
	t.Helper()
	var keys []string
	for k := range model {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if got := s.Keys(); !slices.Equal(got, keys) || s.Len() != len(keys) {
		t.Fatalf("store keys %v, model %v", got, keys)
	}
	inIndex := 0
	for _, ns := range []string{"ns0", "ns1"} {
		for _, o := range s.ListNamespace(ns) {
			inIndex++
			if o.Namespace != ns || model[KeyOf(o)] != o.ResourceVersion {
				t.Fatalf("index of %s holds %s at %s", ns, KeyOf(o), o.ResourceVersion)
			}
		}
	}
	if inIndex != len(model) {
		t.Fatalf("namespace index holds %d objects, store %d", inIndex, len(model))
	}
	for k, rv := range model {
		if o, ok := s.Get(k); !ok || o.ResourceVersion != rv || o.ManagedFields != nil {
			t.Fatalf("Get(%s) = %v %v, want rv %s without managedFields", k, o, ok, rv)
		}
	}
}

// The queue, single-threaded, against a model of its rules: a key waits at
// most once; a key being processed is never handed out; a key added while
// processed comes back exactly once after Done; keys come out in the order
// they became dirty.
func FuzzQueue(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		q := NewQueue(nil)
		var order []string // model: dirty keys waiting, in order
		dirty, processing := map[string]bool{}, map[string]bool{}
		p := &program{data}
		for op, ok := p.next(); ok; op, ok = p.next() {
			key := fmt.Sprint("k", op/4%6)
			switch op % 4 {
			case 0, 1: // Add (twice as likely, so that keys pile up)
				q.Add(key)
				if !dirty[key] {
					dirty[key] = true
					if !processing[key] {
						order = append(order, key)
					}
				}
			case 2: // Get, when the model says one is ready (Get would block otherwise)
				if len(order) == 0 {
					continue
				}
				got, shutdown := q.Get()
				if shutdown || got != order[0] {
					t.Fatalf("Get = %q (shutdown %v), model says %q", got, shutdown, order[0])
				}
				if processing[got] {
					t.Fatalf("%s handed out while being processed", got)
				}
				order = order[1:]
				processing[got], dirty[got] = true, false
			case 3: // Done, for the key the byte names if it is being processed
				if !processing[key] {
					continue
				}
				q.Done(key)
				delete(processing, key)
				if dirty[key] {
					order = append(order, key)
				}
			}
			if q.Len() != len(order) {
				t.Fatalf("queue length %d, model %d (%v)", q.Len(), len(order), order)
			}
		}
		q.ShutDown()
		if _, shutdown := q.Get(); !shutdown {
			t.Fatal("Get after ShutDown must report shutdown")
		}
		for key := range processing {
			q.Done(key)
		}
		q.WaitIdle()
	})
}
