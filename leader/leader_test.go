package leader_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"rawwatch/faultproxy"
	"rawwatch/internal/testkit"
	"rawwatch/leader"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// Short durations keep the tests quick; they still leave the leader a
// renew deadline of 2 s on a busy two-core machine.
func config(ns, identity string) leader.Config {
	return leader.Config{Namespace: ns, Name: "rawwatch-test", Identity: identity,
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 250 * time.Millisecond}
}

// candidate runs one Elector whose work records when it ran.
type candidate struct {
	e      *leader.Elector
	cancel context.CancelFunc
	done   chan struct{} // closed when Run returned err
	err    error

	mu         sync.Mutex
	start, end time.Time
	workCtxEnd time.Time
}

// campaign runs an Elector whose work, once told to stop, has drain left of
// work in flight: it finishes it unless the work is aborted.
func campaign(t *testing.T, c leader.Config, drain time.Duration) *candidate {
	t.Helper()
	return campaignVia(t, testkit.Shared.Get(t).Config(), c, drain)
}

func campaignVia(t *testing.T, cfg *rest.Config, c leader.Config, drain time.Duration) *candidate {
	t.Helper()
	e, err := leader.New(cfg, c)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cand := &candidate{e: e, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(cand.done)
		cand.err = e.Run(ctx, func(work, abort context.Context) {
			cand.mu.Lock()
			cand.start = time.Now()
			cand.mu.Unlock()
			<-work.Done()
			cand.mu.Lock()
			cand.workCtxEnd = time.Now()
			cand.mu.Unlock()
			select { // in-flight reconciles finishing, unless aborted
			case <-time.After(drain):
			case <-abort.Done():
			}
			cand.mu.Lock()
			cand.end = time.Now()
			cand.mu.Unlock()
		})
	}()
	testkit.StopAtEnd(t, cancel, cand.done, 10*time.Second, "Run did not return within 10s of cancel")
	return cand
}

