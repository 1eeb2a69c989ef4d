package reconcile

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"rawwatch/internal/testkit"
	"rawwatch/queue"
	"rawwatch/store"
)

// blockingReconciler hands the context of each Reconcile to ctxs and
// returns when release is closed or that context ends.
type blockingReconciler struct {
	ctxs    chan context.Context
	release chan struct{}
}

func (blockingReconciler) Deleted(context.Context, store.Delta[object]) error { return nil }

func (b blockingReconciler) Reconcile(ctx context.Context, key string) error {
	klog.FromContext(ctx).Info("Blocking")
	b.ctxs <- ctx
	select {
	case <-b.release:
	case <-ctx.Done():
	}
	return nil
}

// began returns the context of the first Reconcile, once it has begun.
func (b blockingReconciler) began(t *testing.T) context.Context {
	t.Helper()
	select {
	case ctx := <-b.ctxs:
		return ctx
	case <-time.After(30 * time.Second):
		t.Fatal("no reconcile began")
		return nil
	}
}

// A reconcile in flight when Run's ctx ends runs on (its context is not
// cancelled; Run waits for it), and one in flight when abort ends is
// cancelled at once; each carries the logger with its key.
func TestRunEndsAReconcileOnlyWhenAborted(t *testing.T) {
	for _, aborted := range []bool{false, true} {
		rec := blockingReconciler{ctxs: make(chan context.Context, 1), release: make(chan struct{})}
		c := &Controller[object]{Queue: queue.New(nil), Reconciler: rec}
		logs := &testkit.Logs{}
		ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logs.Logger(0)))
		abort, abortNow := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { c.Run(ctx, abort, 2); close(done) }()
		c.Queue.Add("ns/a")
		rctx := rec.began(t)
		if lines := logs.Grep("Blocking"); len(lines) != 1 || !strings.Contains(lines[0], `"key"="ns/a"`) {
			t.Errorf("the reconcile's log lines %q, want one with the key ns/a", lines)
		}
		cancel()
		if err := rctx.Err(); err != nil {
			t.Fatalf("Run's ctx ended: the reconcile in flight was cancelled (%v)", err)
		}
		select {
		case <-done:
			t.Fatal("Run returned with a reconcile in flight")
		default:
		}
		if aborted {
			abortNow()
			select {
			case <-rctx.Done():
			case <-time.After(30 * time.Second):
				t.Fatal("abort ended: the reconcile in flight was not cancelled")
			}
		} else {
			close(rec.release)
		}
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("Run did not return after its reconcile ended")
		}
		abortNow()
	}
}

// Every reconcile is bounded: its context ends ReconcileTimeout after it
// began, whatever Run's ctx does.
func TestAReconcileHasReconcileTimeoutAsItsDeadline(t *testing.T) {
	rec := blockingReconciler{ctxs: make(chan context.Context, 1), release: make(chan struct{})}
	c := &Controller[object]{Queue: queue.New(nil), Reconciler: rec}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	before := time.Now()
	go func() { c.Run(ctx, context.Background(), 1); close(done) }()
	c.Queue.Add("ns/a")
	rctx := rec.began(t)
	after := time.Now()
	deadline, ok := rctx.Deadline()
	if !ok || deadline.Before(before.Add(ReconcileTimeout)) || deadline.After(after.Add(ReconcileTimeout)) {
		t.Errorf("the reconcile's deadline %v (set: %v), want ReconcileTimeout after it began, between %v and %v",
			deadline, ok, before.Add(ReconcileTimeout), after.Add(ReconcileTimeout))
	}
	close(rec.release)
	cancel()
	<-done
}
