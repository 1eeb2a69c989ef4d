package sharding_test

import (
	"context"
	"errors"
	"slices"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"rawwatch/api/v1alpha1"
	"rawwatch/queue"
	"rawwatch/reconcile"
	"rawwatch/sharding"
	"rawwatch/store"
)

// myResource is an object of namespace ns, its UID "uid-" + name.
func myResource(name string) object {
	return &v1alpha1.MyResource{
		TypeMeta:   metav1.TypeMeta{APIVersion: "example.com/v1alpha1", Kind: "MyResource"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), ResourceVersion: "1"},
	}
}

func deleted(name string) store.Delta[object] {
	return store.Delta[object]{Type: store.Deleted, Key: "ns/" + name, Object: myResource(name)}
}

func changed(name string) store.Delta[object] {
	return store.Delta[object]{Type: store.Updated, Key: "ns/" + name, Object: myResource(name)}
}

// fakeReconciler records the keys reconciled and the deletions handled;
// delErrs are what its next Deleted calls return, one each.
type fakeReconciler struct {
	mu      sync.Mutex
	calls   []string
	deleted []store.Delta[object]
	delErrs []error
}

func (f *fakeReconciler) Deleted(_ context.Context, d store.Delta[object]) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.delErrs) > 0 {
		err := f.delErrs[0]
		f.delErrs = f.delErrs[1:]
		if err != nil {
			return err
		}
	}
	f.deleted = append(f.deleted, d)
	return nil
}

func (f *fakeReconciler) Reconcile(_ context.Context, key string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, key)
	return nil
}

// reconciled is the keys reconciled so far.
func (f *fakeReconciler) reconciled() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// deletedUIDs is the UIDs of the deletions f handled, sorted.
func (f *fakeReconciler) deletedUIDs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var uids []string
	for _, d := range f.deleted {
		uids = append(uids, string(d.Object.UID))
	}
	slices.Sort(uids)
	return uids
}

// blockingDeleter holds every deletion until released.
type blockingDeleter struct {
	fakeReconciler
	entered chan struct{}
	release chan struct{}
}

func (b *blockingDeleter) Deleted(ctx context.Context, d store.Delta[object]) error {
	b.entered <- struct{}{}
	<-b.release
	return b.fakeReconciler.Deleted(ctx, d)
}

// failingDeleter fails every deletion of one UID, and counts the tries.
type failingDeleter struct {
	fakeReconciler
	bad   types.UID
	tries int
}

func (f *failingDeleter) Deleted(ctx context.Context, d store.Delta[object]) error {
	if d.Object.UID == f.bad {
		f.mu.Lock()
		defer f.mu.Unlock()
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

// deletionCounts counts what c.Deletions reports: deletions only queued, and
// deletions waiting for a retry after their Deleted failed.
func deletionCounts(c *reconcile.Controller[object]) (queued, failing int) {
	c.Deletions(func(_ store.Delta[object], f bool) {
		if f {
			failing++
		} else {
			queued++
		}
	})
	return
}

// run runs c's workers until the test's function returns.
func run(c *reconcile.Controller[object], workers int) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx, nil, workers); close(done) }()
	return func() { cancel(); <-done }
}
