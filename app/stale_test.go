package app_test

import (
	"context"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"rawwatch/api/v1alpha1"
	"rawwatch/client"
	"rawwatch/internal/testkit"
	"rawwatch/observe"
	"rawwatch/queue"
	"rawwatch/reconcile"
	"rawwatch/reconcile/myresource"
	"rawwatch/store"
)

// On the real apiserver: what fences a replica that was
// paused in the middle of a reconcile while its slot moved to another. Its
// status write carries the resourceVersion of the object it read before
// the pause; the new owner has since read the object changed (generation 2)
// and written its status. The old owner's write meets a 409 Conflict: the
// status stays the new owner's (generation 2, not the old owner's
// generation 1), the old owner's worker takes it for a conflict (retried
// quietly, its backoff untouched, nothing logged as an error), and no Event
// is recorded for the write that failed. (What is not fenced —
// an Event after a write that succeeded before the slot moved, a deletion's
// handling, any side effect outside the object — docs/sharding.md says.)
func TestAPausedOldOwnersStatusWriteMeetsAConflict(t *testing.T) {
	_, ns, c := testkit.Parallel(t)
	ctx := context.Background()
	key := store.Key(ns, "moved")
	testkit.Create(t, c, ns, "moved", "generation 1")
	// The old owner's cache holds the object as it read it, then it pauses.
	oldRead, oldCache := cachedRead(t, c, ns, "moved")

	// Meanwhile the slot moves: the object changes, and the new owner
	// reconciles it from its own read.
	cur := oldRead.DeepCopy()
	cur.Spec.Message = "generation 2"
	if _, err := c.Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	_, newCache := cachedRead(t, c, ns, "moved")
	newOwner := &myresource.Reconciler{Store: newCache, Client: c}
	if err := newOwner.Reconcile(ctx, key); err != nil {
		t.Fatalf("the new owner's reconcile: %v", err)
	}

	// The old owner resumes: its worker runs the reconcile it had begun.
	events := record.NewFakeRecorder(10)
	oldOwner := &myresource.Reconciler{Store: oldCache, Client: c, Recorder: events, Events: myresource.EventsAll}
	var mu sync.Mutex
	var finished []reconcile.Finished
	q := queue.New(nil)
	worker := &reconcile.Controller[object]{Queue: q, Reconciler: oldOwner, ConflictRetry: time.Hour,
		Observer: observe.Func(func(e observe.Event) {
			if f, ok := e.(reconcile.Finished); ok {
				mu.Lock()
				finished = append(finished, f)
				mu.Unlock()
			}
		})}
	logs := &testkit.Logs{}
	wctx, stop := context.WithCancel(klog.NewContext(context.Background(), logs.Logger(2)))
	done := make(chan struct{})
	go func() { worker.Run(wctx, nil, 1); close(done) }()
	q.Add(key)
	testkit.Eventually(t, 30*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(finished) > 0 },
		"the old owner's reconcile did not finish")
	stop()
	<-done

	f := finished[0]
	if !apierrors.IsConflict(f.Err) {
		t.Fatalf("the old owner's status write, from the object it read before the new owner wrote: %v, want a 409 Conflict", f.Err)
	}
	if f.RetryIn != time.Hour || q.Retries(key) != 0 {
		t.Errorf("the conflict was retried in %s with %d retries counted: want the conflict retry (1h), no backoff step", f.RetryIn, q.Retries(key))
	}
	if n := logs.Count("Reconcile failed"); n != 0 {
		t.Errorf("the conflict was logged as a failure %d times", n)
	}
	if len(events.Events) != 0 {
		t.Errorf("the old owner recorded an Event for a write that failed: %s", <-events.Events)
	}
	got, err := c.Get(ctx, ns, "moved")
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.ObservedGeneration != 2 || got.Status.Message != "generation 2" || got.Status.Phase != v1alpha1.PhaseProcessed {
		t.Errorf("the status after the old owner's write: %+v; want the new owner's, of generation 2", got.Status)
	}
}

// cachedRead reads ns/name, as a replica's cache would hold it: the object
// and a store holding it.
func cachedRead(t *testing.T, c *client.Client, ns, name string) (object, *store.Store[object]) {
	t.Helper()
	o, err := c.Get(context.Background(), ns, name)
	if err != nil {
		t.Fatal(err)
	}
	cache := store.New[object]()
	cache.Upsert(o)
	return o, cache
}
