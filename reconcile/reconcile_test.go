package reconcile

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"

	"rawwatch/api/v1alpha1"
	"rawwatch/internal/testkit"
	"rawwatch/observe"
	"rawwatch/queue"
	"rawwatch/store"
)

type object = *v1alpha1.MyResource

var myResource = testkit.MyResource

// fakeReconciler returns errors from a script, one per Reconcile, and
// records the deletions it was told of (a deletion in DelErrs fails once).
type fakeReconciler = testkit.Reconciler

// runUntilCalls runs c with workers until fake has seen want reconciles (at
// most 5 s), stops it, and returns how many it saw.
func runUntilCalls(c *Controller[object], workers int, fake *fakeReconciler, want int) int {
	return runUntilCallsLogging(c, workers, fake, want, klog.Background())
}

func runUntilCallsLogging(c *Controller[object], workers int, fake *fakeReconciler, want int, logger klog.Logger) int {
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	done := make(chan struct{})
	go func() { c.Run(ctx, nil, workers); close(done) }()
	defer func() { cancel(); <-done }()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		fake.Mu.Lock()
		n := len(fake.Calls)
		fake.Mu.Unlock()
		if n >= want {
			return n
		}
	}
	fake.Mu.Lock()
	defer fake.Mu.Unlock()
	return len(fake.Calls)
}

func TestControllerErrorPolicy(t *testing.T) {
	conflict := apierrors.NewConflict(schema.GroupResource{Resource: "myresources"}, "a", errors.New("stale"))
	fake := &fakeReconciler{Errs: []error{conflict, conflict, errors.New("boom"), nil}}
	logs := &testkit.Logs{}
	q := queue.New(queue.NewExponentialLimiter(time.Millisecond, 10*time.Millisecond))
	c := &Controller[object]{Queue: q, Reconciler: fake, ConflictRetry: time.Millisecond}
	last := myResource("a", "x", 1)
	c.OnDelta(store.Delta[object]{Type: store.Deleted, Key: "ns/a", Object: last})

	if n := runUntilCallsLogging(c, 2, fake, 4, logs.Logger(0)); n != 4 {
		t.Fatalf("%d reconciles, want 4 (two conflicts, one error, one success)", n)
	}

	if errs := logs.Grep("Reconcile failed"); len(errs) != 1 {
		t.Errorf("error lines = %v: conflicts must be retried quietly, other errors logged", errs)
	}
	if q.Retries("ns/a") != 0 {
		t.Error("success must forget the retry history")
	}
	// The deletion was handled once, before the first reconcile; the
	// retries of the key do not hand it over again.
	if len(fake.Handled) != 1 || fake.Handled[0].Object != last {
		t.Errorf("deletions handed over: %+v, want the tombstone once", fake.Handled)
	}
}

// Every deletion of a key reaches the reconciler once, in order, with its
// UID, before the key's one reconcile:
//   - reborn: a key deleted, re-created and deleted again before a worker
//     gets to it (the queue was busy) is two objects gone: the reconciler
//     must hear of both, not only of the last. (Found by the chaos run: the
//     second deletion's tombstone replaced the first's.)
//   - retried: a deletion whose handling fails is handed over again, with
//     those after it, and the key is not reconciled until it succeeds.
func TestControllerHandsOverEveryDeletionOfAKey(t *testing.T) {
	for name, tc := range map[string]struct {
		reborn  bool // the second object is Added between the deletions
		delErrs []error
	}{
		"reborn":  {reborn: true},
		"retried": {delErrs: []error{nil, errors.New("boom")}},
	} {
		t.Run(name, func(t *testing.T) {
			fake := &fakeReconciler{DelErrs: tc.delErrs}
			c := &Controller[object]{Queue: queue.New(queue.NewExponentialLimiter(time.Millisecond, time.Millisecond)), Reconciler: fake}
			first, second := myResource("a", "x", 1), myResource("a", "x", 1)
			first.UID, second.UID = "uid-first", "uid-second"
			c.OnDelta(store.Delta[object]{Type: store.Deleted, Key: "ns/a", Object: first})
			if tc.reborn {
				c.OnDelta(store.Delta[object]{Type: store.Added, Key: "ns/a", Object: second})
			}
			c.OnDelta(store.Delta[object]{Type: store.Deleted, Key: "ns/a", Object: second})
			if n := runUntilCalls(c, 1, fake, 1); n != 1 {
				t.Fatalf("%d reconciles, want 1 (one key)", n)
			}
			if uids := fake.HandledUIDs(); strings.Join(uids, ",") != "uid-first,uid-second" {
				t.Fatalf("the reconciler was told of deletions %v, want uid-first then uid-second", uids)
			}
		})
	}
}

