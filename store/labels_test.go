package store

import (
	"fmt"
	"maps"
	"sync"
	"testing"

	"rawwatch/api/v1alpha1"
	"rawwatch/store/share"
)

func labelled(name, rv string, labels map[string]string) *v1alpha1.MyResource {
	o := obj("ns", name, rv)
	o.Labels = labels
	return o
}

// Objects with equal labels hold one map between them, whichever way they
// came in (event, relist, deletion); other labels, and no labels, stay as
// they were given.
func TestEqualLabelsShareOneMap(t *testing.T) {
	s := shared()
	s.Upsert(labelled("a", "1", map[string]string{"app": "x", "tier": "web"}))
	s.Upsert(labelled("b", "1", map[string]string{"tier": "web", "app": "x"}))
	s.Upsert(labelled("c", "1", map[string]string{"app": "y", "tier": "web"}))
	s.Upsert(labelled("d", "1", nil))
	r := s.NewReplacement()
	for _, name := range []string{"a", "b", "c", "d"} {
		o, _ := s.Get("ns/" + name)
		r.Add(labelled(name, o.ResourceVersion, maps.Clone(o.Labels)))
	}
	r.Add(labelled("e", "1", map[string]string{"app": "x", "tier": "web"}))
	r.Commit()
	del, _ := s.Delete(labelled("e", "2", map[string]string{"app": "x", "tier": "web"}))

	get := func(name string) map[string]string { o, _ := s.Get("ns/" + name); return o.Labels }
	a, b, c, d := get("a"), get("b"), get("c"), get("d")
	if !sameMap(a, b) || !sameMap(a, del.Object.Labels) {
		t.Errorf("equal labels in two maps: a %p, b %p, the deleted e's %p", a, b, del.Object.Labels)
	}
	if sameMap(a, c) || c["app"] != "y" || len(c) != 2 {
		t.Errorf("c's labels %v (shared with a's: %v), want app=y tier=web, its own", c, sameMap(a, c))
	}
	if d != nil {
		t.Errorf("d's labels %v, want nil", d)
	}
	if len(a) != 2 || a["app"] != "x" || a["tier"] != "web" {
		t.Errorf("a's labels %v", a)
	}
}

// The labels are shared after the transform, which changes each object in
// place: one object's transform never reaches another object.
func TestLabelsAreSharedAfterTheTransform(t *testing.T) {
	s := shared()
	s.SetTransform(func(o *v1alpha1.MyResource) {
		delete(o.Labels, "drop")
		if o.Name == "b" {
			o.Labels["mine"] = "b"
		}
	})
	s.Upsert(labelled("a", "1", map[string]string{"app": "x", "drop": "1"}))
	s.Upsert(labelled("b", "1", map[string]string{"app": "x", "drop": "2"}))
	s.Upsert(labelled("c", "1", map[string]string{"app": "x"}))
	a, _ := s.Get("ns/a")
	b, _ := s.Get("ns/b")
	c, _ := s.Get("ns/c")
	if fmt.Sprint(a.Labels) != "map[app:x]" || fmt.Sprint(b.Labels) != "map[app:x mine:b]" || fmt.Sprint(c.Labels) != "map[app:x]" {
		t.Fatalf("labels a %v, b %v, c %v", a.Labels, b.Labels, c.Labels)
	}
	if !sameMap(a.Labels, c.Labels) {
		t.Error("a's and c's labels, equal after the transform, are two maps")
	}
}

// unheld is how many maps of the table no object of s holds.
func unheld(s *Store[*v1alpha1.MyResource]) int {
	held := map[string]bool{}
	for _, o := range s.List() {
		if s.labels.Tabled(o.Labels) {
			held[fmt.Sprint(o.Labels)] = true
		}
	}
	_, _, sets := s.labels.State()
	return sets - len(held)
}

