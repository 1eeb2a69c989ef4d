package reconcile

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"

	"rawwatch/internal/testkit"
	"rawwatch/queue"
	"rawwatch/store"
)

// From the review of f1bec73 (a deletion's key goes to the front of the
// queue): a deletion whose Deleted failed was retried by AddRateLimited
// (any error) or AddAfter (a 409 Conflict), both ending in Queue.Add, so
// once its backoff was over the key waited behind every change queued —
// the backlog the change was made to jump; after a fence the gate drops a
// deletion its worker reaches once the slot is no longer watched. It
// printed "error: the deletion's key is retried behind the backlog: the
// queue hands out ns/changed-0 first (6 keys waiting); want ns/gone" (and
// the same for a conflict). Now both retries add first.
func TestARetriedDeletionGoesBeforeTheBacklog(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"error", errors.New("boom")},
		{"conflict", apierrors.NewConflict(schema.GroupResource{Resource: "myresources"}, "gone", errors.New("stale"))},
	} {
		fake := &fakeReconciler{delErrs: []error{tc.err}}
		q := queue.New(queue.NewExponentialLimiter(time.Millisecond, time.Millisecond))
		c := &Controller[object]{Queue: q, Reconciler: fake, ConflictRetry: time.Millisecond, abort: context.Background()}
		for i := range 5 {
			c.OnDelta(store.Delta[object]{Type: store.Added, Key: fmt.Sprintf("ns/changed-%d", i), Object: myResource(fmt.Sprint("changed-", i), "x", 1)})
		}
		gone := myResource("gone", "x", 1)
		gone.UID = "uid-gone"
		c.OnDelta(store.Delta[object]{Type: store.Deleted, Key: "ns/gone", Object: gone})
		if s := q.Snapshot(1); s.Ready[0] != "ns/gone" {
			t.Fatalf("%s: the deletion is not first to begin with: %v", tc.name, s.Ready)
		}
		c.processNext(context.Background(), klog.Background(), 0) // its Deleted fails: retried
		testkit.Eventually(t, 10*time.Second, func() bool { return q.Pending() == 0 && q.Len() == 6 }, "the retry did not come back")
		if s := q.Snapshot(1); s.Ready[0] != "ns/gone" {
			t.Errorf("%s: the deletion's key is retried behind the backlog: the queue hands out %s first (%d keys waiting); want ns/gone", tc.name, s.Ready[0], s.ReadyLen)
		}
		q.ShutDown()
	}
}
