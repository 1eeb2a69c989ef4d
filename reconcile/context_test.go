package reconcile

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
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

// The reconcile context against the context it stands for,
// context.WithTimeout(klog.NewContext(work, keyed logger), timeout), in
// the ways code handed it can tell them apart: Err, context.Cause, and
// the Err and Cause of a context derived from it, for each way it can end
// (its deadline, passed already or later; its cancel; work's end, with a
// cause or without; work's own earlier deadline), work being a
// context.WithCancel as processNext's and DrainDeletions' are.
func TestTheReconcileContextEndsAsContextWithTimeoutDoes(t *testing.T) {
	errWhy := errors.New("work ended, with a cause")
	type scenario struct {
		name     string
		timeout  time.Duration                                     // from creation
		work     func() (context.Context, context.CancelCauseFunc) // fresh each time
		end      func(ctx context.Context, cancel func(), endWork context.CancelCauseFunc)
		children bool // derive children before it ends
	}
	plain := func() (context.Context, context.CancelCauseFunc) {
		return context.WithCancelCause(context.Background())
	}
	earlier := func() (context.Context, context.CancelCauseFunc) {
		ctx, end := context.WithCancelCause(context.Background())
		ctx, stop := context.WithTimeout(ctx, 20*time.Millisecond)
		return ctx, func(cause error) { end(cause); stop() }
	}
	nothing := func(context.Context, func(), context.CancelCauseFunc) {}
	afterDeadline := func(cause error) func(context.Context, func(), context.CancelCauseFunc) {
		return func(ctx context.Context, _ func(), end context.CancelCauseFunc) {
			waitDone(t, ctx, "the deadline")
			end(cause)
		}
	}
	var scenarios []scenario
	for _, children := range []bool{false, true} {
		scenarios = append(scenarios,
			scenario{"deadline passed at creation", -time.Second, plain, nothing, children},
			scenario{"deadline passes", 20 * time.Millisecond, plain, nothing, children},
			scenario{"cancel", time.Hour, plain, func(_ context.Context, cancel func(), _ context.CancelCauseFunc) { cancel() }, children},
			scenario{"work ends", time.Hour, plain, func(_ context.Context, _ func(), end context.CancelCauseFunc) { end(nil) }, children},
			scenario{"work ends with a cause", time.Hour, plain, func(_ context.Context, _ func(), end context.CancelCauseFunc) { end(errWhy) }, children},
			scenario{"work's earlier deadline", time.Hour, earlier, nothing, children},
			// processNext's work is a context.WithCancel, ended by abort.
			scenario{"deadline passes, then work ends", 20 * time.Millisecond, plain, afterDeadline(nil), children},
			scenario{"deadline passes, then work ends with a cause", 20 * time.Millisecond, plain, afterDeadline(errWhy), children},
			scenario{"cancel, then work ends with a cause", time.Hour, plain, func(_ context.Context, cancel func(), end context.CancelCauseFunc) {
				cancel()
				end(errWhy)
			}, children},
		)
	}
	type seen struct{ err, cause, childErr, childCause, valueChildErr error }
	observe := func(s scenario, ours bool) seen {
		work, endWork := s.work()
		defer endWork(nil)
		logs := &testkit.Logs{}
		var ctx context.Context
		var cancel func()
		if ours {
			c := newReconcileContext(work, logs.Logger(0), "ns/k", time.Now().Add(s.timeout))
			ctx, cancel = c, c.cancel
		} else {
			ctx, cancel = context.WithTimeout(klog.NewContext(work, klog.LoggerWithValues(logs.Logger(0), "key", "ns/k")), s.timeout)
		}
		defer cancel()
		var child, valueChild context.Context
		if s.children {
			var endChild context.CancelFunc
			child, endChild = context.WithCancel(ctx)
			defer endChild()
			valueChild = context.WithValue(ctx, struct{}{}, 1)
		}
		s.end(ctx, cancel, endWork)
		waitDone(t, ctx, s.name)
		if !s.children {
			var endChild context.CancelFunc
			child, endChild = context.WithCancel(ctx)
			defer endChild()
			valueChild = context.WithValue(ctx, struct{}{}, 1)
		}
		waitDone(t, child, s.name+": the child")
		return seen{ctx.Err(), context.Cause(ctx), child.Err(), context.Cause(child), valueChild.Err()}
	}
	for _, s := range scenarios {
		name := s.name
		if s.children {
			name += " (children made before)"
		}
		want, got := observe(s, false), observe(s, true)
		if got != want {
			t.Errorf("%s: the reconcile context gives %s\n\twhere context.WithTimeout gives %s", name, show(got), show(want))
		}
		if got.err != nil && got.cause == nil {
			t.Errorf("%s: Err %v but Cause nil", name, got.err)
		}
	}
}

func show(s struct{ err, cause, childErr, childCause, valueChildErr error }) string {
	return fmt.Sprintf("Err %v, Cause %v; a child's Err %v, Cause %v; a WithValue child's Err %v",
		s.err, s.cause, s.childErr, s.childCause, s.valueChildErr)
}

// errors.Is with DeadlineExceeded, as client-go and reconcilers test it.
func TestTheReconcileContextsDeadlineIsDeadlineExceeded(t *testing.T) {
	work, end := context.WithCancel(context.Background())
	defer end()
	c := newReconcileContext(work, klog.Background(), "ns/k", time.Now().Add(10*time.Millisecond))
	defer c.cancel()
	waitDone(t, c, "deadline")
	if !errors.Is(c.Err(), context.DeadlineExceeded) || !errors.Is(context.Cause(c), context.DeadlineExceeded) {
		t.Errorf("after the deadline: Err %v, Cause %v; want both DeadlineExceeded", c.Err(), context.Cause(c))
	}
}