// The maps the table keeps that no stored object holds stay at most a
// quarter of the most objects stored, plus 64, whether objects leave by an
// update to other labels, a deletion, a relist or Retain, or are never
// stored (a deletion of a key not stored); and every object
// keeps the labels it was given across the rebuilds of the table.
func TestLabelSetsAreBounded(t *testing.T) {
	s := shared()
	const objects = 150
	most := 0
	check := func(when string) {
		t.Helper()
		most = max(most, s.Len())
		if n, bound := unheld(s), most/4+64; n > bound {
			t.Fatalf("%s: the table keeps %d maps no object holds (%d objects, at most %d so far), want at most %d",
				when, n, s.Len(), most, bound)
		}
	}
	labels := func(i, round int) map[string]string {
		return map[string]string{"app": "x", "i": fmt.Sprint(i), "round": fmt.Sprint(round)}
	}
	for round := range 4 {
		for i := range objects {
			s.Upsert(labelled(fmt.Sprint(i), fmt.Sprint(round), labels(i, round)))
			check(fmt.Sprintf("round %d, update %d", round, i))
		}
		for i := range objects {
			o, _ := s.Get(fmt.Sprint("ns/", i))
			if !maps.Equal(o.Labels, labels(i, round)) {
				t.Fatalf("round %d: %s's labels %v, want %v", round, o.Name, o.Labels, labels(i, round))
			}
		}
	}
	// Every object to one set: the unique sets lose their objects by hits.
	for i := range objects {
		s.Upsert(labelled(fmt.Sprint(i), "common", map[string]string{"app": "x"}))
		check(fmt.Sprintf("to one set, update %d", i))
	}
	for i := range objects {
		s.Upsert(labelled(fmt.Sprint(i), "again", labels(i, 99)))
	}
	for i := range objects / 4 {
		o, _ := s.Get(fmt.Sprint("ns/", i))
		s.Delete(o)
		check(fmt.Sprintf("delete %d", i))
	}
	s.Retain(func(o *v1alpha1.MyResource) bool { return o.Name < "2" })
	check("Retain")
	// Taken, never stored: deletions of keys not stored, labelled each its
	// own way.
	for i := range 2 * objects {
		s.Delete(labelled(fmt.Sprint("absent-", i), "1", labels(i, 100)))
		check(fmt.Sprintf("delete of absent key %d", i))
	}
	s.NewReplacement().Commit()
	check("a relist that finds nothing")
}

