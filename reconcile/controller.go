package reconcile

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"

	"rawwatch/observe"
	"rawwatch/queue"
	"rawwatch/store"
)

// Reconciler does the work for keys, from several goroutines; one key is
// never in two calls at once.
type Reconciler[T store.Object] interface {
	// Deleted handles one object that left the cluster (its final state, or
	// with FinalStateUnknown the last the watcher knew). Each deletion is
	// handed over until Deleted returns nil for it; those of one key
	// (deleted, re-created, deleted again) oldest first, before Reconcile.
	Deleted(ctx context.Context, d store.Delta[T]) error
	// Reconcile brings the object stored under key, if any, to the state it
	// should have. An error retries the key later (not its deletions).
	Reconcile(ctx context.Context, key string) error
}

// The events the workers report to the Controller's Observer.
type (
	// Started: Worker took Key from the queue.
	Started struct {
		Worker int
		Key    string
	}
	// Finished: the reconcile of Key ended after Took with Err; RetryIn > 0
	// when the key was requeued.
	Finished struct {
		Worker  int
		Key     string
		Took    time.Duration
		Err     error
		RetryIn time.Duration
	}
	// Resynced: every one of Keys keys in the store was queued (Resync).
	Resynced struct{ Keys int }
	// Paused: the reconcile of Key failed with the server away (Err): the
	// workers take no key for For.
	Paused struct {
		Key string
		For time.Duration
		Err error
	}
)

// DefaultWorkers is how many workers a controller runs unless told otherwise
// (sample-controller runs two).
const DefaultWorkers = 2

// ReconcileTimeout bounds one reconcile (the pod's termination grace period
// exceeds it plus the Lease release: a test checks).
const ReconcileTimeout = 30 * time.Second

// Controller connects watcher deltas to a queue and runs workers over it.
type Controller[T store.Object] struct {
	Queue      *queue.Queue
	Reconciler Reconciler[T]
	// Observer hears Started, Finished and Paused (optional).
	Observer observe.Observer
	// ConflictRetry is when a key whose write met a 409 Conflict is tried
	// again (default DefaultConflictRetry).
	ConflictRetry time.Duration
	// PauseInitial and PauseMax bound the workers' pause while the server is
	// away (default DefaultPauseInitial, DefaultPauseMax).
	PauseInitial, PauseMax time.Duration

	mu         sync.Mutex
	tombstones map[string][]store.Delta[T]
	handling   map[string][]store.Delta[T] // taken by a worker, not yet handled
	failed     map[string]bool             // keys whose Deleted failed, until their deletions are handled
	abort      context.Context
	pause      pause
}

// DefaultConflictRetry is the safety net for a key whose write conflicted
// (the watch normally brings the newer version, which queues it).
const DefaultConflictRetry = 10 * time.Second

// OnDelta is the watcher's handler: it enqueues the key of every change and
// keeps deletions for the reconciler.
func (c *Controller[T]) OnDelta(d store.Delta[T]) {
	if d.Type == store.Deleted {
		c.mu.Lock()
		if c.tombstones == nil {
			c.tombstones = map[string][]store.Delta[T]{}
		}
		// Keep every deletion: each was another object.
		c.tombstones[d.Key] = append(c.tombstones[d.Key], d)
		c.mu.Unlock()
	}
	c.Queue.Add(d.Key)
}

// Resync queues every key, as a new leader does with a store that filled
// without it.
func (c *Controller[T]) Resync(keys []string) {
	if c.Observer != nil {
		c.Observer.Observe(Resynced{Keys: len(keys)})
	}
	for _, key := range keys {
		c.Queue.Add(key)
	}
}

// HandleDeletions hands key's tombstones to the Reconciler, oldest first.
// The first that fails goes back, with those after it, before any that
// came meanwhile. A worker calls it before Reconcile; a caller that stopped
// the workers (sharding's drain) may call it alone.
func (c *Controller[T]) HandleDeletions(ctx context.Context, key string) error {
	c.mu.Lock()
	ds := c.tombstones[key]
	delete(c.tombstones, key)
	if len(ds) > 0 {
		if c.handling == nil {
			c.handling = map[string][]store.Delta[T]{}
		}
		c.handling[key] = ds
	}
	c.mu.Unlock()
	for i, d := range ds {
		if err := c.Reconciler.Deleted(ctx, d); err != nil {
			c.mu.Lock()
			c.tombstones[key] = append(ds[i:], c.tombstones[key]...)
			delete(c.handling, key)
			if c.failed == nil {
				c.failed = map[string]bool{}
			}
			c.failed[key] = true
			c.mu.Unlock()
			return fmt.Errorf("handling the deletion of %s (uid %s): %w", key, d.Object.GetUID(), err)
		}
		c.mu.Lock()
		c.handling[key] = ds[i+1:]
		c.mu.Unlock()
	}
	c.mu.Lock()
	delete(c.handling, key)
	if len(c.tombstones[key]) == 0 {
		delete(c.failed, key)
	}
	c.mu.Unlock()
	return nil
}

