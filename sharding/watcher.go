// Package sharding is the layer that makes the controller's parts work on a
// shard of the objects (package shard) instead of all of them, through the
// hooks they offer, so that an unsharded controller pays nothing for it:
//
//   - Watcher limits a watcher.Watcher to a shard (Options.ListOptions
//     carries the shard selector, Options.Filter leaves out what a server
//     without the selector sends), moves it to another shard as the ring
//     decides (SetShard, through Watcher.Relist), says which slots its
//     store covers since when (Coverage), and finds the deletions its watch
//     has not brought yet in the slots handed over (Sweep);
//   - DeletionsFirst is a queue.Order that hands out the keys with a
//     deletion to handle before the others, and Drain handles the
//     deletions left when a replica leaves its ring: a deletion in a slot
//     that moves is heard of by no other replica.
//
// The ring (package ring) and the gate of app decide who works
// which slot; this package does what a replica does with its part.
package sharding

import (
	"context"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"rawwatch/observe"
	"rawwatch/shard"
	"rawwatch/store"
	"rawwatch/watcher"
)

// The events a sharded Watcher reports to its watcher's Observer.
type (
	// OutOfShard: the server sent an object outside the shard (it dropped
	// the shard selector), and the watcher left it out.
	OutOfShard struct{ Key string }
	// Resharded: SetShard's shard is in effect; the store dropped the
	// objects outside it (Dropped, not deletions), a relist follows.
	Resharded struct {
		Share   float64 // of the hash space; 0 for every object
		Dropped int
	}
	// Swept: Sweep listed Share of the hash space (Listed objects) and
	// found Deleted stored objects gone from the server, or failed (Err).
	Swept struct {
		Share           float64
		Listed, Deleted int
		Err             error
	}
)

// Watcher is a watcher.Watcher limited to the objects whose UID hashes into
// its shard: its LISTs and WATCHes carry the shard as their shardSelector,
// so that the server sends only those (kube-apiserver with
// ShardedListAndWatch). A server that drops the parameter sends everything:
// the objects outside the shard are then left out here, with a log line and
// OutOfShard events saying no bandwidth is saved.
type Watcher[T watcher.Object] struct {
	*watcher.Watcher[T]
	source   watcher.Source
	store    *store.Store[T]
	codec    watcher.Codec[T]
	pageSize int64
	obs      observe.Observer
	log      klog.Logger // Run's

	// cur is the shard in effect, replaced whole on the loop's goroutine;
	// next, one SetShard asked for, not in effect yet.
	cur        atomic.Pointer[scope]
	next       atomic.Pointer[shard.Set]
	ignored    atomic.Bool
	outOfShard atomic.Int64
}

// scope is a shard in effect: set, as the selector; the slots covered
// once the store took a list made with it (listed), and until then (kept:
// those of the shards before that it keeps too), the store having taken
// lists lists when it came in effect.
type scope struct {
	set          shard.Set
	selector     string
	listed, kept shard.SlotSet
	lists        uint64
}

// covered is what the scope covers with the store at p.
func (s *scope) covered(p watcher.Position) shard.SlotSet {
	if p.Lists > s.lists {
		return s.listed
	}
	return s.kept
}

// slotsOf is the slots a list of set holds: every slot for the empty set
// (every object).
func slotsOf(set shard.Set) shard.SlotSet {
	if len(set) == 0 {
		return shard.All()
	}
	return set.Slots()
}

// NewWatcher returns a watcher of set (empty: every object) that fills s
// from src; its events go to opts.Observer. opts.ListOptions and
// opts.Filter are this package's. Call Run to start it.
func NewWatcher[T watcher.Object](src watcher.Source, s *store.Store[T], opts watcher.Options[T], set shard.Set) *Watcher[T] {
	w := &Watcher[T]{source: src, store: s, codec: opts.Codec, pageSize: opts.PageSize, obs: opts.Observer}
	if w.pageSize == 0 {
		w.pageSize = watcher.DefaultPageSize
	}
	w.cur.Store(&scope{set: set, selector: set.Selector(), listed: slotsOf(set)})
	opts.ListOptions = func(o *metav1.ListOptions) { o.ShardSelector = w.cur.Load().selector }
	opts.Filter = w.inShard
	w.Watcher = watcher.New(src, s, opts)
	return w
}

