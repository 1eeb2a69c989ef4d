// Package detect is the store's mutation detector, as client-go's cache has
// one (KUBE_CACHE_MUTATION_DETECTOR). The store's objects are shared with
// every reader: one that changes an object in place (a handler, a reconciler
// that forgot to DeepCopy) changes it for all the others, and the cache no
// longer says what the server holds; with the store's Share, every object
// holding the same labels map changes too, and objects decoded after it may
// be given that map. With the detector on, a store keeps a deep copy of each
// object it holds, made as it stores it, and compares the two: an object's
// when it is replaced or removed, all of them once per as many writes as the
// store holds (at least 64) and at every relist, and at the store's
// CheckMutations. The objects handed out as they leave the store (an Updated
// delta's Old, a Deleted delta's object) are compared too, at every compare
// of all for Retain to twice Retain after they left, as client-go's detector
// keeps its copies (it compares them every second); the compares of all are
// spaced by as many writes as the store holds and keeps, so each write
// still costs about one compare. A difference panics, naming the object and the change:
// nothing read from a cache that was written to can be trusted (client-go
// panics too). It costs a deep copy and a compare per write, and doubles
// the memory the objects take.
//
// It is on for the stores made in a test binary that runs no benchmark, and
// wherever the environment variable RAWWATCH_CACHE_MUTATION_DETECTOR says
// true (false turns it off in tests too), and for a store told
// DetectMutations (the controller's --cache-mutation-detector). Only for
// object types that are runtime.Objects (every generated API type is): the
// copy is DeepCopyObject's.
package detect

import (
	"flag"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/diff"
)

// Env is the environment variable that turns the detector
// on ("true") or off ("false").
const Env = "RAWWATCH_CACHE_MUTATION_DETECTOR"

// Default tells whether a store made now gets the detector.
func Default() bool {
	if on, err := strconv.ParseBool(os.Getenv(Env)); err == nil {
		return on
	}
	if !testing.Testing() {
		return false
	}
	bench := flag.Lookup("test.bench") // a benchmark measures the store as it runs
	return bench == nil || bench.Value.String() == ""
}

// Detector holds a deep copy of each stored object, by key. Its methods are
// called with the store's lock held (for writing, but CheckAll's); on a nil
// Detector (off) they do nothing.
type Detector[T comparable] struct {
	copies map[string]T
	// gone holds the objects that left the store since rotated, with their
	// copies, retained those that left in the Retain before; leaving, those
	// that left by the write under way (kept past the compare it may make:
	// its delta is handed out after).
	gone, retained, leaving []goneObject[T]
	rotated                 time.Time
	now                     func() time.Time
	writes                  int
	// failed is called with a difference found on a write: panic (a test of
	// the detector catches it).
	failed func(error)
}

// New is a detector, if on and T can be copied (nil otherwise).
func New[T comparable](on bool) *Detector[T] {
	var zero T
	if _, ok := any(zero).(runtime.Object); !ok || !on {
		return nil
	}
	return &Detector[T]{copies: map[string]T{}, now: time.Now, rotated: time.Now(), failed: func(err error) { panic(err) }}
}

// Retain is how long, at least, an object that left the store is compared
// with its copy (client-go's detector's retainDuration).
const Retain = 2 * time.Minute

// goneObject is an object handed out as it left the store, and its copy.
type goneObject[T comparable] struct {
	key       string
	obj, copy T
}

// Stored: obj is about to be stored at key (items, the stored objects,
// does not hold it yet).
func (d *Detector[T]) Stored(key string, obj T, items map[string]T) {
	if d == nil {
		return
	}
	if old, ok := items[key]; ok {
		d.verify(key, old)
		d.Left(key, old, false)
	}
	d.copies[key] = deepCopy(obj)
}

// Removed: key's object old is about to leave the store.
func (d *Detector[T]) Removed(key string, old T) {
	if d == nil {
		return
	}
	d.verify(key, old)
	d.Left(key, old, false)
	delete(d.copies, key)
}

