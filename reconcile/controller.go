package reconcile

import (
	"context"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"

	"rawwatch/observe"
	"rawwatch/queue"
	"rawwatch/store"
)

// Request is one unit of work: a key, and what the watcher said about it.
type Request[T store.Object] struct {
	Key string
	// Deleted holds every Deleted delta for Key since it was last handled,
	// oldest first (none if nothing was deleted): each the object's final
	// state, or with FinalStateUnknown its last known state. There can be
	// several — deleted, re-created, deleted again while the key waited —
	// and they are different objects (UIDs). The key may exist again.
	Deleted []store.Delta[T]
}

// Reconciler does the work for one key. It must be safe to call from several
// goroutines, for different keys.
type Reconciler[T store.Object] interface {
	Reconcile(ctx context.Context, req Request[T]) error
}

// The events the workers report to the Controller's Observer.
type (
	// Started: Worker took Key from the queue.
	Started struct {
		Worker int
		Key    string
	}
	// Finished: the reconcile of Key ended after Took with Err; RetryIn > 0
	// when the key was requeued after an error.
	Finished struct {
		Worker  int
		Key     string
		Took    time.Duration
		Err     error
		RetryIn time.Duration
	}
	// Resynced: every one of Keys keys in the store was queued (Resync).
	Resynced struct{ Keys int }
)

func (Started) Component() string  { return "worker" }
func (Finished) Component() string { return "worker" }
func (Resynced) Component() string { return "worker" }

// DefaultWorkers is how many workers a controller runs unless told otherwise
// (sample-controller runs two).
const DefaultWorkers = 2

// ReconcileTimeout bounds one reconcile. A pod's termination grace period
// must exceed it plus the Lease release (config/manager's does; a test checks).
const ReconcileTimeout = 30 * time.Second

// Controller connects watcher deltas to a queue and runs workers over it.
type Controller[T store.Object] struct {
	Queue      *queue.Queue
	Reconciler Reconciler[T]
	// Observer hears Started and Finished (optional).
	Observer observe.Observer
	Logger   klog.Logger

	mu         sync.Mutex
	tombstones map[string][]store.Delta[T]
	abort      context.Context
}

// OnDelta is the watcher's handler: it enqueues the key of every change and
// remembers deletions for the reconciler.
func (c *Controller[T]) OnDelta(d store.Delta[T]) {
	if d.Type == store.Deleted {
		c.mu.Lock()
		if c.tombstones == nil {
			c.tombstones = map[string][]store.Delta[T]{}
		}
		// Keep every deletion: the key is queued once, but each of them
		// was another object, and the reconciler must hear of each.
		c.tombstones[d.Key] = append(c.tombstones[d.Key], d)
		c.mu.Unlock()
	}
	c.Queue.Add(d.Key)
}

// Resync queues every key: the level-triggered resync a controller does when
// it starts working on a store that filled without it (a new leader).
func (c *Controller[T]) Resync(keys []string) {
	if c.Observer != nil {
		c.Observer.Observe(Resynced{Keys: len(keys)})
	}
	for _, key := range keys {
		c.Queue.Add(key)
	}
}

func (c *Controller[T]) takeTombstones(key string) []store.Delta[T] {
	c.mu.Lock()
	defer c.mu.Unlock()
	ds := c.tombstones[key]
	delete(c.tombstones, key)
	return ds
}

// putBackTombstones restores the tombstones of a failed reconcile, before
// any deletion that arrived meanwhile.
func (c *Controller[T]) putBackTombstones(key string, ds []store.Delta[T]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tombstones[key] = append(ds, c.tombstones[key]...)
}

// Run starts workers and blocks until ctx ends and every worker has
// stopped. A reconcile in flight when ctx ends runs to completion (a status
// write cut in half helps nobody), bounded by ReconcileTimeout, unless abort
// ends: then it is cancelled at once (another replica may take the key over:
// the Lease was lost). abort may be nil.
func (c *Controller[T]) Run(ctx, abort context.Context, workers int) {
	if c.Logger.GetSink() == nil {
		c.Logger = klog.Background()
	}
	if abort == nil {
		abort = context.Background()
	}
	c.abort = abort
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			for c.processNext(ctx, i) {
			}
		})
	}
	<-ctx.Done()
	c.Queue.ShutDown()
	wg.Wait()
}

// processNext handles one key; it returns false when the queue shut down.
func (c *Controller[T]) processNext(ctx context.Context, worker int) bool {
	key, shutdown := c.Queue.Get()
	if shutdown {
		return false
	}
	defer c.Queue.Done(key)
	c.Logger.V(4).Info("Reconciling", "worker", worker, "key", key)
	if c.Observer != nil {
		c.Observer.Observe(Started{Worker: worker, Key: key})
	}
	// The reconcile runs to completion even if ctx ends meanwhile, in its own
	// bounded context, unless the work is aborted (see Run).
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ReconcileTimeout)
	defer cancel()
	defer context.AfterFunc(c.abort, cancel)()
	req := Request[T]{Key: key, Deleted: c.takeTombstones(key)}
	start := time.Now()
	err := c.Reconciler.Reconcile(rctx, req)
	d := time.Since(start)
	c.Logger.V(4).Info("Reconciled", "worker", worker, "key", key, "duration", d, "ok", err == nil)
	var retryIn time.Duration
	switch {
	case err == nil:
		c.Queue.Forget(key)
	case apierrors.IsConflict(err):
		// Someone wrote the object after the version we read. The watch will
		// bring the new version; retry then, without raising an alarm.
		retryIn = c.retry(key, req)
		c.Logger.V(2).Info("Conflict writing, will retry", "key", key, "retryIn", retryIn)
	default:
		retryIn = c.retry(key, req)
		c.Logger.Error(err, "Reconcile failed, will retry", "key", key,
			"retries", c.Queue.Retries(key), "retryIn", retryIn)
	}
	if c.Observer != nil {
		c.Observer.Observe(Finished{Worker: worker, Key: key, Took: d, Err: err, RetryIn: retryIn})
	}
	return true
}

func (c *Controller[T]) retry(key string, req Request[T]) time.Duration {
	if len(req.Deleted) > 0 {
		c.putBackTombstones(key, req.Deleted)
	}
	return c.Queue.AddRateLimited(key)
}
