package reconcile

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"rawwatch/observe"
	"rawwatch/queue"
)

func TestServerAway(t *testing.T) {
	gr := schema.GroupResource{Group: "example.com", Resource: "myresources"}
	for _, c := range []struct {
		err  error
		away bool
	}{
		{apierrors.NewServiceUnavailable("etcd is down"), true},
		{apierrors.NewInternalError(errors.New("boom")), true},
		{apierrors.NewTooManyRequests("slow down", 3), true},
		{apierrors.NewServerTimeout(gr, "update", 1), true},
		{apierrors.NewTimeoutError("timed out", 1), true},
		{&url.Error{Op: "Put", URL: "https://127.0.0.1:1", Err: syscall.ECONNREFUSED}, true},
		{fmt.Errorf("updating status of ns/a: %w", &url.Error{Op: "Put", URL: "https://x", Err: errors.New("tls: handshake failure")}), true},
		{context.DeadlineExceeded, true},
		{apierrors.NewNotFound(gr, "a"), false},
		{apierrors.NewConflict(gr, "a", errors.New("stale")), false},
		{apierrors.NewInvalid(schema.GroupKind{Kind: "MyResource"}, "a", nil), false},
		{apierrors.NewForbidden(gr, "a", errors.New("no")), false},
		{errors.New("the reconciler's own error"), false},
		{context.Canceled, false},
		{nil, false},
	} {
		if away, _ := ServerAway(c.err); away != c.away {
			t.Errorf("ServerAway(%v) = %v, want %v", c.err, away, c.away)
		}
	}
	if _, after := ServerAway(apierrors.NewTooManyRequests("slow down", 3)); after != 3*time.Second {
		t.Errorf("retry-after %v, want 3s", after)
	}
}

// The pause doubles once per wave of failures, not once per failure: the
// workers that were already in flight when a wave began add nothing.
func TestPauseGrowsOncePerWave(t *testing.T) {
	p := &pause{Initial: time.Second, Max: 8 * time.Second}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	for _, step := range []struct {
		now, began float64
		want       time.Duration
	}{
		{0, -1, time.Second},                // wave 1
		{0.1, -0.5, 900 * time.Millisecond}, // in flight when it began: same wave
		{1.2, 1.0, 2 * time.Second},         // began after: wave 2
		{1.3, 1.0, 1900 * time.Millisecond},
		{3.5, 3.2, 4 * time.Second},
		{7.6, 7.3, 8 * time.Second},
		{15.7, 15.6, 8 * time.Second}, // the cap
	} {
		if got := p.failed(at(step.now), at(step.began), 0); got != step.want {
			t.Fatalf("failure at %vs (began %vs): pause %v, want %v", step.now, step.began, got, step.want)
		}
	}
	if got := p.failed(at(30), at(29), 20*time.Second); got != 20*time.Second {
		t.Errorf("a Retry-After longer than the pause: %v, want 20s", got)
	}
	p.succeeded()
	if got := p.failed(at(60), at(59), 0); got != time.Second {
		t.Errorf("after a success the pause starts again from %v, got %v", time.Second, got)
	}
}

// awayReconciler answers 503 until the outage ends, then succeeds.
type awayReconciler struct {
	fakeReconciler
	until time.Time
	calls int
}

func (a *awayReconciler) Reconcile(_ context.Context, key string) error {
	a.Mu.Lock()
	defer a.Mu.Unlock()
	a.calls++
	if time.Now().Before(a.until) {
		return apierrors.NewServiceUnavailable("the server is away")
	}
	a.fakeReconciler.Calls = append(a.fakeReconciler.Calls, key)
	return nil
}

// Issue 8, finding 9: a server that is away for ten minutes is not charged
// to each key. With the per-key backoff (the old policy: every error grows
// the key's delay, up to 1000 s), keys retried through the outage waited up
// to a quarter of an hour after it ended. Now the workers pause instead, and
// every key is reconciled within the pause's cap after the server is back;
// no key's retry history grew, and the doomed requests during the outage
// are about one per pause, not one per key per delay.
func TestControllerPausesWhileTheServerIsAway(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const keys, outage = 200, 10 * time.Minute
		fake := &awayReconciler{until: time.Now().Add(outage)}
		q := queue.New(nil) // the default: per key 5 ms doubling to 1000 s, and the 10/s bucket
		var mu sync.Mutex
		pauses := 0
		c := &Controller[object]{Queue: q, Reconciler: fake, Observer: observe.Func(func(e observe.Event) {
			if _, ok := e.(Paused); ok {
				mu.Lock()
				pauses++
				mu.Unlock()
			}
		})}
		for i := range keys {
			q.Add(fmt.Sprintf("ns/obj-%d", i))
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { c.Run(ctx, nil, 4); close(done) }()
		time.Sleep(outage)
		fake.Mu.Lock()
		doomed := fake.calls
		fake.Mu.Unlock()
		deadline := time.Now().Add(DefaultPauseMax + 5*time.Second)
		for {
			time.Sleep(100 * time.Millisecond)
			fake.Mu.Lock()
			n := len(fake.fakeReconciler.Calls)
			fake.Mu.Unlock()
			if n >= keys {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("%d of %d keys reconciled %v after a %v outage ended; want all within the pause's cap %v",
					n, keys, time.Since(deadline.Add(-DefaultPauseMax-5*time.Second)), outage, DefaultPauseMax)
				break
			}
		}
		converged := time.Since(deadline.Add(-DefaultPauseMax - 5*time.Second))
		cancel()
		<-done
		if t.Failed() {
			return
		}
		for i := range keys {
			if r := q.Retries(fmt.Sprintf("ns/obj-%d", i)); r != 0 {
				t.Fatalf("key obj-%d has %d retries: the outage was charged to it", i, r)
			}
		}
		// One wave of four workers per pause: 0.5, 1, 2, ... 30 s, then
		// every 30 s for ten minutes: about 4 × 25 doomed requests.
		if doomed > 200 {
			t.Errorf("%d requests during the outage, want at most 200", doomed)
		}
		t.Logf("%d requests during a %v outage (%d pauses); all %d keys reconciled %v after it ended", doomed, outage, pauses, keys, converged)
	})
}
