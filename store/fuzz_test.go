package store

import (
	"fmt"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"rawwatch/api/v1alpha1"
)

// Fuzz tests of the store's invariants. Each input byte
// string is read as a program of operations, run against the real type and
// against a model (a plain map, a plain list) that states the rules in the
// simplest way; after every operation the two must agree. The seed corpus is
// in testdata/fuzz/; to search longer:
//
//	go test ./store -run '^$' -fuzz FuzzStore -fuzztime 5m

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

// object returns the next object: 8 names over 2 namespaces, 8
// resourceVersions, 2 UIDs (two incarnations of a name).
func (p *program) object() *v1alpha1.MyResource {
	a, _ := p.next()
	b, _ := p.next()
	o := obj(fmt.Sprint("ns", a/8%2), fmt.Sprint("o", a%8), fmt.Sprint(b%8))
	o.UID = types.UID(fmt.Sprint("uid", b/8%2))
	return o
}

// entry is the model's view of one stored object.
type entry struct{ rv, uid string }

func entryOf(o *v1alpha1.MyResource) entry { return entry{o.ResourceVersion, string(o.UID)} }

// The store, against a map from key to (resourceVersion, UID): every write
// returns exactly the deltas the model says, and the store's contents always
// equal the model's. As on a real server, one
// resourceVersion is one state of one object: a write at the stored
// resourceVersion changes nothing.
func FuzzStore(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		s := New[*v1alpha1.MyResource]()
		model := map[string]entry{}
		p := &program{data}
		for op, ok := p.next(); ok; op, ok = p.next() {
			switch op % 4 {
			case 0: // a watch ADDED or MODIFIED event
				o := p.object()
				key := KeyOf(o)
				old, had := model[key]
				d, changed, gone := s.Upsert(o)
				switch {
				case had && old.uid != string(o.UID):
					if gone.Type != Deleted || !gone.FinalStateUnknown || entryOf(gone.Object) != old ||
						!changed || d.Type != Added || d.Object != o {
						t.Fatalf("upsert of %s under another UID %v→%v: deltas %+v then %+v", key, old, entryOf(o), gone, d)
					}
				case gone.Type != 0:
					t.Fatalf("upsert of %s (stored: %v) under its UID: a deletion %+v", key, old, gone)
				case had && old.rv == o.ResourceVersion:
					if changed {
						t.Fatalf("upsert of %s at the stored RV %s reported a change", key, old.rv)
					}
					continue
				case had:
					if !changed || d.Type != Updated || entryOf(d.Old) != old || d.Object != o {
						t.Fatalf("upsert %s %v→%v: delta %+v", key, old, entryOf(o), d)
					}
				default:
					if !changed || d.Type != Added || d.Object != o {
						t.Fatalf("upsert of new %s: delta %+v", key, d)
					}
				}
				model[key] = entryOf(o)
			case 1: // a watch DELETED event
				o := p.object()
				key := KeyOf(o)
				old, had := model[key]
				d, known := s.Delete(o)
				if other := had && old.uid != string(o.UID); other && (d.Type != Deleted || !d.FinalStateUnknown || entryOf(d.Object) != old) {
					t.Fatalf("delete %s under another UID (stored: %v): delta %+v, want the stored one, final state unknown", key, old, d)
				} else if known != had || (had && !other && (d.Type != Deleted || d.FinalStateUnknown || d.Object != o)) {
					t.Fatalf("delete %s (stored: %v): delta %+v, known %v", key, had, d, known)
				}
				delete(model, key)
			case 2: // a garbled DELETED event: only the key is known
				o := p.object()
				key := KeyOf(o)
				old, had := model[key]
				d, known := s.DeleteKey(key, nil)
				if known != had || (had && (d.Type != Deleted || !d.FinalStateUnknown || entryOf(d.Object) != old)) {
					t.Fatalf("delete key %s: delta %+v, known %v", key, d, known)
				}
				delete(model, key)
			case 3: // a relist of n objects, some of them undecodable (kept)
				n, _ := p.next()
				r := s.NewReplacement()
				want, kept := map[string]entry{}, map[string]types.UID{}
				for range n % 8 {
					o := p.object()
					key := KeyOf(o)
					switch o.ResourceVersion {
					case "7": // stands for an item that did not decode, its UID read
						kept[key] = o.UID
						r.Keep(key, o.UID)
						continue
					case "6": // an item that did not decode, its UID not read
						kept[key] = ""
						r.Keep(key, "")
						continue
					}
					want[key] = entryOf(o)
					r.Add(o)
				}
				for k, e := range model {
					// A kept key keeps its stored object if it is, or may be,
					// the same one; under another UID, the stored one is gone.
					if uid, ok := kept[k]; ok && want[k] == (entry{}) && (uid == "" || string(uid) == e.uid) {
						want[k] = e
					}
				}
				got := map[string][]DeltaType{}
				for _, d := range r.Commit() {
					got[d.Key] = append(got[d.Key], d.Type)
					if d.Type == Deleted && (!d.FinalStateUnknown || entryOf(d.Object) != model[d.Key]) {
						t.Fatalf("relist: Deleted %+v, want the stored object marked FinalStateUnknown", d)
					}
					if d.Type == Updated && entryOf(d.Old) != model[d.Key] {
						t.Fatalf("relist: Updated %+v, want Old the stored object", d)
					}
				}
				keys := map[string]bool{}
				for k := range model {
					keys[k] = true
				}
				for k := range want {
					keys[k] = true
				}
				for k := range keys {
					old, had := model[k]
					now, has := want[k]
					var expect []DeltaType
					switch {
					case !had:
						expect = []DeltaType{Added}
					case !has:
						expect = []DeltaType{Deleted}
					case old == now:
					case old.uid != now.uid:
						expect = []DeltaType{Deleted, Added} // another object under the same name
					default:
						expect = []DeltaType{Updated}
					}
					if !slices.Equal(got[k], expect) {
						t.Fatalf("relist: %s %v→%v gave deltas %v, want %v", k, old, now, got[k], expect)
					}
				}
				model = want
			}
			checkStore(t, s, model)
		}
	})
}

func checkStore(t *testing.T, s *Store[*v1alpha1.MyResource], model map[string]entry) {
	t.Helper()
	var keys []string
	for k := range model {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if got := s.Keys(); !slices.Equal(got, keys) || s.Len() != len(keys) {
		t.Fatalf("store keys %v, model %v", got, keys)
	}
	for k, e := range model {
		if o, ok := s.Get(k); !ok || entryOf(o) != e || o.ManagedFields != nil {
			t.Fatalf("Get(%s) = %v %v, want %v without managedFields", k, o, ok, e)
		}
	}
}
