package sharding_test

import (
	"context"
	"errors"

	"k8s.io/apimachinery/pkg/types"

	"rawwatch/internal/testkit"
	"rawwatch/queue"
	"rawwatch/reconcile"
	"rawwatch/sharding"
	"rawwatch/store"
)

// myResource is an object of namespace ns, its UID "uid-" + name.
func myResource(name string) object { return testkit.MyResource(name, "", 0) }

func deleted(name string) store.Delta[object] {
	return store.Delta[object]{Type: store.Deleted, Key: "ns/" + name, Object: myResource(name)}
}

func changed(name string) store.Delta[object] {
	return store.Delta[object]{Type: store.Updated, Key: "ns/" + name, Object: myResource(name)}
}

// fakeReconciler records the keys reconciled and the deletions handled;
// DelErrs are what its next Deleted calls return, one each.
type fakeReconciler = testkit.Reconciler

// blockingDeleter holds every deletion until released.
type blockingDeleter = testkit.BlockingDeleter

// failingDeleter fails every deletion of one UID, and counts the tries.
type failingDeleter struct {
	fakeReconciler
	bad   types.UID
	tries int
}

func (f *failingDeleter) Deleted(ctx context.Context, d store.Delta[object]) error {
	if d.Object.UID == f.bad {
		f.Mu.Lock()
		defer f.Mu.Unlock()
		f.tries++
		return errors.New("boom")
	}
	return f.fakeReconciler.Deleted(ctx, d)
}

// newController is a controller of rec whose queue hands out the keys
// with a deletion first, as a sharded replica's does (nil limiter: the
// default).
func newController(rec reconcile.Reconciler[object], limiter queue.RateLimiter) *reconcile.Controller[object] {
	c := &reconcile.Controller[object]{Reconciler: rec}
	c.Queue = queue.NewOrdered(limiter, sharding.NewDeletionsFirst(c.HasDeletions))
	return c
}

// run runs c's workers until the test's function returns.
func run(c *reconcile.Controller[object], workers int) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx, nil, workers); close(done) }()
	return func() { cancel(); <-done }
}
