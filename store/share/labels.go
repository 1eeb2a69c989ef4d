// Package share lets the objects of a store keep one copy of what they
// repeat (store.Store.Share): equal label maps become one map (Sets), and the
// namespace, apiVersion and kind strings one string each (Intern). It saves
// memory and time on a large cache, and asks more of every reader: a shared
// map belongs to many objects. The store calls it; it knows no store.
package share

import (
	"hash/maphash"
	"maps"
	"reflect"
	"sync"
)

// Sets lets the objects of a store whose labels are equal hold one map
// between them instead of one each: the objects a controller watches usually
// carry the same few labels, and a map costs about a third of a small
// object's memory. The table maps a hash of a label set to the first map
// seen with it; an object taken by the store (after the transform, before
// anyone sees it) whose labels equal that map's gets the map. Stored objects
// are never changed.
//
// The bound: maps no stored object holds any more are at most a quarter of
// the objects stored at the last rebuild, plus 64; past that (and above 64
// sets) the table is rebuilt from the stored objects, a constant number of
// hashes per map let go, amortized. The store counts what may let a map go
// (Dropped): an object removed, replaced by one holding another map, or
// taken and not stored. An update that keeps an object's labels gets the
// map the object held, lets none go, and counts nothing.
//
// A stream's decoder gives the store the same map object after object
// (metajson.LabelCache), so share returns again what it returned for the very
// map it was given last, without hashing, until a rebuild; only a store whose
// transform may change labels in place (SetTransform) hashes every map. The
// zero value is an empty table.
type Sets struct {
	mu   sync.Mutex
	seed maphash.Seed
	sets map[uint64]map[string]string
	// churn counts the objects taken or dropped since the last rebuild;
	// limit is the churn that makes the next one.
	churn, limit int
	// lastIn was given last and lastOut returned for it (nil: none since
	// the last rebuild).
	lastIn, lastOut map[string]string
}

// Live gives the store's size and yields its objects' labels, for a
// rebuild. Share and Dropped call it with the table's lock held: the store
// calls them without its own.
type Live interface {
	Len() int
	EachLabels(yield func(map[string]string))
}

// Share returns the map to store for an object's labels: an equal one
// taken before, or labels itself. unchanged says that a map given before has
// not changed since (see Sets): then the map given last gets what it got
// without hashing.
func (t *Sets) Share(labels map[string]string, unchanged bool) map[string]string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if labels == nil {
		return nil
	}
	if unchanged && t.lastIn != nil && SameMap(labels, t.lastIn) {
		return t.lastOut
	}
	if t.sets == nil {
		t.seed = maphash.MakeSeed()
		t.sets = map[uint64]map[string]string{}
	}
	h := t.hash(labels)
	m, ok := t.sets[h]
	switch {
	case !ok:
		t.sets[h] = labels
	case maps.Equal(m, labels):
		t.lastIn, t.lastOut = labels, m
		return m
	default:
		return labels // another set of the same hash (not shared)
	}
	t.lastIn, t.lastOut = labels, labels
	return labels
}

// SameMap tells whether a and b are one map, not two equal ones.
func SameMap(a, b map[string]string) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// Dropped counts n maps that stored objects, or objects taken and not
// stored, may have let go (see Sets).
func (t *Sets) Dropped(n int, live Live) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.count(n, live)
}

// count adds n to the churn and rebuilds the table when it is due.
func (t *Sets) count(n int, live Live) {
	t.churn += n
	if len(t.sets) <= 64 || t.churn < t.limit {
		return
	}
	t.sets = map[uint64]map[string]string{} // sized by what it gets
	t.lastIn, t.lastOut = nil, nil
	live.EachLabels(func(m map[string]string) {
		if m == nil {
			return
		}
		if h := t.hash(m); t.sets[h] == nil {
			t.sets[h] = m
		}
	})
	t.churn, t.limit = 0, live.Len()/4+64
}

// hash is a hash of the set, the same in any iteration order.
func (t *Sets) hash(labels map[string]string) uint64 {
	var sum uint64
	var h maphash.Hash
	h.SetSeed(t.seed)
	for k, v := range labels {
		h.Reset()
		h.WriteString(k)
		h.WriteByte(0) // ("a", "bc") and ("ab", "c") apart (a collision only costs the sharing)
		h.WriteString(v)
		sum += h.Sum64()
	}
	return sum + uint64(len(labels))
}

// Tabled tells whether m is the table's map for its set (for tests).
func (t *Sets) Tabled(m map[string]string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return m != nil && SameMap(t.sets[t.hash(m)], m)
}

// State is the table's churn since its last rebuild, the churn that makes
// the next one, and its number of sets (for tests).
func (t *Sets) State() (churn, limit, sets int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.churn, t.limit, len(t.sets)
}