// A key deleted and re-created, whose new object fails: the old object's
// deletion is handled once, not again with every retry of the new object.
func TestControllerHandlesADeletionOnceWhileTheNewObjectRetries(t *testing.T) {
	boom := errors.New("boom")
	fake := &fakeReconciler{Errs: slices.Repeat([]error{boom}, 100)}
	var mu sync.Mutex
	finished := 0
	c := &Controller[object]{Queue: queue.New(queue.NewExponentialLimiter(time.Millisecond, 5*time.Millisecond)), Reconciler: fake,
		Observer: observe.Func(func(e observe.Event) {
			if _, ok := e.(Finished); ok {
				mu.Lock()
				finished++
				mu.Unlock()
			}
		})}
	old, reborn := myResource("a", "hello", 1), myResource("a", "hello", 1)
	old.UID = "uid-old"
	c.OnDelta(store.Delta[object]{Type: store.Deleted, Key: "ns/a", Object: old})
	c.OnDelta(store.Delta[object]{Type: store.Added, Key: "ns/a", Object: reborn})

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx, nil, 1); close(done) }()
	testkit.Eventually(t, 30*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return finished >= 5 }, "fewer than 5 reconciles")
	cancel()
	<-done
	if got := fake.HandledUIDs(); len(got) != 1 {
		t.Fatalf("the deletion of uid-old was handled %d times (%v) in %d reconciles of the failing new object, want once", len(got), got, finished)
	}
}

// blockingDeleter holds every deletion until released.
type blockingDeleter = testkit.BlockingDeleter

// Deletions holds a deletion from the moment it is queued until Deleted
// returned nil for it, including while a worker handles it: a sharded
// replica samples it to know that a slot it hands over has no deletion
// left (one seen missing between the queue and the worker would be lost).
func TestDeletionsHoldsADeletionUntilItIsHandled(t *testing.T) {
	b := testkit.NewBlockingDeleter()
	c := &Controller[object]{Queue: queue.New(nil), Reconciler: b}
	pending := func() (uids []string) {
		c.Deletions(func(d store.Delta[object], _ bool) { uids = append(uids, string(d.Object.UID)) })
		slices.Sort(uids)
		return uids
	}
	first, second := myResource("a", "x", 1), myResource("a", "x", 1)
	first.UID, second.UID = "uid-first", "uid-second"
	c.OnDelta(store.Delta[object]{Type: store.Deleted, Key: "ns/a", Object: first})
	c.OnDelta(store.Delta[object]{Type: store.Deleted, Key: "ns/a", Object: second})
	if got := pending(); !slices.Equal(got, []string{"uid-first", "uid-second"}) {
		t.Fatalf("queued: Deletions gives %v", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx, nil, 1); close(done) }()
	defer func() { cancel(); <-done }()
	<-b.Entered // the first is being handled
	if got := pending(); !slices.Equal(got, []string{"uid-first", "uid-second"}) {
		t.Fatalf("while a worker handles the first: Deletions gives %v", got)
	}
	b.Release <- struct{}{}
	<-b.Entered
	if got := pending(); !slices.Equal(got, []string{"uid-second"}) {
		t.Fatalf("while a worker handles the second: Deletions gives %v", got)
	}
	b.Release <- struct{}{}
	testkit.Eventually(t, 30*time.Second, func() bool { return len(pending()) == 0 }, "a deletion stayed after it was handled")
}

// Deletions tells a deletion waiting for its retry (its Deleted failed) from
// one only queued: a sharded replica lets a deletion that keeps failing hold
// a slot it hands over only so long, and one queued behind a backlog for as
// long as it takes.
func TestDeletionsTellsAFailedDeletion(t *testing.T) {
	fake := &fakeReconciler{DelErrs: []error{errors.New("boom")}}
	c := &Controller[object]{Queue: queue.New(queue.NewExponentialLimiter(time.Hour, time.Hour)), Reconciler: fake}
	bad := myResource("a", "x", 1)
	bad.UID = "uid-bad"
	c.OnDelta(store.Delta[object]{Type: store.Deleted, Key: "ns/a", Object: bad})
	if q, f := testkit.DeletionCounts(c.Deletions); q != 1 || f != 0 {
		t.Fatalf("queued: %d queued, %d failing; want 1, 0", q, f)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx, nil, 1); close(done) }()
	defer func() { cancel(); <-done }()
	testkit.Eventually(t, 30*time.Second, func() bool { q, f := testkit.DeletionCounts(c.Deletions); return q == 0 && f == 1 },
		"after its Deleted failed, the deletion is not reported failing")
}

// A failed deletion's mark goes with it: once a retry handles it, a later
// deletion of the same key is reported queued, not failing (a stale mark
// would let a slot go without a deletion that never failed).
func TestAFailedMarkEndsWhenTheDeletionIsHandled(t *testing.T) {
	fake := &fakeReconciler{DelErrs: []error{errors.New("boom")}}
	c := &Controller[object]{Queue: queue.New(queue.NewExponentialLimiter(10*time.Millisecond, 10*time.Millisecond)), Reconciler: fake}
	first := myResource("a", "x", 1)
	first.UID = "uid-1"
	c.OnDelta(store.Delta[object]{Type: store.Deleted, Key: "ns/a", Object: first})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx, nil, 1); close(done) }()
	testkit.Eventually(t, 30*time.Second, func() bool { q, f := testkit.DeletionCounts(c.Deletions); return q == 0 && f == 0 },
		"the deletion that failed once was not handled by its retry")
	cancel()
	<-done

	second := myResource("a", "x", 2)
	second.UID = "uid-2"
	c.OnDelta(store.Delta[object]{Type: store.Deleted, Key: "ns/a", Object: second})
	if q, f := testkit.DeletionCounts(c.Deletions); q != 1 || f != 0 {
		t.Fatalf("a new deletion of the key: %d queued, %d failing; want 1, 0", q, f)
	}
}
