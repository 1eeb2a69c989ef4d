package watcher

import (
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"time"

	"rawwatch/api/v1alpha1"
	"rawwatch/observe"
	"rawwatch/queue"
	"rawwatch/store"
)

// consumer is the explorer's controller: the handler's deltas go, by key,
// into the real work queue (package queue, with its default rate limiter,
// in order: a sharded controller's deletions-first order is package
// sharding's, and held there), and two workers reconcile them. A reconcile reads the store, takes
// reconcileTime, and fails (the key is retried with AddRateLimited) or
// succeeds (Forget; one in five asks to be requeued after requeueAfter, a
// periodic resync): which, from a hash of the key, the resourceVersion it
// read and the try, so that a key fails at most 3 times in a row. It holds
// the queue to these rules:
//
//   - a key waits in the queue at most once (adds of a waiting key merge);
//   - one worker per key: a key is never handed out while a worker holds it;
//   - retries are spaced as the rate limiter says: after a key's n-th
//     failure in a row the retry waits base·2ⁿ⁻¹ (the history of a key that
//     succeeded is forgotten), and the key is back in the queue by then (a
//     requeue pending for later gives way to it);
//   - every key's last state reaches a worker: once the run is over, the
//     last successful reconcile of every key read what the store holds.
type consumer struct {
	q     *queue.Queue
	store *store.Store[*v1alpha1.MyResource]
	start time.Time
	fail  func(string, ...any)
	wg    sync.WaitGroup

	mu sync.Mutex
	// adds counts the handler's adds of each key; holding: keys a worker
	// holds; waited: how long the key a worker just got had waited (the
	// queue's Got event, on the worker's goroutine).
	adds    map[string]int
	holding map[string]bool
	waited  map[string]time.Duration
	// Each key's failures in a row, the time its retry is due (if its last
	// reconcile failed), its tries, and the resourceVersion its last
	// successful reconcile read ("" for no object).
	failures map[string]int
	due      map[string]time.Time
	tries    map[string]int
	ok       map[string]string
}

const (
	reconcileTime = 300 * time.Millisecond
	requeueAfter  = 30 * time.Second
	workers       = 2
)

func newConsumer(st *store.Store[*v1alpha1.MyResource], start time.Time, fail func(string, ...any)) *consumer {
	c := &consumer{store: st, start: start, fail: fail,
		adds: map[string]int{}, holding: map[string]bool{}, waited: map[string]time.Duration{},
		failures: map[string]int{}, due: map[string]time.Time{}, tries: map[string]int{}, ok: map[string]string{}}
	c.q = queue.New(queue.DefaultRateLimiter())
	c.q.Observer = observe.Func(func(e observe.Event) {
		if g, ok := e.(queue.Got); ok {
			c.mu.Lock()
			c.waited[g.Key] = g.Waited
			c.mu.Unlock()
		}
	})
	for range workers {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			for c.work() {
			}
		}()
	}
	return c
}

// add is the handler's: a change of key.
func (c *consumer) add(key string) {
	c.mu.Lock()
	c.adds[key]++
	c.mu.Unlock()
	c.q.Add(key)
	c.waitsOnce(c.q.Snapshot(100).Ready)
}

// waitsOnce holds a snapshot of the waiting keys to "a key waits in the
// queue at most once".
func (c *consumer) waitsOnce(ready []string) {
	s := slices.Sorted(slices.Values(ready))
	for j := 1; j < len(s); j++ {
		if s[j] == s[j-1] {
			c.fail("a key waits in the queue at most once: %s waits twice at %v", s[j], c.at())
			break
		}
	}
}

func (c *consumer) at() time.Duration { return time.Since(c.start).Round(time.Millisecond) }

// work reconciles one key; false once the queue shut down.
func (c *consumer) work() bool {
	key, shutdown := c.q.Get()
	if shutdown {
		return false
	}
	now := time.Now()
	c.mu.Lock()
	if c.holding[key] {
		c.fail("one worker per key: %s was handed to a second worker at %v", key, c.at())
	}
	c.holding[key] = true
	if due, ok := c.due[key]; ok {
		// Back after a failure: the add that brought it back (a new
		// delta's, or the retry's) came by the time the retry was due.
		if added := now.Add(-c.waited[key]); added.Sub(due) > time.Millisecond {
			c.fail("retries are spaced as the rate limiter says: %s failed %d times in a row, its retry was due at %v, and it was back in the queue only at %v",
				key, c.failures[key], due.Sub(c.start).Round(time.Millisecond), added.Sub(c.start).Round(time.Millisecond))
		}
		delete(c.due, key)
	}
	c.mu.Unlock()

	rv := ""
	if obj, ok := c.store.Get(key); ok {
		rv = obj.ResourceVersion
	}
	time.Sleep(reconcileTime)

	c.mu.Lock()
	c.tries[key]++
	h := fnv.New32a()
	fmt.Fprintf(h, "%s/%s/%d", key, rv, c.tries[key])
	failed := h.Sum32()%3 == 0 && c.failures[key] < 3
	requeue := !failed && h.Sum32()%5 == 1
	if failed {
		c.failures[key]++
	} else {
		c.failures[key] = 0
		c.ok[key] = rv
	}
	n := c.failures[key]
	delete(c.holding, key)
	c.mu.Unlock()
	switch {
	case failed:
		d := c.q.AddRateLimited(key)
		if want := min(queue.DefaultRetryBase<<(n-1), queue.DefaultRetryMax); d != want {
			c.fail("retries are spaced as the rate limiter says: %s failed %d times in a row at %v, and its retry waits %v (want %v)", key, n, c.at(), d, want)
		}
		c.mu.Lock()
		c.due[key] = time.Now().Add(d)
		c.mu.Unlock()
	case requeue:
		c.q.Forget(key)
		c.q.AddAfter(key, requeueAfter)
	default:
		c.q.Forget(key)
	}
	c.q.Done(key)
	return true
}

// settled reports whether every key's last successful reconcile read what
// the store holds now.
func (c *consumer) settled() (key, read, holds string, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for key := range c.adds {
		now := ""
		if obj, ok := c.store.Get(key); ok {
			now = obj.ResourceVersion
		}
		if got, done := c.ok[key]; !done || got != now {
			return key, got, now, false
		}
	}
	return "", "", "", true
}

// finish waits (up to a minute) for every key's last state to be
// reconciled, then stops the workers.
func (c *consumer) finish() {
	for t0 := time.Now(); time.Since(t0) < time.Minute; time.Sleep(time.Second) {
		if _, _, _, ok := c.settled(); ok {
			break
		}
	}
	if key, read, holds, ok := c.settled(); !ok {
		c.fail("every key's last state reaches a worker: a minute after the run, the last successful reconcile of %s read resourceVersion %q, and the store holds %q",
			key, read, holds)
	}
	c.q.ShutDown()
	c.wg.Wait()
}