// wantLost waits up to 10 s for c's Run to return ErrLost; the test fails
// on another error, or with notReturned if Run does not return.
func (c *candidate) wantLost(t *testing.T, notReturned string) {
	t.Helper()
	select {
	case <-c.done:
		if !errors.Is(c.err, leader.ErrLost) {
			t.Fatalf("%s's Run = %v, want ErrLost", c.e.Identity(), c.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal(notReturned)
	}
}

func (c *candidate) times() (start, workCtxEnd, end time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.start, c.workCtxEnd, c.end
}

// One candidate leads; the other waits. When the leader shuts down, it keeps
// the lease until its work has drained, then releases it (the Lease names no
// holder between the two), and the standby takes over at its next retry
// instead of waiting the lease out (logged: a busy machine may be slower).
func TestHandoverWaitsForWorkToDrain(t *testing.T) {
	cp, ns, _ := testkit.Parallel(t)
	a := campaign(t, config(ns, "a"), 500*time.Millisecond)
	testkit.Eventually(t, 10*time.Second, a.e.IsLeader, "a never led")
	b := campaign(t, config(ns, "b"), 0)
	testkit.Eventually(t, 10*time.Second, func() bool { return b.e.Leader() == "a" }, "b never saw a lead")
	if b.e.IsLeader() {
		t.Fatal("b leads while a holds the lease")
	}

	// Every version of the Lease from now on: a release writes no holder.
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	w, err := kubernetes.NewForConfigOrDie(cp.Config()).CoordinationV1().Leases(ns).Watch(ctx,
		metav1.ListOptions{FieldSelector: "metadata.name=rawwatch-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	stopped := time.Now()
	a.cancel()
	if <-a.done; a.err != nil {
		t.Fatalf("a's Run after cancel: %v", a.err)
	}
	testkit.Eventually(t, 10*time.Second, b.e.IsLeader, "b never took over")
	var holders []string
	for len(holders) == 0 || holders[len(holders)-1] != "b" {
		select {
		case e := <-w.ResultChan():
			if l, ok := e.Object.(*coordinationv1.Lease); ok {
				holder := ""
				if l.Spec.HolderIdentity != nil {
					holder = *l.Spec.HolderIdentity
				}
				holders = append(holders, holder)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the Lease's holders %q, and b's not among them", holders)
		}
	}
	// The watch's first event is the Lease as it was; a renews until it stops.
	if holders = slices.Compact(holders); !slices.Equal(holders, []string{"a", "", "b"}) {
		t.Errorf("the Lease's holders %q, want a, then none (released), then b", holders)
	}
	_, _, aEnd := a.times()
	bStart, _, _ := b.times()
	if !bStart.After(aEnd) {
		t.Fatalf("b started at %s, before a's work ended at %s", bStart.Format(time.StampMicro), aEnd.Format(time.StampMicro))
	}
	handover := bStart.Sub(aEnd)
	t.Logf("a stopped; its work drained for %s; b took over %s after a's work ended", aEnd.Sub(stopped).Round(time.Millisecond), handover.Round(time.Millisecond))
	if handover > 2*time.Second { // the lease is 3 s; a busy machine may take this long all the same
		t.Logf("handover took %s: a measure, slow on a busy machine", handover)
	}
}

// A leader whose lease is taken away stops its work and Run says ErrLost.
func TestLostLeaseStopsTheWork(t *testing.T) {
	cp, ns, _ := testkit.Parallel(t)
	a := campaign(t, config(ns, "a"), 100*time.Millisecond)
	testkit.Eventually(t, 10*time.Second, a.e.IsLeader, "a never led")

	// Someone else writes themselves into the Lease, valid for a minute.
	testkit.StealLease(t, cp.Config(), ns, "rawwatch-test", "thief")
	stolen := time.Now()

	a.wantLost(t, "a did not notice it lost the lease")
	returned := time.Now()
	_, ctxEnd, end := a.times()
	if end.IsZero() || end.After(returned) {
		t.Fatal("Run returned before the work had stopped")
	}
	if a.e.IsLeader() {
		t.Error("IsLeader after losing the lease")
	}
	t.Logf("lease stolen; work told to stop after %s (renew deadline 2s); Run returned after %s",
		ctxEnd.Sub(stolen).Round(time.Millisecond), returned.Sub(stolen).Round(time.Millisecond))
	// The Lease still names the thief: losing it must not clear it.
	leases := kubernetes.NewForConfigOrDie(cp.Config()).CoordinationV1().Leases(ns)
	lease, err := leases.Get(context.Background(), "rawwatch-test", metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != "thief" {
		t.Fatalf("lease after the loss: %v %v", lease.Spec.HolderIdentity, err)
	}
}

// Renewals answered 500 for longer than the renew deadline (the Lease API
// broken for the leader only, through a fault proxy) while the leader has a
// reconcile in flight that would take 30 s more. The leader gives up, aborts
// that work at once and never frees the Lease; the standby takes over when
// the Lease expires. At no instant do both work.
func TestFailedRenewalsNeverLetTwoLeadersWork(t *testing.T) {
	cp, ns, _ := testkit.Parallel(t)
	proxy, viaProxy := testkit.Proxy(t, cp, cp.APIServer)
	a := campaignVia(t, viaProxy, config(ns, "a"), 30*time.Second)
	testkit.Eventually(t, 10*time.Second, a.e.IsLeader, "a never led")
	b := campaign(t, config(ns, "b"), 0)
	testkit.Eventually(t, 10*time.Second, func() bool { return b.e.Leader() == "a" }, "b never saw a lead")

	failed := time.Now()
	proxy.Fail(faultproxy.Failure{Kinds: faultproxy.Other, Code: http.StatusInternalServerError})
	testkit.Eventually(t, 15*time.Second, b.e.IsLeader, "b never took over")
	a.wantLost(t, "a's Run did not return after losing the lease")
	_, aWorkEnd, aEnd := a.times()
	bStart, _, _ := b.times()
	t.Logf("renewals failing from 0s; a told to stop at %s, its work ended at %s; b started at %s",
		aWorkEnd.Sub(failed).Round(time.Millisecond), aEnd.Sub(failed).Round(time.Millisecond), bStart.Sub(failed).Round(time.Millisecond))
	if aEnd.IsZero() || !bStart.After(aEnd) {
		t.Fatalf("two leaders at once: b started %s after the renewals began failing, while a's work ran until %s",
			bStart.Sub(failed).Round(time.Millisecond), aEnd.Sub(failed).Round(time.Millisecond))
	}
	if d := aEnd.Sub(aWorkEnd); d > 10*time.Second { // of the 30 s it would have drained
		t.Errorf("a's work in flight took %s to stop after the loss: it was not aborted", d)
	}
	proxy.Heal()
}

func TestValidate(t *testing.T) {
	for name, c := range map[string]leader.Config{
		"no name":             {Namespace: "ns"},
		"lease <= renew":      {Namespace: "ns", Name: "n", LeaseDuration: 10 * time.Second, RenewDeadline: 10 * time.Second},
		"renew <= 1.2 retry":  {Namespace: "ns", Name: "n", RenewDeadline: 2 * time.Second, RetryPeriod: 2 * time.Second},
		"fractional seconds":  {Namespace: "ns", Name: "n", LeaseDuration: 1500 * time.Millisecond, RenewDeadline: time.Second, RetryPeriod: 100 * time.Millisecond},
		"lease under one sec": {Namespace: "ns", Name: "n", LeaseDuration: 500 * time.Millisecond, RenewDeadline: 100 * time.Millisecond, RetryPeriod: 10 * time.Millisecond},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	c := leader.Config{Namespace: "ns", Name: "n"}
	if err := c.Validate(); err != nil || c.LeaseDuration != 15*time.Second || c.Identity == "" {
		t.Errorf("defaults: %+v %v", c, err)
	}
}
