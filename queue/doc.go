// Package queue is the work queue between the watcher and the workers: it
// holds keys, not objects, and hands each to one worker at a time. In
// client-go this is util/workqueue's rate-limiting queue; controller-runtime
// wraps the same one.
//
//	watcher ── delta ──▶ Add(key) ──▶ [ dirty keys, oldest first ] ──▶ Get() ──▶ worker
//	                        ▲                                                     │
//	                        └── AddRateLimited(key): after the key's delay ◀── error
//	                                                         Forget(key) ◀── success
//	                                                           Done(key) ◀── always
//
// The guarantees, and their client-go names:
//
//   - dedup (the dirty set): a key waiting is there once, however often it is
//     added; ten changes while it waits cost one reconcile, which reads the
//     latest object from the store;
//   - exclusivity (the processing set): between Get and Done a key belongs to
//     one worker; an Add meanwhile marks it dirty, and Done puts it back for
//     exactly one more run;
//   - fairness: keys come out in the order they became dirty, or in the
//     order an Order gives them (NewOrdered; client-go's workqueue takes a
//     Queue the same way): a sharded controller's hands out the keys with a
//     deletion first (package sharding's DeletionsFirst);
//   - retries (the rate limiter): AddRateLimited re-adds a key after the
//     delay its RateLimiter gives — DefaultRateLimiter is client-go's
//     DefaultControllerRateLimiter: per-key exponential 5 ms doubling to
//     1000 s, under one token bucket of 10 retries a second (burst 100) for
//     all keys — and Forget clears it after a success;
//   - AddAfter schedules an add; if one is already scheduled, the earlier
//     time wins (client-go's delaying queue);
//   - shutdown: ShutDown makes every Get return at once; keys in process stay
//     valid until their Done; delayed adds are dropped.
//
// Where it differs: metrics come from the Queue's own Observer (Added, Got,
// the wait measured under the queue's lock) instead of a process-wide
// MetricsProvider, so two queues in one process keep apart. Maps and slices
// that a burst grew are dropped when the queue drains; small ones are kept, so
// that a queue taking one key at a time allocates nothing for it.
package queue
