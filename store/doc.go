// Package store is the controller's memory: what it knows about the cluster,
// and what it still has to do about it.
//
// It has two halves, which client-go spreads over Indexer, DeltaFIFO and
// workqueue:
//
//   - Store is a thread-safe map of objects keyed "namespace/name", with an
//     index by namespace. The watcher is its only writer; reconcilers read it.
//     Every write returns a Delta saying what changed, so the caller can react
//     (enqueue the key) without a second queue of objects. A relist is built
//     beside the live map (Replacement) and swapped in under one lock; keys that
//     vanished come back as Deleted deltas carrying the last object we knew, the
//     equivalent of client-go's DeletedFinalStateUnknown, and so does the old
//     object of a key re-created meanwhile (listed with another UID).
//
//   - Queue is a queue of keys, not objects. A key is in it at most once
//     (dirty set); a key being worked on (processing set) is never handed to a
//     second worker, and if it is added again meanwhile it comes back once the
//     first worker calls Done. Failed keys return after a per-key exponential
//     delay (RateLimiter); AddAfter schedules a key for later; ShutDown stops
//     new work while work in flight finishes.
//
// Objects in the Store are shared with every reader: treat them as read-only
// and DeepCopy before changing anything.
package store
