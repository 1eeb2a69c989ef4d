// Package reconcile turns keys from the queue into API writes.
//
// Controller is the generic half, the loop every controller has: workers take
// a key from the queue.Queue, call the Reconciler, and decide what the result
// means: success forgets the key's retry history, a 409 Conflict requeues it
// quietly (the watch will bring the newer object), any other error requeues it
// after its per-key backoff. Deleted keys carry, for every deletion since the
// key was last handled, the last object the watcher knew (a tombstone), so a
// deletion is never reduced to "not found", nor two deletions to one.
//
// MyResourceReconciler is the MyResource-specific half. It reads the object
// from the store, never modifies the cached copy, computes the status the
// object should have (a pure function, Desired), and writes it through the
// /status subresource only when it differs, so a re-run with nothing changed
// makes no request. It records a Kubernetes Event on every status change.
package reconcile