// Many goroutines ask Done and Err, and derive contexts, while the
// deadline, work's end and the cancel race: one Done channel for all,
// closed, Err non-nil and constant once it was.
func TestTheReconcileContextUnderConcurrentDoneErrCancel(t *testing.T) {
	for i := range 200 {
		work, end := context.WithCancel(context.Background())
		c := newReconcileContext(work, klog.Background(), "ns/k", time.Now().Add(time.Duration(i%3)*100*time.Microsecond))
		var wg sync.WaitGroup
		chans := make([]<-chan struct{}, 8)
		for g := range 8 {
			wg.Go(func() {
				switch g {
				case 6:
					end()
				case 7:
					c.cancel()
				default:
					var first error
					for range 50 {
						err := c.Err()
						if first != nil && err != first {
							t.Errorf("Err changed from %v to %v", first, err)
							return
						}
						if err != nil {
							first = err
							select {
							case <-c.Done():
							default:
								t.Errorf("Err %v but Done open", err)
							}
						}
					}
					chans[g] = c.Done()
					child, stop := context.WithCancel(c)
					<-child.Done()
					stop()
				}
			})
		}
		wg.Wait()
		for g := range 6 {
			if chans[g] != chans[0] {
				t.Fatalf("round %d: Done gave different channels to goroutines 0 and %d", i, g)
			}
		}
		<-chans[0]
		if c.Err() == nil {
			t.Fatalf("round %d: Done closed, Err nil", i)
		}
		end()
	}
}

// Contexts derived from a reconcile context follow it through a
// goroutine each; none is left once the reconcile is cancelled (nor
// when its deadline passed, or work ended, and then it is cancelled).
func TestTheReconcileContextLeaksNoGoroutine(t *testing.T) {
	base := settledGoroutines(0)
	for _, how := range []string{"cancel", "deadline", "work"} {
		for range 100 {
			work, end := context.WithCancel(context.Background())
			timeout := time.Hour
			if how == "deadline" {
				timeout = time.Millisecond
			}
			c := newReconcileContext(work, klog.Background(), "ns/k", time.Now().Add(timeout))
			_, stop1 := context.WithCancel(c)
			_, stop2 := context.WithTimeout(context.WithValue(c, struct{}{}, 1), time.Hour)
			stopAfter := context.AfterFunc(c, func() {})
			_, stop3 := context.WithCancel(context.WithoutCancel(c)) // follows nothing
			if how == "work" {
				end()
			}
			c.cancel()
			stop1()
			stop2()
			stop3()
			stopAfter()
			end()
		}
		if n := settledGoroutines(base); n > base {
			buf := make([]byte, 1<<16)
			buf = buf[:runtime.Stack(buf, true)]
			t.Errorf("%s: %d goroutines left, %d before:\n%s", how, n, base, buf)
		}
	}
}

// settledGoroutines waits (up to 30 s) for the count to come down to
// want, and returns it.
func settledGoroutines(want int) int {
	n := runtime.NumGoroutine()
	for deadline := time.Now().Add(30 * time.Second); (want == 0 || n > want) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		m := runtime.NumGoroutine()
		if want == 0 && m == n {
			return n
		}
		n = m
	}
	return n
}

// klog.FromContext through contexts derived from it finds the keyed
// logger; a logger put in a child is the child's.
func TestTheReconcileContextsLoggerThroughChildren(t *testing.T) {
	logs := &testkit.Logs{}
	work, end := context.WithCancel(context.Background())
	defer end()
	c := newReconcileContext(work, logs.Logger(0), "ns/k", time.Now().Add(time.Hour))
	defer c.cancel()
	type k1 struct{}
	type k2 struct{}
	child, stop := context.WithCancel(context.WithValue(context.WithValue(c, k1{}, 1), k2{}, 2))
	defer stop()
	klog.FromContext(context.WithoutCancel(child)).Info("Grandchild")
	if lines := logs.Grep("Grandchild"); len(lines) != 1 || !strings.Contains(lines[0], `"key"="ns/k"`) {
		t.Errorf("log lines %q, want one with the key ns/k", lines)
	}
	klog.FromContext(klog.NewContext(child, logs.Logger(0).WithValues("other", 1))).Info("Overridden")
	if lines := logs.Grep("Overridden"); len(lines) != 1 || strings.Contains(lines[0], `"key"`) || !strings.Contains(lines[0], `"other"=1`) {
		t.Errorf("log lines %q, want one with other=1 and no key", lines)
	}
}

// An HTTP request made with it against a server that never answers ends
// at the deadline, and at the cancel.
func TestTheReconcileContextEndsAHangingRequest(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	for _, how := range []string{"deadline", "cancel", "deadline passed"} {
		work, end := context.WithCancel(context.Background())
		timeout := 50 * time.Millisecond
		switch how {
		case "cancel":
			timeout = time.Hour
		case "deadline passed":
			timeout = -time.Millisecond
		}
		c := newReconcileContext(work, klog.Background(), "ns/k", time.Now().Add(timeout))
		if how == "cancel" {
			time.AfterFunc(50*time.Millisecond, c.cancel)
		}
		req, _ := http.NewRequestWithContext(c, http.MethodGet, srv.URL, nil)
		got := make(chan error, 1)
		go func() {
			resp, err := srv.Client().Do(req)
			if err == nil {
				resp.Body.Close()
			}
			got <- err
		}()
		want := context.DeadlineExceeded
		if how == "cancel" {
			want = context.Canceled
		}
		select {
		case err := <-got:
			if !errors.Is(err, want) {
				t.Errorf("%s: the request ended with %v, want %v", how, err, want)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("%s: the request still hangs 30 s on", how)
		}
		c.cancel()
		end()
	}
}