// Readers read stored labels while the writer shares maps and rebuilds the
// table (run with -race: a stored object is never written).
func TestLabelsSharedUnderConcurrentReaders(t *testing.T) {
	s := shared()
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 3000 {
			s.Upsert(labelled(fmt.Sprint(i%50), fmt.Sprint(i), map[string]string{"app": "x", "v": fmt.Sprint(i % 7)}))
		}
	})
	for range 3 {
		wg.Go(func() {
			for range 300 {
				for _, o := range s.List() {
					if o.Labels["app"] != "x" || len(o.Labels) != 2 {
						t.Errorf("%s's labels %v", o.Name, o.Labels)
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

// A store given one map object after object (a watch stream's decoder
// gives one to every object whose labels are written alike) does what a
// store given a fresh equal map each time does, the map it hands out aside:
// the same churn and rebuilds, the same table, each object the table's map
// exactly when the other's object has its table's, across rebuilds (which
// forget the last map given), deletions and two sets in turn.
func TestOneMapGivenAgainIsSharedAsAFreshOne(t *testing.T) {
	same, fresh := shared(), shared()
	sets := []map[string]string{{"app": "x", "tier": "web"}, {"app": "y"}}
	tabled := func(s *Store[*v1alpha1.MyResource], key string) (map[string]string, bool) {
		o, _ := s.Get(key)
		return o.Labels, s.labels.Tabled(o.Labels)
	}
	for i := range 100 { // more than 64 sets: the table is rebuilt
		l := map[string]string{"i": fmt.Sprint(i)}
		same.Upsert(labelled(fmt.Sprint("u", i), "1", l))
		fresh.Upsert(labelled(fmt.Sprint("u", i), "1", maps.Clone(l)))
	}
	rebuilds := 0
	for i := range 1000 {
		key, rv, l := fmt.Sprint("s", i%10), fmt.Sprint(i), sets[i%7%2]
		churn, _, _ := same.labels.State()
		if i%5 == 4 {
			same.Delete(labelled(key, rv, l))
			fresh.Delete(labelled(key, rv, maps.Clone(l)))
		} else {
			same.Upsert(labelled(key, rv, l))
			fresh.Upsert(labelled(key, rv, maps.Clone(l)))
		}
		ac, al, as := same.labels.State()
		bc, bl, bs := fresh.labels.State()
		if ac <= churn {
			rebuilds++
		}
		if ac != bc || al != bl || as != bs {
			t.Fatalf("step %d: churn %d, limit %d, %d sets; given fresh maps: %d, %d, %d", i, ac, al, as, bc, bl, bs)
		}
		if i%5 == 4 {
			continue
		}
		la, ta := tabled(same, "ns/"+key)
		lb, tb := tabled(fresh, "ns/"+key)
		if !maps.Equal(la, l) || !maps.Equal(lb, l) || ta != tb {
			t.Fatalf("step %d: %s's labels %v (the table's: %v), given fresh maps %v (%v), want %v", i, key, la, ta, lb, tb, l)
		}
		if !sameMap(la, l) && !ta {
			t.Fatalf("step %d: %s holds a map neither given nor the table's", i, key)
		}
	}
	if rebuilds == 0 {
		t.Fatal("no rebuild of the table: the test misses the pair's reset")
	}
}

// A table rebuilt forgets the last map given: one that got a map the table
// no longer has gets the table's own again, as a fresh map would.
func TestRebuildForgetsTheLastMapGiven(t *testing.T) {
	s := shared()
	for i := range 70 { // more than 64 sets: the table may be rebuilt
		s.Upsert(labelled(fmt.Sprint("u", i), "1", map[string]string{"i": fmt.Sprint(i)}))
	}
	first, given := map[string]string{"app": "x"}, map[string]string{"app": "x"}
	s.Upsert(labelled("a", "1", first))
	s.Upsert(labelled("b", "1", given)) // gets first
	// No labels from here: counted, nothing shared, the last map given
	// stays given.
	s.Upsert(labelled("a", "2", nil))
	s.Upsert(labelled("b", "2", nil)) // first held by none
	for i := 0; churn(s) > 0 || i == 0; i++ {
		s.Delete(labelled("c", fmt.Sprint(i), nil)) // counted: taken, not stored
	}
	s.Upsert(labelled("d", "1", given))
	d, _ := s.Get("ns/d")
	if !s.labels.Tabled(d.Labels) || !maps.Equal(d.Labels, given) {
		t.Fatalf("after a rebuild, labels %v given again got %v, not the table's map (the one given: %v; the first, gone: %v)",
			given, d.Labels, sameMap(d.Labels, given), sameMap(d.Labels, first))
	}
}

// A transform that changes the labels map in place (SetTransform) may give
// the store one map, changed since it was last given (a map of its own that
// the store never keeps, its labels always equal to an object's): it is
// shared as what it holds now.
func TestOneMapChangedByTheTransformIsHashedAgain(t *testing.T) {
	s := shared()
	mine := map[string]string{}
	s.SetTransform(func(o *v1alpha1.MyResource) {
		if o.Name >= "c" {
			clear(mine)
			maps.Copy(mine, o.Labels)
			o.Labels = mine
		}
	})
	if s.SharesLabels() {
		t.Fatal("SharesLabels with a transform that may change labels")
	}
	s.Upsert(labelled("a", "1", map[string]string{"app": "x"}))
	s.Upsert(labelled("b", "1", map[string]string{"app": "y"}))
	s.Upsert(labelled("c", "1", map[string]string{"app": "x"})) // mine: gets a's map
	s.Upsert(labelled("d", "1", map[string]string{"app": "y"})) // mine again, changed: gets b's
	for name, want := range map[string]string{"a": "x", "b": "y", "c": "x", "d": "y"} {
		if o, _ := s.Get("ns/" + name); len(o.Labels) != 1 || o.Labels["app"] != want || sameMap(o.Labels, mine) {
			t.Errorf("%s's labels %v, want app=%s (mine, the transform's: %v)", name, o.Labels, want, sameMap(o.Labels, mine))
		}
	}
	s.SetTransformKeepingLabels(func(*v1alpha1.MyResource) {})
	if !s.SharesLabels() {
		t.Fatal("not SharesLabels with a transform that keeps labels")
	}
}

func churn(s *Store[*v1alpha1.MyResource]) int {
	c, _, _ := s.labels.State()
	return c
}

// sameMap tells whether a and b are one map.
var sameMap = share.SameMap

// shared is a store that shares what its objects repeat (Share).
func shared() *Store[*v1alpha1.MyResource] {
	s := New[*v1alpha1.MyResource]()
	s.Share()
	return s
}

// An update that keeps an object's labels (in a fresh map, as a stream of
// objects labelled each its own way decodes them) leaves no map unheld, so
// it does not count toward a rebuild: a store whose objects keep their
// labels never rebuilds the table, however many updates it takes.
func TestUpdatesKeepingTheLabelsDoNotRebuildTheTable(t *testing.T) {
	s := shared()
	const objects = 300
	labels := func(i int) map[string]string {
		return map[string]string{"app": "x", "instance": fmt.Sprint("obj-", i)}
	}
	for i := range objects {
		s.Upsert(labelled(fmt.Sprint(i), "1", labels(i)))
	}
	rebuilds, last := 0, churn(s)
	for round := range 10 {
		for i := range objects {
			s.Upsert(labelled(fmt.Sprint(i), fmt.Sprint(round+2), labels(i)))
			if now := churn(s); now < last {
				rebuilds++
			}
			last = churn(s)
		}
	}
	if rebuilds > 0 {
		t.Fatalf("%d rebuilds of the table in %d updates that kept every object's labels, want none", rebuilds, 10*objects)
	}
	if n := unheld(s); n != 0 {
		t.Fatalf("the table keeps %d maps no object holds", n)
	}
}
