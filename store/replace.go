package store

import (
	"rawwatch/store/share"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Replacement builds the result of a relist beside the live store, page by
// page, and swaps it in with Commit: readers see the old contents or the
// new. An item that is the stored object as it was reuses the stored one.
type Replacement[T Object] struct {
	s     *Store[T]
	items map[string]T
	// keep: keys listed but undecodable, with their UIDs if read (Keep);
	// keepAll: one without a readable key was listed.
	keep    map[string]types.UID
	keepAll bool
}

// NewReplacement starts a relist. Until its Commit, nothing else should
// write the store.
func (s *Store[T]) NewReplacement() *Replacement[T] {
	return &Replacement[T]{s: s, items: map[string]T{}, keep: map[string]types.UID{}}
}

// Add records a listed object.
func (r *Replacement[T]) Add(obj T) {
	r.s.take(obj)
	key := KeyOf(obj)
	old, ok := r.s.Get(key)
	if r.s.share && !(ok && share.SameMap(old.GetLabels(), obj.GetLabels())) {
		r.s.labels.Dropped(1, live[T]{r.s}) // obj's labels or old's may be let go
	}
	if ok && old.GetResourceVersion() == obj.GetResourceVersion() && old.GetUID() == obj.GetUID() && same(old, obj) {
		obj = old
	}
	r.items[key] = obj
}

// Remove drops what was recorded for key (a WatchList's initial events may
// delete what they added).
func (r *Replacement[T]) Remove(key string) {
	delete(r.items, key)
	delete(r.keep, key)
}

// Keep records that key was listed but could not be decoded (uid: its UID,
// "" if unreadable). The stored object stays if it may be that one (MayBe),
// else Commit reports it Deleted. A key "" may be any stored object: then
// none the list lacks is taken for deleted.
func (r *Replacement[T]) Keep(key string, uid types.UID) {
	if key == "" {
		r.keepAll = true
		return
	}
	r.keep[key] = uid
}

// Len is the number of objects recorded so far.
func (r *Replacement[T]) Len() int { return len(r.items) }

// Commit makes the listed objects the store's contents, in one step, and
// returns what changed: Added, Updated, and Deleted (FinalStateUnknown) for
// stored keys the list lacks. A key listed under another UID is two
// objects: Deleted, then Added.
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

// MayBe tells whether an undecodable item whose UID read uid ("" if
// unreadable) may be the stored object.
func MayBe(uid types.UID, stored metav1.Object) bool { return uid == "" || uid == stored.GetUID() }
