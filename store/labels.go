package store

import (
	"hash/maphash"
	"maps"
	"reflect"
	"sync"
)

// labelSets lets the objects of a store whose labels are equal hold one map
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
// (dropped): an object removed, replaced by one holding another map, or
// taken and not stored. An update that keeps an object's labels gets the
// map the object held, lets none go, and counts nothing.
//
// A stream's decoder gives the store the same map object after object
// (metajson.LabelCache), so share returns again what it returned for the very
// map it was given last, without hashing, until a rebuild; only a store whose
// transform may change labels in place (SetTransform) hashes every map.
type labelSets struct {
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

// liveLabels gives the store's size and yields its objects' labels, for a
// rebuild.
type liveLabels interface {
	Len() int
	eachLabels(yield func(map[string]string))
}

// share returns the map to store for an object's labels: an equal one
// taken before, or labels itself. unchanged says that a map
// given before has not changed since (see labelSets): then the map given
// last gets what it got without hashing.
func (t *labelSets) share(labels map[string]string, unchanged bool) map[string]string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if labels == nil {
		return nil
	}
	if unchanged && t.lastIn != nil && sameMap(labels, t.lastIn) {
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

// sameMap tells whether a and b are one map, not two equal ones.
func sameMap(a, b map[string]string) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// dropped counts n maps that stored objects, or objects taken and not
// stored, may have let go (see labelSets).
func (t *labelSets) dropped(n int, live liveLabels) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.count(n, live)
}

// count adds n to the churn and rebuilds the table when it is due.
func (t *labelSets) count(n int, live liveLabels) {
	t.churn += n
	if len(t.sets) <= 64 || t.churn < t.limit {
		return
	}
	t.sets = map[uint64]map[string]string{} // sized by what it gets
	t.lastIn, t.lastOut = nil, nil
	live.eachLabels(func(m map[string]string) {
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
func (t *labelSets) hash(labels map[string]string) uint64 {
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
