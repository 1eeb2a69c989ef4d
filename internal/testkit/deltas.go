package testkit

import (
	"sync"

	"rawwatch/store"
)

// Deltas keeps the deltas a watcher hands its Handler, for a test to read
// while the watcher runs.
type Deltas[T store.Object] struct {
	mu     sync.Mutex
	deltas []store.Delta[T]
}

// Handle keeps d: pass it as the watcher's Handler.
func (r *Deltas[T]) Handle(d store.Delta[T]) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.deltas = append(r.deltas, d)
}

// Len is how many deltas were kept.
func (r *Deltas[T]) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.deltas)
}

// Since returns the deltas from the n-th on.
func (r *Deltas[T]) Since(n int) []store.Delta[T] {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]store.Delta[T](nil), r.deltas[n:]...)
}

// Find returns the last delta of key with type t.
func (r *Deltas[T]) Find(key string, t store.DeltaType) (store.Delta[T], bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.deltas) - 1; i >= 0; i-- {
		if d := r.deltas[i]; d.Key == key && d.Type == t {
			return d, true
		}
	}
	return store.Delta[T]{}, false
}

// Count is how many deltas of type t were kept.
func (r *Deltas[T]) Count(t store.DeltaType) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, d := range r.deltas {
		if d.Type == t {
			n++
		}
	}
	return n
}
