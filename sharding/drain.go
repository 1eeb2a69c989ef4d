package sharding

import (
	"context"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"rawwatch/reconcile"
	"rawwatch/store"
)

// drainPoll is how often a drain whose every deletion waits for its retry
// looks for one recorded meanwhile.
const drainPoll = 20 * time.Millisecond

// Drain handles c's deletions not handled yet, once c.Run has returned (its
// workers stopped, its queue shut down): the first half of a sharded
// replica's clean leave, whose slots' next owner never hears of a deletion
// made before it listed them. Deleted only, no Reconcile (an update is the
// next owner's: it reconciles every key it takes over), up to workers keys
// at a time, until none is left or ctx ends. A deletion recorded meanwhile
// is handled too (OnDelta still records deletions once the queue has shut
// down). One whose Deleted fails is tried again after its key's backoff
// (the queue's rate limiter), as a worker would. Each Deleted gets ctx,
// bounded by reconcile.ReconcileTimeout as a worker's would be; a Deleted
// that ignores its context holds the drain up as it would hold up Run.
//
// It returns the deletions left when ctx ended, not handled: what the
// caller loses, unless it hands them over.
func Drain[T store.Object](ctx context.Context, c *reconcile.Controller[T], workers int) (left []store.Delta[T]) {
	logger := klog.LoggerWithValues(klog.LoggerWithName(klog.FromContext(ctx), "reconciler"), "draining", true)
	retryAt := map[string]time.Time{}
	for {
		now := time.Now()
		var ready []string
		var wake time.Time
		seen := map[string]bool{}
		c.Deletions(func(d store.Delta[T], _ bool) {
			if seen[d.Key] {
				return
			}
			seen[d.Key] = true
			if at := retryAt[d.Key]; at.After(now) {
				if wake.IsZero() || at.Before(wake) {
					wake = at
				}
				return
			}
			ready = append(ready, d.Key)
		})
		switch {
		case len(ready) == 0 && wake.IsZero():
			return nil
		case ctx.Err() != nil:
			c.Deletions(func(d store.Delta[T], _ bool) { left = append(left, d) })
			return left
		case len(ready) == 0: // every one waits for its retry
			timer := time.NewTimer(min(wake.Sub(now), drainPoll))
			select {
			case <-ctx.Done():
			case <-timer.C:
			}
			timer.Stop()
			continue
		}
		keys := make(chan string, len(ready))
		for _, key := range ready {
			keys <- key
		}
		close(keys)
		var mu sync.Mutex
		var wg sync.WaitGroup
		for range min(max(workers, 1), len(ready)) {
			wg.Go(func() {
				for key := range keys {
					kctx, cancel := context.WithTimeout(klog.NewContext(ctx, klog.LoggerWithValues(logger, "key", key)), reconcile.ReconcileTimeout)
					err := c.HandleDeletions(kctx, key)
					cancel()
					if err == nil {
						c.Queue.Forget(key)
						mu.Lock()
						delete(retryAt, key)
						mu.Unlock()
						continue
					}
					// The queue shut down: AddRateLimited adds nothing, it
					// only says when the key's backoff ends.
					in := c.Queue.AddRateLimited(key)
					logger.Error(err, "Handling a deletion failed while draining, will retry", "key", key, "retryIn", in)
					mu.Lock()
					retryAt[key] = time.Now().Add(in)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
	}
}