// Run runs the watcher (watcher.Watcher.Run) until ctx ends.
func (w *Watcher[T]) Run(ctx context.Context) {
	w.log = klog.LoggerWithName(klog.FromContext(ctx), "watcher")
	w.Watcher.Run(ctx)
}

// Covered is the slots (package shard) whose every object the store holds
// since a list of them, watched since: every deletion in them from now on
// reaches the Handler, as a DELETED event or, if the watch is down, as a
// relist's FinalStateUnknown delta. It is empty before the first list; a
// shard change (SetShard) keeps the slots of both shards, and adds the new
// ones once their list is in; every slot, for the empty shard, once
// synced. A sharded controller hands a slot over only once its new owner
// covers it (package ring).
func (w *Watcher[T]) Covered() shard.SlotSet {
	slots, _, _ := w.Coverage()
	return slots
}

// Coverage is Covered with two resourceVersions: since, the last list's
// (the store has followed every event of those slots since, without a
// gap), and at, where the store stands now; all three read in one step (a
// relist replaces them together). Every object of the slots whose last
// change is at or before at, and that lived at since or was created after
// it, the store has held: its deletion reaches the Handler whenever it
// comes. A sharded controller publishes this, for the replica handing it a
// slot to know when nothing it had can be lost in the new owner's relist
// gap (package ring).
func (w *Watcher[T]) Coverage() (slots shard.SlotSet, since, at string) {
	for {
		s := w.cur.Load()
		p := w.Position()
		if w.cur.Load() == s { // the shard did not change while p was read
			return s.covered(p), p.Since, p.At
		}
	}
}

// OutOfShard is how many objects the server sent outside the shard.
func (w *Watcher[T]) OutOfShard() int64 { return w.outOfShard.Load() }

// SetShard makes the watcher list and watch s from now on (empty: every
// object). The request or stream in flight is cut short; the objects the
// store holds outside s are dropped from it without a delta (they moved to
// another replica, they were not deleted); then the watcher relists, with
// s as its selector, which hands out the objects new to the store as Added.
// A backoff under way is waited out first. Safe to call from any goroutine.
func (w *Watcher[T]) SetShard(s shard.Set) {
	w.next.Store(&s)
	w.Relist(w.applyShard)
}

// applyShard puts the shard SetShard asked for in effect, on the loop's
// goroutine (watcher.Watcher.Relist's prepare): the store keeps only its
// objects, and the slots of both shards stay covered (their objects stay
// in the store, and the relist's deletions reach the handler); the new ones
// are, once the relist is in.
func (w *Watcher[T]) applyShard() bool {
	next := w.next.Swap(nil)
	if next == nil {
		return false
	}
	old, p := w.cur.Load(), w.Position()
	kept := old.covered(p)
	if len(*next) > 0 {
		kept = kept.And(next.Slots())
	}
	w.cur.Store(&scope{set: *next, selector: next.Selector(), listed: slotsOf(*next), kept: kept, lists: p.Lists})
	dropped := 0
	if len(*next) > 0 {
		dropped = w.store.Retain(func(obj T) bool { return next.Contains(string(obj.GetUID())) })
	}
	w.report(Resharded{Share: next.Fraction(), Dropped: dropped})
	w.log.Info("Shard changed: relisting", "share", next.Fraction(), "dropped", dropped, "kept", w.store.Len())
	return true
}

// inShard tells whether obj belongs to the shard (watcher.Options.Filter);
// one that does not means the server dropped the shard selector.
func (w *Watcher[T]) inShard(obj T) bool {
	s := w.cur.Load()
	if len(s.set) == 0 || s.set.Contains(string(obj.GetUID())) {
		return true
	}
	if !w.ignored.Swap(true) {
		w.log.Info("The server ignores shard selectors (is its ShardedListAndWatch feature gate off?): filtering on the client, so every object is still received and decoded",
			"selector", s.selector, "share", s.set.Fraction())
	}
	w.outOfShard.Add(1)
	w.report(OutOfShard{Key: store.KeyOf(obj)})
	return false
}

func (w *Watcher[T]) report(e observe.Event) {
	if w.obs != nil {
		w.obs.Observe(e)
	}
}
