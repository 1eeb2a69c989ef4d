package sharding

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"rawwatch/shard"
	"rawwatch/store"
	"rawwatch/watcher"
)

// Sweep finds the deletions in slots that the watch has not brought yet:
// it takes the stored objects of those slots, then LISTs the slots at the
// latest resourceVersion (paginated, with their shard selector), and
// returns, as Deleted deltas with FinalStateUnknown, the stored objects the
// list does not have under their UID (gone, or the name re-created as
// another object). The store is not touched: the watch, or a relist, still
// brings these deletions in its own time; Sweep only lets its caller hear
// of them now.
//
// A sharded controller sweeps the slots it hands over (package ring): its
// watch may be behind, and the new owner cannot see what was deleted before
// it listed. The objects are taken before the LIST starts, so an object
// created since is not mistaken for a deleted one. Sweep may run beside Run.
//
// It also says where the list was read (SweepResult.RV) and, for each
// slot, the newest resourceVersion among its objects: the new owner has
// every object the sweep saw once its cache is synced that far, on a watch
// unbroken since a list made at or before the sweep's (Coverage).
func (w *Watcher[T]) Sweep(ctx context.Context, slots shard.SlotSet) (res SweepResult[T], err error) {
	set := slots.Set()
	listed := 0
	defer func() {
		w.report(Swept{Share: set.Fraction(), Listed: listed, Deleted: len(res.Deleted), Err: err})
	}()
	if slots.Empty() {
		return res, nil
	}
	stored := map[string]T{}
	for _, obj := range w.store.List() {
		if slots.Has(shard.SlotOf(string(obj.GetUID()))) {
			stored[store.KeyOf(obj)] = obj
		}
	}
	present := map[string]types.UID{} // key → UID on the server
	kept := map[string]types.UID{}    // keys of objects that cannot be decoded (their UIDs, if read): kept if the same object
	opts := metav1.ListOptions{Limit: w.pageSize, ShardSelector: set.Selector()}
	for {
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		body, err := w.source.List(rctx, opts)
		if err != nil {
			cancel()
			return SweepResult[T]{}, fmt.Errorf("sweeping slots %s: %w", slots, err)
		}
		meta, err := w.codec.DecodeList(body,
			func(obj T) {
				if set.Contains(string(obj.GetUID())) { // a server may ignore the selector
					listed++
					present[store.KeyOf(obj)] = obj.GetUID()
					i := shard.SlotOf(string(obj.GetUID()))
					res.Newest[i] = max(res.Newest[i], ParseRV(obj.GetResourceVersion()))
				}
			},
			func(skip *watcher.SkipError) {
				kept[skip.Key] = skip.UID // "": an item that may be any stored object
			})
		body.Close()
		cancel()
		if err != nil {
			return SweepResult[T]{}, fmt.Errorf("sweeping slots %s: %w", slots, err)
		}
		if meta.Continue == "" {
			res.RV = ParseRV(meta.ResourceVersion)
			break
		}
		opts = metav1.ListOptions{Limit: w.pageSize, Continue: meta.Continue, ShardSelector: set.Selector()}
	}
	if _, unknown := kept[""]; unknown {
		return res, nil // an item it could not name may be any of them: none is known deleted
	}
	for key, obj := range stored {
		if uid, ok := present[key]; ok && uid == obj.GetUID() {
			continue
		}
		if uid, ok := kept[key]; ok && store.MayBe(uid, obj) {
			continue
		}
		res.Deleted = append(res.Deleted, store.Delta[T]{Type: store.Deleted, Key: key, Object: obj, FinalStateUnknown: true})
	}
	return res, nil
}

// SweepResult is what a Sweep found.
type SweepResult[T watcher.Object] struct {
	// Deleted: the stored objects the list did not have.
	Deleted []store.Delta[T]
	// RV is the list's resourceVersion (ParseRV's).
	RV uint64
	// Newest: by slot, the newest resourceVersion among the listed objects
	// (0: none; ParseRV's).
	Newest [shard.Slots]uint64
}

// ParseRV reads a resourceVersion as the number it is on an etcd-backed
// API server. Resource versions are opaque to clients, save for this one
// use: a sharded controller orders the positions of two replicas' caches.
// "" is 0 (unknown); one that is not a number is math.MaxUint64, which no
// position reaches (the handoff then waits for its timeout).
func ParseRV(rv string) uint64 {
	if rv == "" {
		return 0
	}
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return math.MaxUint64
	}
	return n
}
