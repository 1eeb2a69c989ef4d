package store

import (
	"reflect"
	"sort"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"rawwatch/store/detect"
	"rawwatch/store/share"
)

// Object is what the store can hold: any Kubernetes object with metadata.
type Object interface {
	metav1.Object
	comparable
}

// KeyOf returns the store key of obj: "namespace/name", or "name" for a
// cluster-scoped object. It is the key the queue carries, too.
func KeyOf(obj metav1.Object) string {
	return Key(obj.GetNamespace(), obj.GetName())
}

// Key builds a store key from its parts.
func Key(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// Store is a thread-safe cache of objects of one type, keyed by KeyOf; call
// New. It owns the objects given to it (the giver changes them no more),
// drops their managedFields and shares them with readers, who must not
// change them (DeepCopy first; package detect catches one that does).
type Store[T Object] struct {
	mu    sync.RWMutex
	items map[string]T
	// transform trims every object taken (SetTransform); keepsLabels: it
	// never changes labels (SetTransformKeepingLabels).
	transform   func(T)
	keepsLabels bool
	// share: what objects repeat is shared (Share), label maps in labels.
	share  bool
	labels share.Sets
	// detector, when on, holds a copy of every stored object.
	detector *detect.Detector[T]
}

// New returns an empty store.
func New[T Object]() *Store[T] {
	return &Store[T]{items: map[string]T{}, detector: detect.New[T](detect.Default())}
}

// Share makes the store keep one copy of what its objects repeat (equal
// label maps, namespace strings: package share): a reader that changes an
// object's labels in place changes them all. Call it before the first write.
func (s *Store[T]) Share() { s.share = true }

// Get returns the object stored under key.
func (s *Store[T]) Get(key string) (T, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	obj, ok := s.items[key]
	return obj, ok
}

// Len is the number of objects stored.
func (s *Store[T]) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.items)
}

// Keys returns every key, sorted.
func (s *Store[T]) Keys() []string {
	s.mu.RLock()
	keys := make([]string, 0, len(s.items))
	for k := range s.items {
		keys = append(keys, k)
	}
	s.mu.RUnlock()
	sort.Strings(keys)
	return keys
}

// List returns every object, in no particular order.
func (s *Store[T]) List() []T {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]T, 0, len(s.items))
	for _, obj := range s.items {
		out = append(out, obj)
	}
	return out
}

// SetTransform makes the store call f on every object it takes, to drop
// what the reconcilers never read (client-go's SetTransform). f changes the
// object in place, keeping its key, UID and resourceVersion. Call it before
// the first write.
func (s *Store[T]) SetTransform(f func(T)) { s.transform, s.keepsLabels = f, false }

// SetTransformKeepingLabels is SetTransform for an f that never changes an
// object's labels (DropAnnotations): the objects may still share label maps.
func (s *Store[T]) SetTransformKeepingLabels(f func(T)) { s.transform, s.keepsLabels = f, true }

// DropAnnotations returns a transform that deletes the annotations named
// by keys and never changes labels (SetTransformKeepingLabels), such as
// kubectl's last-applied-configuration: a copy of the whole object.
func DropAnnotations[T Object](keys ...string) func(T) {
	return func(obj T) {
		a := obj.GetAnnotations()
		if len(a) == 0 {
			return
		}
		for _, k := range keys {
			delete(a, k)
		}
		if len(a) == 0 {
			obj.SetAnnotations(nil)
		}
	}
}

// SharesLabels tells whether objects given to the store may share label
// maps: with Share, unless a transform may change labels.
func (s *Store[T]) SharesLabels() bool { return s.share && (s.transform == nil || s.keepsLabels) }

// take prepares an object the store is given: its managedFields go (often
// the largest part, which a controller never reads), then the transform;
// with Share, its strings are interned and its labels shared.
func (s *Store[T]) take(obj T) {
	obj.SetManagedFields(nil)
	if s.share {
		share.Intern(obj)
	}
	if s.transform != nil {
		s.transform(obj)
	}
	if !s.share {
		return
	}
	if l := s.labels.Share(obj.GetLabels(), s.SharesLabels()); l != nil {
		obj.SetLabels(l)
	}
}

// live is the store as its label table sees it (share.Live).
type live[T Object] struct{ *Store[T] }

func (s live[T]) EachLabels(yield func(map[string]string)) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, obj := range s.items {
		yield(obj.GetLabels())
	}
}

