package ring_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"rawwatch/faultproxy"
	"rawwatch/internal/testkit"
	"rawwatch/ring"
	"rawwatch/shard"
)

func TestMain(m *testing.M) { testkit.Main(m) }

const (
	leaseDuration = 2 * time.Second
	renewPeriod   = 200 * time.Millisecond
)

type running struct {
	m    *ring.Member
	stop context.CancelFunc
	done chan struct{}
}

func join(t *testing.T, cfg *rest.Config, ns, id string) *running {
	t.Helper()
	return joinWith(t, ring.Config{Client: kubernetes.NewForConfigOrDie(cfg), Namespace: ns, Ring: "rawwatch",
		Identity: id, LeaseDuration: leaseDuration, RenewPeriod: renewPeriod})
}

// joinSharded joins with the handoff on (nothing is ever busy).
func joinSharded(t *testing.T, cfg *rest.Config, ns, id string) *running {
	t.Helper()
	return joinWith(t, ring.Config{Client: kubernetes.NewForConfigOrDie(cfg), Namespace: ns, Ring: "rawwatch",
		Identity: id, LeaseDuration: leaseDuration, RenewPeriod: renewPeriod,
		OnClaims: func(ring.Claims) {}, Busy: func() (_, _ shard.SlotSet) { return }})
}

func joinWith(t *testing.T, cfg ring.Config) *running {
	t.Helper()
	m, err := ring.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.Background()))
	r := &running{m: m, stop: cancel, done: make(chan struct{})}
	go func() { m.Run(ctx); close(r.done) }()
	t.Cleanup(func() { cancel(); <-r.done })
	return r
}

// waitFor waits until every member in who sees exactly want, and returns
// how long that took.
func waitFor(t *testing.T, limit time.Duration, want []string, who ...*running) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		all := true
		for _, r := range who {
			if !slices.Equal(r.m.Members(), want) {
				all = false
			}
		}
		if all {
			return time.Since(start)
		}
		if time.Since(start) > limit {
			var seen []string
			for _, r := range who {
				seen = append(seen, fmt.Sprint(r.m.Members()))
			}
			t.Fatalf("after %s the members see %v, want %v each", limit, seen, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitOut waits until r no longer counts id among the members.
func waitOut(t *testing.T, limit time.Duration, r *running, id string) time.Duration {
	t.Helper()
	start := time.Now()
	for slices.Contains(r.m.Members(), id) {
		if time.Since(start) > limit {
			t.Fatalf("after %s %s still counts itself a member", limit, id)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start)
}

// Three members on the real apiserver: they find each other; one leaves
// cleanly and is gone at the next list; one whose Lease API answers 500 is
// out, in its own view first (a RenewPeriod early) and then in the others',
// within the lease duration (plus a period), retrying no faster than its
// period; healed, it is back.
func TestMembershipOnLeases(t *testing.T) {
	cp, ns, _ := testkit.Parallel(t)
	proxy, viaProxy := testkit.Proxy(t, cp, cp.APIServer)

	a := join(t, cp.Config(), ns, "a")
	b := join(t, viaProxy, ns, "b")
	c := join(t, cp.Config(), ns, "c")
	took := waitFor(t, 5*time.Second, []string{"a", "b", "c"}, a, b, c)
	t.Logf("three members see each other %s after joining", took)

	c.stop()
	<-c.done
	took = waitFor(t, 2*renewPeriod+time.Second, []string{"a", "b"}, a, b)
	t.Logf("a clean leave is seen %s after it", took)

	// b's Lease API answers 500 from now on.
	before := proxy.Counts().Total()
	proxy.Fail(faultproxy.Failure{Code: http.StatusInternalServerError})
	failing := time.Now()
	var wg sync.WaitGroup
	var selfOut, othersOut time.Duration
	wg.Go(func() { selfOut = waitOut(t, leaseDuration+renewPeriod+time.Second, b, "b") })
	wg.Go(func() { othersOut = waitFor(t, leaseDuration+renewPeriod+time.Second, []string{"a"}, a) })
	wg.Wait()
	window := time.Since(failing)
	requests := proxy.Counts().Total() - before
	t.Logf("renewals failing: b counts itself out after %s, a counts b out after %s; b made %d requests in %s",
		selfOut, othersOut, requests, window.Round(time.Millisecond))
	if selfOut >= othersOut {
		t.Errorf("b counted itself out %s after a did: for that long it believed it was a member when the others did not", selfOut-othersOut)
	}
	// Two requests a period (a renewal's GET, the LIST), nothing faster.
	if bound := 2 * (int64(window/renewPeriod) + 2); requests > bound {
		t.Errorf("b made %d requests in %s while failing, bound %d", requests, window, bound)
	}

	if err := proxy.Heal(); err != nil {
		t.Fatal(err)
	}
	took = waitFor(t, 5*time.Second, []string{"a", "b"}, a, b)
	t.Logf("healed, b is back %s later", took)
}

// Two processes started with one identity: the second finds the first's
// Lease being renewed and never claims a slot while it is; once the first
// leaves, the second takes the Lease and every slot.
func TestOneIdentityNeverWorksTwice(t *testing.T) {
	cp, ns, _ := testkit.Parallel(t)
	first := joinSharded(t, cp.Config(), ns, "dup")
	all := func(r *running) bool { return r.m.Claims().Working.Len() == shard.Slots }
	testkit.Eventually(t, 5*time.Second, func() bool { return all(first) }, "alone, the first never worked every slot")
	second := joinSharded(t, cp.Config(), ns, "dup")
	for end := time.Now().Add(leaseDuration + 4*renewPeriod); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if !second.m.Claims().Claimed().Empty() {
			t.Fatalf("the second process with identity dup claims %v while the first works", second.m.Claims().Claimed())
		}
		if !all(first) {
			t.Fatalf("the first process lost its slots to the second: %+v", first.m.Claims())
		}
	}
	first.stop()
	<-first.done
	began := time.Now()
	testkit.Eventually(t, leaseDuration+5*renewPeriod, func() bool { return all(second) }, "the second never took over")
	t.Logf("the first left; the second works every slot %s later", time.Since(began).Round(time.Millisecond))
}
