package app_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"rawwatch/app"
	"rawwatch/internal/testkit"
	"rawwatch/reconcile"
	"rawwatch/shard"
	"rawwatch/store"
)

// holdingDeleter holds every deletion until released (or its context
// ends), fails those of the UIDs in fail (under mu), and records the UIDs
// it handled.
type holdingDeleter struct {
	reconcile.Reconciler[object]
	release chan struct{}
	fail    map[types.UID]bool

	mu      sync.Mutex
	entered int
	handled []types.UID
}

func (h *holdingDeleter) Deleted(ctx context.Context, d store.Delta[object]) error {
	h.mu.Lock()
	h.entered++
	h.mu.Unlock()
	select {
	case <-h.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	h.mu.Lock()
	fail := h.fail[d.Object.UID]
	h.mu.Unlock()
	if fail {
		return fmt.Errorf("failing the deletion of %s on purpose", d.Key)
	}
	if err := h.Reconciler.Deleted(ctx, d); err != nil {
		return err
	}
	h.mu.Lock()
	h.handled = append(h.handled, d.Object.UID)
	h.mu.Unlock()
	return nil
}

func (h *holdingDeleter) state() (entered int, handled []types.UID) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.entered, slices.Clone(h.handled)
}

// leaving is one sharded replica, alone in its ring (it works every slot),
// whose deletions h holds.
type leaving struct {
	a       *app.App
	h       *holdingDeleter
	logs    *testkit.Logs
	stop    context.CancelFunc
	stopped chan struct{}
}

func startLeaving(t *testing.T, ns string, drain time.Duration, fail map[types.UID]bool) *leaving {
	t.Helper()
	l := &leaving{h: &holdingDeleter{release: make(chan struct{}), fail: fail}, logs: &testkit.Logs{}, stopped: make(chan struct{})}
	var err error
	l.a, err = app.New(app.Options{Config: testkit.Shared.Get(t).Config(), Namespace: ns, Workers: 2,
		WrapReconciler: func(r reconcile.Reconciler[object]) reconcile.Reconciler[object] {
			l.h.Reconciler = r
			return l.h
		},
		Sharding: &app.Sharding{Namespace: ns, Identity: "leaver", LeaseDuration: shardLease, RenewPeriod: shardRenew, DrainTimeout: drain}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), l.logs.Logger(2)))
	l.stop = cancel
	go func() {
		if err := l.a.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
		close(l.stopped)
	}()
	testkit.StopAtEnd(t, cancel, l.stopped, 2*time.Minute, "the replica did not stop")
	return l
}

// deletions is how many deletions the replica has heard of and not handled.
func (l *leaving) deletions() int {
	n := 0
	l.a.Controller.Deletions(func(store.Delta[object], bool) { n++ })
	return n
}

// leaseGone tells whether the replica's Lease was deleted.
func leaseGone(t *testing.T, ns string) bool {
	t.Helper()
	kube := kubernetes.NewForConfigOrDie(testkit.Shared.Get(t).Config())
	_, err := kube.CoordinationV1().Leases(ns).Get(context.Background(), "rawwatch.leaver", metav1.GetOptions{})
	return apierrors.IsNotFound(err)
}