// Upsert stores obj (an ADDED or MODIFIED event) and says what changed: d,
// Added or Updated; changed is false for a duplicate (same resourceVersion
// and content). A key stored under another UID was deleted and made again:
// gone (its Type set only then) is the old one's Deleted, to hand out first.
func (s *Store[T]) Upsert(obj T) (d Delta[T], changed bool, gone Delta[T]) {
	s.take(obj)
	key := KeyOf(obj)
	var old T
	existed := false
	defer func() {
		// Stored or not, obj replaces old: old's labels may be let go.
		if s.share && existed && !share.SameMap(old.GetLabels(), obj.GetLabels()) {
			s.labels.Dropped(1, live[T]{s}) // once the lock is released
		}
	}()
	s.mu.Lock()
	defer s.mu.Unlock()
	old, existed = s.items[key]
	switch {
	case !existed:
	case old.GetUID() != obj.GetUID():
		gone = Delta[T]{Type: Deleted, Key: key, Object: old, FinalStateUnknown: true}
	case old.GetResourceVersion() == obj.GetResourceVersion() && same(old, obj):
		return Delta[T]{}, false, gone
	default:
		s.put(key, obj)
		return Delta[T]{Type: Updated, Key: key, Object: obj, Old: old}, true, gone
	}
	s.put(key, obj)
	return Delta[T]{Type: Added, Key: key, Object: obj}, true, gone
}

// Delete removes obj's key (a DELETED event: obj is the final state); known
// is false when the key was not stored. A stored object of another UID comes
// out Deleted, its final state unknown (obj, never seen, is not news).
func (s *Store[T]) Delete(obj T) (d Delta[T], known bool) {
	s.take(obj)
	if s.share {
		s.labels.Dropped(1, live[T]{s}) // obj is taken, never stored
	}
	return s.DeleteKey(KeyOf(obj), obj)
}

// DeleteKey removes key. final, if set and of the stored object's UID, is
// its final state; otherwise the delta carries the stored object,
// FinalStateUnknown.
func (s *Store[T]) DeleteKey(key string, final T) (d Delta[T], known bool) {
	return s.deleteIf(key, final, func(T) bool { return true })
}

// DeleteOther removes key's stored object unless it may be the one of UID
// uid (MayBe): an undecodable event naming another UID says it is gone. The
// delta carries the stored object, FinalStateUnknown.
func (s *Store[T]) DeleteOther(key string, uid types.UID) (d Delta[T], known bool) {
	return s.deleteIf(key, *new(T), func(old T) bool { return !MayBe(uid, old) })
}

// deleteIf removes key's stored object if gone says it is gone (DeleteKey's).
func (s *Store[T]) deleteIf(key string, final T, gone func(old T) bool) (d Delta[T], known bool) {
	defer func() {
		if known {
			s.labels.Dropped(1, live[T]{s}) // once the lock is released
		}
	}()
	s.mu.Lock()
	defer s.mu.Unlock()
	old, existed := s.items[key]
	if !existed || !gone(old) {
		return Delta[T]{}, false
	}
	var zero T
	if final == zero || final.GetUID() != old.GetUID() {
		s.remove(key, old)
		return Delta[T]{Type: Deleted, Key: key, Object: old, FinalStateUnknown: true}, true
	}
	s.detector.Left(key, final, true)
	s.remove(key, old)
	return Delta[T]{Type: Deleted, Key: key, Object: final}, true
}

// same tells whether two objects at one key and resourceVersion hold the
// same content (an etcd restore may reuse a resourceVersion).
func same[T Object](a, b T) bool { return a == b || reflect.DeepEqual(a, b) }

// put and remove write items, and tell the detector. Callers hold mu.
func (s *Store[T]) put(key string, obj T) {
	s.detector.Stored(key, obj, s.items)
	s.items[key] = obj
	s.detector.Wrote(s.items)
}

func (s *Store[T]) remove(key string, old T) {
	s.detector.Removed(key, old)
	delete(s.items, key)
	s.detector.Wrote(s.items)
}

// Retain drops, without a delta, the objects keep refuses (they left this
// store's part of the cluster: a shard moved away), and counts them.
func (s *Store[T]) Retain(keep func(T) bool) (n int) {
	defer func() { s.labels.Dropped(n, live[T]{s}) }() // once the lock is released
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, obj := range s.items {
		if !keep(obj) {
			s.remove(key, obj)
			n++
		}
	}
	return n
}