// Left: obj, the object stored at key (its copy is there) or, fresh, the
// final state a deletion hands out, leaves with a delta.
func (d *Detector[T]) Left(key string, obj T, fresh bool) {
	if d == nil {
		return
	}
	c := d.copies[key]
	if fresh {
		c = deepCopy(obj)
	}
	d.leaving = append(d.leaving, goneObject[T]{key, obj, c})
}

// Replaced: a relist makes next the store's objects, instead of items.
func (d *Detector[T]) Replaced(items, next map[string]T) {
	if d == nil {
		return
	}
	for key, obj := range items {
		d.verify(key, obj)
	}
	d.verifyGone()
	for key, obj := range items {
		if next[key] != obj {
			d.Left(key, obj, false)
		}
	}
	d.keepLeaving()
	copies := make(map[string]T, len(next))
	for key, obj := range next {
		if c, ok := d.copies[key]; ok && items[key] == obj {
			copies[key] = c
		} else {
			copies[key] = deepCopy(obj)
		}
	}
	d.copies, d.writes = copies, 0
}

func deepCopy[T comparable](obj T) T { return any(obj).(runtime.Object).DeepCopyObject().(T) }

// Wrote counts a write (items is the stored objects after it), and
// compares every object, stored or gone, once per as many writes as there
// are of them, at least 64.
func (d *Detector[T]) Wrote(items map[string]T) {
	if d == nil {
		return
	}
	if d.writes++; d.writes >= max(64, len(items)+len(d.gone)+len(d.retained)) {
		d.writes = 0
		for key, obj := range items {
			d.verify(key, obj)
		}
		d.verifyGone()
	}
	d.keepLeaving()
}

// keepLeaving moves the objects leaving by this write to gone, after
// letting go of those that left more than Retain before the last rotation
// (a rotation every Retain: each is kept Retain to twice Retain).
func (d *Detector[T]) keepLeaving() {
	if now := d.now(); now.Sub(d.rotated) >= Retain {
		clear(d.retained)
		d.retained, d.gone, d.rotated = d.gone, d.retained[:0], now
	}
	d.gone = append(d.gone, d.leaving...)
	clear(d.leaving)
	d.leaving = d.leaving[:0]
}

func (d *Detector[T]) verify(key string, obj T) {
	if err := d.check(key, obj); err != nil {
		d.failed(err)
	}
}

func (d *Detector[T]) verifyGone() {
	if err := d.checkGone(); err != nil {
		d.failed(err)
	}
}

// checkGone compares every object kept since it left the store with its
// copy, and returns the first difference.
func (d *Detector[T]) checkGone() error {
	for _, gone := range [][]goneObject[T]{d.gone, d.retained} {
		for _, g := range gone {
			if err := changed(g.key, g.copy, g.obj, "object that left the store"); err != nil {
				return err
			}
		}
	}
	return nil
}

// check compares the object stored at key with its copy.
func (d *Detector[T]) check(key string, obj T) error {
	c, ok := d.copies[key]
	if !ok {
		return nil
	}
	return changed(key, c, obj, "cached object")
}

// changed says how obj differs from c, its copy (nil if it does not).
func changed[T comparable](key string, c, obj T, what string) error {
	if reflect.DeepEqual(obj, c) {
		return nil
	}
	return fmt.Errorf("store: the %s %s was changed in place: whoever reads the store must DeepCopy an object before changing it (%s); as stored (-) and now (+):\n%s",
		what, key, Env, diff.Diff(c, obj))
}

// CheckAll compares every stored object (items) and every object kept
// since it left with its copy, and returns the first difference.
func (d *Detector[T]) CheckAll(items map[string]T) error {
	if d == nil {
		return nil
	}
	for key, obj := range items {
		if err := d.check(key, obj); err != nil {
			return err
		}
	}
	return d.checkGone()
}
