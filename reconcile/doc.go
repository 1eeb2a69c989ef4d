// Package reconcile turns keys from the queue into API writes.
//
// Controller is the generic half, the loop every controller has (the
// MyResource-specific half, the Reconciler it calls, is package
// reconcile/myresource): workers take a key from the queue.Queue, call the
// Reconciler, and act on the result:
//
//   - success forgets the key's retry history;
//   - an error requeues the key after its per-key backoff;
//   - a 409 Conflict requeues it quietly after a fixed safety net (the watch
//     brings the newer object and queues the key at once);
//   - an error that says the server, not the object, is at fault
//     (unreachable, 5xx, 429, a timeout: ServerAway) pauses every worker, 0.5 s
//     doubling to 30 s, and puts the key back with its history untouched, so
//     an outage of any length is followed by convergence within 30 s.
//
// For every deletion the watcher reports, the Reconciler's Deleted method gets
// the last object the watcher knew, so a deletion is never reduced to "not
// found", nor two deletions of one key to one. A deletion is handed over until
// it is handled, then never again (client-go leaves this to each controller).
// Each reconcile's context carries a logger with the worker and the key, as
// controller-runtime's does.
//
// When Run's context ends, the workers finish the keys they hold and stop;
// what is still queued is dropped (updates are level-triggered: whoever works
// the keys next reconciles them). Deletions are not: they stay recorded
// (Deletions, HandleDeletions), so a sharded replica that leaves its ring
// cleanly hands them to Deleted before it goes (package sharding's Drain).
package reconcile
