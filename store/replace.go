package store

import (
	"rawwatch/store/share"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Replacement builds the result of a relist beside the live store, page by
// page, and swaps it in with Commit: readers see the old contents or the new,
// never a mix. An item that is the stored object as it was is not kept (the
// stored one is reused), so only changed objects are held twice.
type Replacement[T Object] struct {
	s     *Store[T]
	items map[string]T
	// keep lists keys whose listed item could not be decoded, with the
	// item's UID if it could be read: the store keeps what it has for them
	// rather than reporting them deleted, if it is the same object.
	keep map[string]types.UID
	// keepAll: an item whose key could not be read was listed; it may be
	// any stored object, so none the list lacks is taken for deleted.
	keepAll bool
}

// NewReplacement starts a relist. Only one should be open at a time, and the
// store should not be written by anyone else until it is committed.
func (s *Store[T]) NewReplacement() *Replacement[T] {
	return &Replacement[T]{s: s, items: map[string]T{}, keep: map[string]types.UID{}}
}

// Add records a listed object.
func (r *Replacement[T]) Add(obj T) {
	r.s.take(obj)
	key := KeyOf(obj)
	old, ok := r.s.Get(key)
	if r.s.share && !(ok && share.SameMap(old.GetLabels(), obj.GetLabels())) {
		r.s.labels.Dropped(1, live[T]{r.s}) // obj's map or old's may be let go (share.Sets)
	}
	if ok && old.GetResourceVersion() == obj.GetResourceVersion() && old.GetUID() == obj.GetUID() && same(old, obj) {
		obj = old
	}
	r.items[key] = obj
}

// Remove drops what was recorded for key, an object or a Keep (a
// WatchList's initial events may, in principle, delete what they added; a
// DELETED that cannot be decoded still names its key).
func (r *Replacement[T]) Remove(key string) {
	delete(r.items, key)
	delete(r.keep, key)
}

// Keep records that key was listed but its item could not be understood;
// uid is the item's UID, "" if unreadable. The stored object stays (a skipped
// item is not a deletion) if it may be the same one (MayBe); one of another
// UID was deleted and the key re-created: Commit reports it Deleted, as for a
// key the list lacks. A key "" may be any stored object: then no stored
// object the list lacks is taken for deleted.
func (r *Replacement[T]) Keep(key string, uid types.UID) {
	if key == "" {
		r.keepAll = true
		return
	}
	r.keep[key] = uid
}

// Len is the number of objects recorded so far.
func (r *Replacement[T]) Len() int { return len(r.items) }

// Commit makes the listed objects the store's whole contents, in one step,
// and returns what changed: Added and Updated for new or changed objects,
// Deleted (FinalStateUnknown) for stored keys the list lacks (see Keep). A
// key listed with another UID is two objects: Deleted, then Added.
func (r *Replacement[T]) Commit() []Delta[T] {
	deltas := r.commit()
	dropped := 0
	for _, d := range deltas {
		if d.Type == Deleted {
			dropped++
		}
	}
	r.s.labels.Dropped(dropped, live[T]{r.s})
	return deltas
}

func (r *Replacement[T]) commit() []Delta[T] {
	s := r.s
	s.mu.Lock()
	defer s.mu.Unlock()

	var deltas []Delta[T]
	for key, old := range s.items {
		if _, listed := r.items[key]; listed {
			continue
		}
		uid, kept := r.keep[key]
		if kept && MayBe(uid, old) || !kept && r.keepAll {
			r.items[key] = old
			continue
		}
		deltas = append(deltas, Delta[T]{Type: Deleted, Key: key, Object: old, FinalStateUnknown: true})
	}
	for key, obj := range r.items {
		old, existed := s.items[key]
		switch {
		case !existed:
			deltas = append(deltas, Delta[T]{Type: Added, Key: key, Object: obj})
		case old.GetUID() != obj.GetUID():
			deltas = append(deltas,
				Delta[T]{Type: Deleted, Key: key, Object: old, FinalStateUnknown: true},
				Delta[T]{Type: Added, Key: key, Object: obj})
		case old != obj:
			deltas = append(deltas, Delta[T]{Type: Updated, Key: key, Object: obj, Old: old})
		}
	}

	s.detector.Replaced(s.items, r.items)
	s.items = r.items
	r.items, r.keep = nil, nil
	return deltas
}

// MayBe tells whether an item that could not be decoded, whose UID read uid
// ("" if that could not be read either), may be the stored object: then a
// relist or a sweep keeps the stored object (see Keep).
func MayBe(uid types.UID, stored metav1.Object) bool { return uid == "" || uid == stored.GetUID() }
