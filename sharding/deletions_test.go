package sharding_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"rawwatch/internal/testkit"
	"rawwatch/queue"
)

// A deletion goes before a backlog of changes: in the sharded chaos run a
// replica that took its slots back after the API server's restart queued a
// resync and a relist's changes, then the deletions its relist found; its
// four workers had not reached them 40 s later, when a fence took the
// slots, and the deletions were dropped with them (no replica heard of
// them again). A change reached late is still read from the store.
func TestDeletionsGoBeforeABacklogOfChanges(t *testing.T) {
	fake := &fakeReconciler{}
	c := newController(fake, nil)
	for i := range 200 {
		c.OnDelta(changed(fmt.Sprint("changed-", i)))
	}
	c.OnDelta(deleted("gone"))
	// A change of a key already waiting, then its deletion: the key moves
	// to the front.
	c.OnDelta(deleted("changed-150"))
	stop := run(c, 1)
	testkit.Eventually(t, 5*time.Second, func() bool { return len(fake.Reconciled()) >= 2 }, "fewer than 2 reconciles")
	stop()
	if got := strings.Join(fake.Reconciled()[:2], ","); got != "ns/gone,ns/changed-150" {
		t.Errorf("the first keys a worker got: %s; want the deleted ones, ns/gone then ns/changed-150, before the 200 changes queued first", got)
	}
}

// holdingReconciler is a fakeReconciler whose reconciles of the keys other
// than ns/gone wait for hold to close.
type holdingReconciler struct {
	fakeReconciler
	hold chan struct{}
}

func (h *holdingReconciler) Reconcile(ctx context.Context, key string) error {
	if key != "ns/gone" {
		<-h.hold
	}
	return h.fakeReconciler.Reconcile(ctx, key)
}

// A deletion whose Deleted failed is retried (after its backoff, or the
// conflict's retry) before the backlog it jumped: once its retry is due,
// the queue hands out its key first, not behind every change queued.
func TestARetriedDeletionGoesBeforeTheBacklog(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"error", errors.New("boom")},
		{"conflict", apierrors.NewConflict(schema.GroupResource{Resource: "myresources"}, "gone", errors.New("stale"))},
	} {
		fake := &holdingReconciler{fakeReconciler: fakeReconciler{DelErrs: []error{tc.err}}, hold: make(chan struct{})}
		c := newController(fake, queue.NewExponentialLimiter(time.Millisecond, time.Millisecond))
		c.ConflictRetry = time.Millisecond
		for i := range 5 {
			c.OnDelta(changed(fmt.Sprint("changed-", i)))
		}
		c.OnDelta(deleted("gone"))
		if s := c.Queue.Snapshot(1); s.Ready[0] != "ns/gone" {
			t.Fatalf("%s: the deletion is not first to begin with: %v", tc.name, s.Ready)
		}
		stop := run(c, 1) // its Deleted fails: retried; the worker then holds changed-0
		testkit.Eventually(t, 10*time.Second, func() bool { return c.Queue.Pending() == 0 && c.Queue.Len() == 5 }, "the retry did not come back")
		if s := c.Queue.Snapshot(1); s.Ready[0] != "ns/gone" {
			t.Errorf("%s: the deletion's key is retried behind the backlog: the queue hands out %s first (%d keys waiting); want ns/gone", tc.name, s.Ready[0], s.ReadyLen)
		}
		close(fake.hold)
		stop()
	}
}