// HasDeletions: key has deletions not yet handled.
func (c *Controller[T]) HasDeletions(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.tombstones[key]) > 0
}

// Deletions calls f, under the controller's lock, with every deletion
// Deleted has not returned nil for; failed: it failed for its key.
func (c *Controller[T]) Deletions(f func(d store.Delta[T], failed bool)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range []map[string][]store.Delta[T]{c.tombstones, c.handling} {
		for key, ds := range m {
			for _, d := range ds {
				f(d, c.failed[key])
			}
		}
	}
}

// Run starts workers and blocks until ctx ends and every worker stopped. A
// reconcile in flight when ctx ends runs to completion (ReconcileTimeout),
// unless abort (may be nil) ends: the Lease was lost. Each reconcile's
// context carries ctx's logger named "reconciler", with worker and key.
func (c *Controller[T]) Run(ctx, abort context.Context, workers int) {
	if abort == nil {
		abort = context.Background()
	}
	c.abort = abort
	c.pause.Initial = cmp.Or(c.PauseInitial, DefaultPauseInitial)
	c.pause.Max = cmp.Or(c.PauseMax, DefaultPauseMax)
	c.ConflictRetry = cmp.Or(c.ConflictRetry, DefaultConflictRetry)
	logger := klog.LoggerWithName(klog.FromContext(ctx), "reconciler")
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			logger := klog.LoggerWithValues(logger, "worker", i)
			work, stop := c.workContext(ctx)
			defer stop()
			for c.pause.wait(ctx) && c.processNext(work, logger, i) {
			}
		})
	}
	<-ctx.Done()
	c.Queue.ShutDown()
	wg.Wait()
}

// workContext is what a worker's reconciles run in: ctx's values but not
// its end, cancelled when c.abort ends.
func (c *Controller[T]) workContext(ctx context.Context) (context.Context, context.CancelFunc) {
	work, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(c.abort, cancel)
	return work, func() { stop(); cancel() }
}

// processNext handles one key; it returns false when the queue shut down.
func (c *Controller[T]) processNext(work context.Context, logger klog.Logger, worker int) bool {
	key, shutdown := c.Queue.Get()
	if shutdown {
		return false
	}
	defer c.Queue.Done(key)
	start := time.Now()
	rctx, cancel := context.WithTimeout(klog.NewContext(work, klog.LoggerWithValues(logger, "key", key)), ReconcileTimeout)
	defer cancel()
	log := klog.FromContext(rctx)
	log.V(4).Info("Reconciling")
	if c.Observer != nil { // checked before the event is made: boxing it allocates
		c.Observer.Observe(Started{Worker: worker, Key: key})
	}
	err := c.HandleDeletions(rctx, key)
	if err == nil {
		err = c.Reconciler.Reconcile(rctx, key)
	}
	d := time.Since(start)
	log.V(4).Info("Reconciled", "duration", d, "ok", err == nil)
	var retryIn time.Duration
	away, retryAfter := ServerAway(err)
	switch {
	case err == nil:
		c.Queue.Forget(key)
		c.pause.succeeded()
	case apierrors.IsConflict(err):
		// The watch brings the newer version and queues the key; the retry
		// is a safety net, and the retry history does not grow.
		retryIn = c.ConflictRetry
		c.Queue.AddAfter(key, retryIn)
		log.V(2).Info("Conflict writing, will retry", "retryIn", retryIn)
	case away:
		// The server, not the object: every worker pauses (see pause).
		pauseFor := c.pause.failed(time.Now(), start, retryAfter)
		c.Queue.Add(key)
		log.V(2).Info("Server away; workers pause", "err", err, "pause", pauseFor)
		if c.Observer != nil {
			c.Observer.Observe(Paused{Key: key, For: pauseFor, Err: err})
		}
	default:
		retryIn = c.Queue.AddRateLimited(key)
		log.Error(err, "Reconcile failed, will retry", "retries", c.Queue.Retries(key), "retryIn", retryIn)
	}
	if c.Observer != nil {
		c.Observer.Observe(Finished{Worker: worker, Key: key, Took: d, Err: err, RetryIn: retryIn})
	}
	return true
}