// deleteObjects deletes the objects named and returns their UIDs.
func deleteObjects(t *testing.T, l *leaving, ns string, names ...string) []types.UID {
	t.Helper()
	c := testkit.Client(t, testkit.Shared.Get(t).Config())
	var uids []types.UID
	for _, name := range names {
		obj, ok := l.a.Store.Get(ns + "/" + name)
		if !ok {
			t.Fatalf("%s/%s is not in the replica's store", ns, name)
		}
		uids = append(uids, obj.UID)
		if err := c.Delete(context.Background(), ns, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return uids
}

// A replica that leaves its ring cleanly (SIGTERM: a rolling update, a
// scale-down) handles the deletions it heard of before it deletes its
// Lease: those queued when its context ended, and one made while it drains
// them. Its slots' next owner lists them after those deletions and never
// hears of them.
func TestACleanLeaveHandlesTheDeletionsItHeardOf(t *testing.T) {
	_, ns, c := testkit.Parallel(t)
	testkit.Objects(t, c, ns, "obj", 20)
	l := startLeaving(t, ns, 0, nil) // the default drain timeout, 30 s
	testkit.Eventually(t, time.Minute, func() bool {
		return l.a.Member.Claims().Working.Len() == shard.Slots && l.a.Store.Len() == 20
	}, "the replica did not come to work every slot with 20 objects")

	// Five deletions: the two workers hold one or two, the rest wait in the
	// queue.
	deleted := deleteObjects(t, l, ns, "obj-0", "obj-1", "obj-2", "obj-3", "obj-4")
	testkit.Eventually(t, 30*time.Second, func() bool {
		entered, _ := l.h.state()
		return entered >= 1 && l.deletions() == 5
	}, "the five deletions did not reach the replica")
	l.stop() // SIGTERM
	// A sixth while the replica drains: its watcher must still bring it.
	deleted = append(deleted, deleteObjects(t, l, ns, "obj-5")...)
	for deadline := time.Now().Add(20 * time.Second); l.deletions() < 6; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("the deletion made while the replica left never reached it (%d deletions not handled)", l.deletions())
			break
		}
	}
	close(l.h.release)
	select {
	case <-l.stopped:
	case <-time.After(time.Minute):
		t.Fatal("the replica did not leave")
	}
	_, handled := l.h.state()
	for i, uid := range deleted {
		if !slices.Contains(handled, uid) {
			t.Errorf("the deletion of obj-%d (uid %s) was never handled: handled %d of %d", i, uid, len(handled), len(deleted))
		}
	}
	if !leaseGone(t, ns) {
		t.Error("the replica left without deleting its Lease")
	}
}

// A deletion whose handling keeps failing holds a clean leave up for
// DrainTimeout, not for ever: then the replica leaves (its Lease deleted)
// and says what it did not handle.
func TestACleanLeaveGivesUpOnAFailingDeletionAfterDrainTimeout(t *testing.T) {
	_, ns, c := testkit.Parallel(t)
	testkit.Objects(t, c, ns, "obj", 5)
	const drain = 2 * time.Second
	l := startLeaving(t, ns, drain, map[types.UID]bool{})
	close(l.h.release) // nothing held: one deletion fails, the others pass
	testkit.Eventually(t, time.Minute, func() bool {
		return l.a.Member.Claims().Working.Len() == shard.Slots && l.a.Store.Len() == 5
	}, "the replica did not come to work every slot with 5 objects")
	bad, _ := l.a.Store.Get(ns + "/obj-0")
	l.h.mu.Lock()
	l.h.fail[bad.UID] = true
	l.h.mu.Unlock()
	deleteObjects(t, l, ns, "obj-0")
	testkit.Eventually(t, 30*time.Second, func() bool {
		failing := false
		l.a.Controller.Deletions(func(_ store.Delta[object], f bool) { failing = failing || f })
		return failing
	}, "the deletion did not fail")
	start := time.Now()
	l.stop()
	select {
	case <-l.stopped:
	case <-time.After(time.Minute): // the bound is 2 s; a minute is load
		t.Fatalf("the replica did not leave within a minute of its context's end (drain timeout %s)", drain)
	}
	took := time.Since(start)
	if took < drain {
		t.Errorf("the replica left %s after its context ended, before its drain timeout %s, with a deletion still failing", took, drain)
	}
	if n := l.logs.Count("Leaving the ring with deletions not handled"); n != 1 {
		t.Errorf("%d log lines say deletions were left unhandled, want 1", n)
	}
	if !leaseGone(t, ns) {
		t.Error("the replica left without deleting its Lease")
	}
}
