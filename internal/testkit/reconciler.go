package testkit

import (
	"context"
	"slices"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"rawwatch/api/v1alpha1"
	"rawwatch/store"
)

// MyResource is an object of namespace ns at resourceVersion 1, its UID
// "uid-" + name.
func MyResource(name, message string, generation int64) *v1alpha1.MyResource {
	return &v1alpha1.MyResource{
		TypeMeta:   metav1.TypeMeta{APIVersion: "example.com/v1alpha1", Kind: "MyResource"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), Generation: generation, ResourceVersion: "1"},
		Spec:       v1alpha1.MyResourceSpec{Message: message},
	}
}

// Reconciler is a fake reconcile.Reconciler of MyResources: it records
// the keys reconciled (Calls) and the deletions handled (Handled); Errs and
// DelErrs are what its next Reconcile and Deleted calls return, one each
// (nil, or none left: success). Mu guards every field.
type Reconciler struct {
	Mu            sync.Mutex
	Calls         []string
	Handled       []store.Delta[*v1alpha1.MyResource]
	Errs, DelErrs []error
}

func (f *Reconciler) Deleted(_ context.Context, d store.Delta[*v1alpha1.MyResource]) error {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	if err := next(&f.DelErrs); err != nil {
		return err
	}
	f.Handled = append(f.Handled, d)
	return nil
}

func (f *Reconciler) Reconcile(_ context.Context, key string) error {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	f.Calls = append(f.Calls, key)
	return next(&f.Errs)
}

// next takes the first of errs, nil if none is left.
func next(errs *[]error) error {
	if len(*errs) == 0 {
		return nil
	}
	err := (*errs)[0]
	*errs = (*errs)[1:]
	return err
}

// Reconciled is the keys reconciled so far, in order.
func (f *Reconciler) Reconciled() []string {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	return slices.Clone(f.Calls)
}

// HandledUIDs is the UIDs of the deletions handled so far, in order.
func (f *Reconciler) HandledUIDs() []string {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	var uids []string
	for _, d := range f.Handled {
		uids = append(uids, string(d.Object.UID))
	}
	return uids
}

// BlockingDeleter is a Reconciler whose Deleted holds every deletion:
// Entered gets a value as one begins, and it goes on once Release gives one.
type BlockingDeleter struct {
	Reconciler
	Entered, Release chan struct{}
}

// NewBlockingDeleter returns a BlockingDeleter with unbuffered channels.
func NewBlockingDeleter() *BlockingDeleter {
	return &BlockingDeleter{Entered: make(chan struct{}), Release: make(chan struct{})}
}

func (b *BlockingDeleter) Deleted(ctx context.Context, d store.Delta[*v1alpha1.MyResource]) error {
	b.Entered <- struct{}{}
	<-b.Release
	return b.Reconciler.Deleted(ctx, d)
}

// DeletionCounts counts what deletions (a reconcile.Controller's Deletions)
// reports: deletions only queued, and deletions waiting for a retry after
// their Deleted failed.
func DeletionCounts(deletions func(func(store.Delta[*v1alpha1.MyResource], bool))) (queued, failing int) {
	deletions(func(_ store.Delta[*v1alpha1.MyResource], failed bool) {
		if failed {
			failing++
		} else {
			queued++
		}
	})
	return queued, failing
}
