package store

import (
	"hash/maphash"
	"maps"
	"sync"
)

// labelSets lets the objects of a store whose labels are equal hold one map
// between them instead of one each. Labels repeat: the objects one
// controller watches usually carry the same few (app, tier, part-of), and a
// map of one label costs about 340 bytes (its header and a group of eight
// slots), a third of a small object's memory.
//
// The table maps a hash of a label set to the first map seen with it. An
// object taken by the store (after the transform, before anyone else sees
// it) whose labels equal that map's gets the map; a hash shared by unequal
// sets keeps the object's own map. Stored objects are never changed: a map
// is shared only as a fresh object comes in.
//
// The bound: the table holds at most Len()+Len()/4+64 sets. When a new set
// would go beyond it, the table is rebuilt from the stored objects' maps, so
// the maps it keeps alive that no stored object holds (the labels of
// objects replaced or deleted since) are at most Len()/4+64, and a rebuild,
// which hashes every stored object's labels, comes after at least Len()/4+64
// new sets: a constant number of hashes per new set, amortized.
type labelSets struct {
	mu   sync.Mutex
	seed maphash.Seed
	sets map[uint64]map[string]string
}

// share returns the map to store for labels: an equal one taken before, or
// labels itself. n is the store's Len and live yields the stored objects'
// labels, for a rebuild.
func (t *labelSets) share(labels map[string]string, n func() int, live func(yield func(map[string]string))) map[string]string {
	if labels == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sets == nil {
		t.seed = maphash.MakeSeed()
		t.sets = map[uint64]map[string]string{}
	}
	h := t.hash(labels)
	m, ok := t.sets[h]
	if !ok {
		if n := n(); len(t.sets) >= n+n/4+64 {
			t.rebuild(live)
			m, ok = t.sets[h]
		}
	}
	switch {
	case !ok:
		t.sets[h] = labels
	case maps.Equal(m, labels):
		return m
	}
	return labels // new, or another set of the same hash (not shared)
}

// rebuild makes the table the sets of the stored objects' labels.
func (t *labelSets) rebuild(live func(yield func(map[string]string))) {
	t.sets = map[uint64]map[string]string{} // sized by what it gets: few sets, usually
	live(func(m map[string]string) {
		if m == nil {
			return
		}
		if h := t.hash(m); t.sets[h] == nil {
			t.sets[h] = m
		}
	})
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

// len is the number of sets in the table (for tests).
func (t *labelSets) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.sets)
}
