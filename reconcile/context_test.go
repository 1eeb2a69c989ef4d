package reconcile

import (
	"context"
	"strings"
	"sync"
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
		var rctx context.Context
		select {
		case rctx = <-rec.ctxs:
		case <-time.After(30 * time.Second):
			t.Fatal("no reconcile began")
		}
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

// A reconcile's context behaves as the context.WithTimeout of a context
// carrying the keyed logger it stands for: its deadline ends it, and so
// do work's end and its cancel, through Done and Err alike, whichever is
// asked first; Err is nil while Done is open; values pass through from
// work; klog.FromContext gives the worker's logger with the key.
func TestTheReconcileContextIsAContextWithTimeout(t *testing.T) {
	type ctxKey struct{}
	logs := &testkit.Logs{}
	wait := func(ctx context.Context, what string) { t.Helper(); waitDone(t, ctx, what) }
	newCtx := func(timeout time.Duration) (*reconcileContext, context.CancelFunc) {
		work, end := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "v"))
		return newReconcileContext(work, logs.Logger(0), "ns/k", time.Now().Add(timeout)), end
	}
	for _, ask := range []string{"Done first", "Err first"} {
		// The deadline.
		c, end := newCtx(20 * time.Millisecond)
		defer end()
		if d, ok := c.Deadline(); !ok || time.Until(d) > 20*time.Millisecond {
			t.Errorf("%s: deadline %v, %v", ask, d, ok)
		}
		if ask == "Err first" {
			for c.Err() == nil {
				time.Sleep(time.Millisecond)
			}
		}
		wait(c, ask+", deadline") // at once, for Err first
		if err := c.Err(); err != context.DeadlineExceeded {
			t.Errorf("%s: after the deadline Err %v, want DeadlineExceeded", ask, err)
		}
		c.cancel()
		if err := c.Err(); err != context.DeadlineExceeded {
			t.Errorf("%s: cancel after the deadline changed Err to %v", ask, err)
		}
		end()

		// work's end, then the cancel.
		for _, ender := range []string{"work", "cancel"} {
			c, end := newCtx(time.Hour)
			defer end()
			if ask == "Done first" {
				c.Done()
			}
			if err := c.Err(); err != nil {
				t.Fatalf("%s: Err %v before anything ended", ask, err)
			}
			if ender == "work" {
				end()
			} else {
				c.cancel()
			}
			wait(c, ask+", "+ender)
			if err := c.Err(); err != context.Canceled {
				t.Errorf("%s, %s ended: Err %v, want Canceled", ask, ender, err)
			}
			c.cancel()
			end()
		}
	}
	c, end := newCtx(time.Hour)
	defer end()
	defer c.cancel()
	if v := c.Value(ctxKey{}); v != "v" {
		t.Errorf("work's value: %v, want v", v)
	}
	klog.FromContext(c).Info("From the context")
	if lines := logs.Grep("From the context"); len(lines) != 1 || !strings.Contains(lines[0], `"key"="ns/k"`) {
		t.Errorf("log lines %q, want one with the key ns/k", lines)
	}
}

// waitDone fails unless ctx's Done closes within 30 s.
func waitDone(t *testing.T, ctx context.Context, what string) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: Done not closed (Err %v)", what, ctx.Err())
	}
}

// Done, Err, the logger and the cancel may come from any goroutine (a
// reconcile hands its context to others): under -race, all at once.
func TestTheReconcileContextIsSafeToShare(t *testing.T) {
	logs := &testkit.Logs{}
	for range 50 {
		work, end := context.WithCancel(context.Background())
		defer end()
		c := newReconcileContext(work, logs.Logger(0), "ns/k", time.Now().Add(time.Millisecond))
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Go(func() {
				switch i {
				case 0:
					<-c.Done()
				case 1:
					for c.Err() == nil {
						time.Sleep(100 * time.Microsecond)
					}
				case 2:
					klog.FromContext(c).V(1).Info("x")
				case 3:
					end()
				}
			})
		}
		wg.Wait()
		c.cancel()
		if c.Err() == nil {
			t.Fatal("ended: Err nil")
		}
		waitDone(t, c, "ended")
	}
}
