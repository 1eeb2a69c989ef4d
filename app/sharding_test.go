package app_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"rawwatch/app"
	"rawwatch/faultproxy"
	"rawwatch/internal/controlplane"
	"rawwatch/internal/testkit"
	"rawwatch/observe"
	"rawwatch/ring"
	"rawwatch/shard"
	"rawwatch/store"
)

// The ring's timing in these tests: a replica cut off is out after 3 s.
const (
	shardLease = 3 * time.Second
	shardRenew = 500 * time.Millisecond
	// settleLimit bounds what must happen (replicas settle, a cut-off
	// replica's slots are taken over) on a busy machine under -race; how
	// soon it happens is logged and measured in docs/sharding.md.
	settleLimit = 2 * time.Minute
)

type replica struct {
	name    string
	a       *app.App
	stop    context.CancelFunc
	stopped chan struct{}
}

// startReplica runs one sharded replica against cfg until the test ends.
func startReplica(t *testing.T, cfg *rest.Config, ns, name string, ref *referee) *replica {
	t.Helper()
	return startReplicaWith(t, cfg, ns, name, ref, app.Sharding{LeaseDuration: shardLease, RenewPeriod: shardRenew})
}

// startReplicaWith is startReplica with s's durations.
func startReplicaWith(t *testing.T, cfg *rest.Config, ns, name string, ref *referee, s app.Sharding) *replica {
	t.Helper()
	s.Namespace, s.Identity = ns, name
	a, err := app.New(app.Options{Config: cfg, Namespace: ns, Workers: 4, WrapReconciler: ref.wrap(name),
		Sharding: &s, Observer: observe.Func(ref.watchLosses)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.Background().WithValues("replica", name)))
	r := &replica{name: name, a: a, stop: cancel, stopped: make(chan struct{})}
	go func() {
		if err := a.Run(ctx); err != nil {
			t.Errorf("replica %s: %v", name, err)
		}
		close(r.stopped)
	}()
	testkit.StopAtEnd(t, cancel, r.stopped, time.Minute, "replica %s did not stop", name)
	return r
}

// watchLosses counts the times a replica's claims lost a slot it worked,
// and the times a replica fenced itself (whatever it claimed).
func (r *referee) watchLosses(e observe.Event) {
	c, ok := e.(ring.ClaimsChanged)
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if c.Before.Working.Minus(c.Claims.Working).Len() > 0 {
		r.losses++
	}
	if c.Fenced {
		r.fences++
	}
}

// settled tells whether the replicas see exactly each other and work
// exactly their targets, which tile the hash space, and whether each one's
// store holds only objects of the slots it works (its watcher has moved to
// its shard).
func settled(rs ...*replica) bool {
	var names []string
	for _, r := range rs {
		names = append(names, r.name)
	}
	slices.Sort(names)
	var all shard.SlotSet
	for _, r := range rs {
		c := r.a.Member.Claims()
		if !slices.Equal(r.a.Member.Members(), names) || c.Working != c.Target || c.Claimed() != c.Working ||
			!all.And(c.Working).Empty() {
			return false
		}
		for _, o := range r.a.Store.List() {
			if !c.Working.Has(shard.SlotOf(string(o.GetUID()))) {
				return false
			}
		}
		all = all.Union(c.Working)
	}
	return all.Len() == shard.Slots
}

func claimsOf(rs ...*replica) string {
	var b strings.Builder
	for _, r := range rs {
		c := r.a.Member.Claims()
		fmt.Fprintf(&b, "%s sees %v: working %d, pending %d, releasing %d, target %d; ", r.name, r.a.Member.Members(),
			c.Working.Len(), c.Pending.Len(), c.Releasing.Len(), c.Target.Len())
	}
	return b.String()
}

// waitSettled waits for settled, with objects in the stores in all, and
// returns how long it took.
func waitSettled(t *testing.T, limit time.Duration, objects int, rs ...*replica) time.Duration {
	t.Helper()
	start := time.Now()
	held := func() int {
		n := 0
		for _, r := range rs {
			n += r.a.Store.Len()
		}
		return n
	}
	testkit.Eventually(t, limit, func() bool { return settled(rs...) && held() == objects },
		"the replicas did not settle with %d objects: %s", objects, lazy(func() string { return fmt.Sprintf("%s; %d objects held", claimsOf(rs...), held()) }))
	return time.Since(start)
}

// owners maps every stored key to the replica whose store holds it, and
// fails the test if two stores hold one key or a store holds a key outside
// what its replica works.
func owners(t *testing.T, rs ...*replica) map[string]string {
	t.Helper()
	own := map[string]string{}
	for _, r := range rs {
		working := r.a.Member.Claims().Working
		for _, o := range r.a.Store.List() {
			key := store.KeyOf(o)
			if other, dup := own[key]; dup {
				t.Errorf("%s is in the stores of %s and %s", key, other, r.name)
			}
			own[key] = r.name
			if !working.Has(shard.SlotOf(string(o.GetUID()))) {
				t.Errorf("%s is in %s's store, outside the slots it works", key, r.name)
			}
		}
	}
	return own
}

// moved counts the keys whose owner differs between two owner maps.
func moved(before, after map[string]string) int {
	n := 0
	for k, o := range before {
		if after[k] != o {
			n++
		}
	}
	return n
}

// On the real apiserver, with its shard selectors: three replicas
// split 3,000 objects, each reconciled by exactly one of them, the stores
// tiling the objects; a fourth joins (about a quarter of the keys move), one
// is cut off from the server (the others take its slots once its Lease
// expires: it fenced itself first) and one leaves cleanly, while the objects
// keep changing. At no instant do two replicas reconcile one key (the
// referee), no moved key is reported deleted, and every change is reconciled.
func TestShardedReplicasDivideTheWorkAndHandItOver(t *testing.T) {
	t.Parallel()
	cp := testkit.Shared.Get(t)
	shardedRun(t, cp, cp.APIServer, 3000)
}

// The same with an apiserver whose ShardedListAndWatch gate is off: it sends
// every object to every replica, and the replicas filter on their side.
func TestShardedReplicasWithoutServerSideSelectors(t *testing.T) {
	t.Parallel()
	cp := testkit.Shared.Get(t)
	old := testkit.APIServer(t, cp, "apiserver-no-shards-app", "--feature-gates=ShardedListAndWatch=false")
	shardedRun(t, cp, old, 600)
}

func shardedRun(t *testing.T, cp *controlplane.ControlPlane, server *controlplane.APIServer, objects int) {
	cfg := server.Config()
	ns := testkit.Namespace(t, cfg)
	c := testkit.Client(t, cfg)
	ref := &referee{t: t, busy: map[string]string{}, count: map[string]int{}, by: map[string]map[string]int{}}
	proxy, viaProxy := testkit.Proxy(t, cp, server)

	a := startReplica(t, cfg, ns, "a", ref)
	b := startReplica(t, cfg, ns, "b", ref)
	x := startReplica(t, viaProxy, ns, "x", ref) // the one cut off later
	took := waitSettled(t, settleLimit, 0, a, b, x)
	t.Logf("three replicas settled %s after starting", took.Round(time.Millisecond))
	ref.mu.Lock()
	ref.losses, ref.fences = 0, 0
	ref.mu.Unlock()

	start := time.Now()
	testkit.Objects(t, c, ns, "obj", objects)
	waitConverged(t, c, ns, objects)
	t.Logf("%d objects created and reconciled in %s", objects, time.Since(start).Round(time.Millisecond))
	// (Under load a renewal may time out, a replica fence itself and
	// rejoin: the claims and the stores settle again.)
	waitSettled(t, settleLimit, objects, a, b, x)
	own := owners(t, a, b, x)
	if len(own) != objects {
		t.Errorf("the stores hold %d objects in all, want %d", len(own), objects)
	}
	// Each key was reconciled by one replica, unless a replica lost slots
	// it worked meanwhile (a renewal late under load fences it; its slots
	// may then go to another): never two at once is held throughout by the
	// referee.
	ref.mu.Lock()
	if ref.losses == 0 {
		for key, by := range ref.by {
			if len(by) != 1 {
				t.Errorf("%s reconciled by %d replicas (%v), want one", key, len(by), by)
			}
		}
	} else {
		t.Logf("replicas lost worked slots %d times (fenced: %d): keys may have moved", ref.losses, ref.fences)
	}
	counts := fmt.Sprint(ref.count)
	ref.mu.Unlock()
	for _, r := range []*replica{a, b, x} {
		t.Logf("%s: works %.3f of the slots, holds %d objects, filtered %d on the client",
			r.name, r.a.Member.Claims().Working.Set().Fraction(), r.a.Store.Len(), r.a.Sharded.OutOfShard())
	}
	t.Logf("reconciles per replica: %s", counts)
	// Each replica's metrics and probe agree with its claims. On a busy
	// machine a replica may fence itself for a moment (a renewal late) and
	// take its slots back a few renew periods later: what is checked is
	// that they agree once it has, within a minute.
	for _, r := range []*replica{a, b, x} {
		var failed string
		check := func() string {
			working := r.a.Member.Claims().Working
			if got := gauge(t, r, "rawwatch_shard_slots", "working"); got != float64(working.Len()) {
				return fmt.Sprintf("rawwatch_shard_slots{state=working} = %v, want %d", got, working.Len())
			}
			if got := gauge(t, r, "rawwatch_ring_members", ""); got != 3 {
				return fmt.Sprintf("rawwatch_ring_members = %v, want 3", got)
			}
			if got := gauge(t, r, "rawwatch_shard_working_info", working.String()); got != 1 {
				return fmt.Sprintf("rawwatch_shard_working_info{slots=%q} = %v, want 1", working, got)
			}
			if working.Len() != r.a.Member.Claims().Working.Len() {
				return "its claims moved while they were read"
			}
			probe := httptest.NewRecorder()
			r.a.Leadership.Handler("leaderz").ServeHTTP(probe, httptest.NewRequest("GET", "/leaderz?verbose", nil))
			if want := "[+]shard ok\n"; probe.Code != 200 || !strings.Contains(probe.Body.String(), want) {
				return fmt.Sprintf("/leaderz?verbose answered %d %q, want 200 with %q", probe.Code, probe.Body.String(), want)
			}
			return ""
		}
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
			if failed = check(); failed == "" || time.Now().After(deadline) {
				break
			}
		}
		if failed != "" {
			t.Errorf("%s: %s", r.name, failed)
		}
	}

	// From now on the objects change all the time.
	stopChurn := sync.OnceFunc(churn(t, c, ns, objects, 5*time.Millisecond))
	defer stopChurn()

	// Scale 3 → 4.
	d := startReplica(t, cfg, ns, "d", ref)
	took = waitSettled(t, settleLimit, objects, a, b, x, d)
	after := owners(t, a, b, x, d)
	t.Logf("3 → 4: settled %s after d started; %d of %d keys moved (%.2f; 1/4 = 0.25)",
		took.Round(time.Millisecond), moved(own, after), objects, float64(moved(own, after))/float64(objects))
	if f := float64(moved(own, after)) / float64(objects); f < 0.15 || f > 0.4 {
		t.Errorf("%.2f of the keys moved from 3 to 4 replicas, want about a quarter", f)
	}
	own = after

	// x is cut off from the server: its renewals fail. It fences itself,
	// then the others see its Lease expire and take its slots.
	cut := time.Now()
	proxy.Fail(faultproxy.Failure{Code: http.StatusInternalServerError})
	testkit.Eventually(t, shardLease, func() bool { return x.a.Member.Claims().Claimed().Empty() },
		"x still claims slots %s after it was cut off", shardLease)
	fenced := time.Since(cut)
	// A replica claims a slot only once its watcher has listed it: the
	// survivors' lists of their new shards count apart (from when their
	// targets took x's slots to when their caches covered them).
	var targeted, covered time.Time
	testkit.Eventually(t, settleLimit, func() bool {
		var all, targets shard.SlotSet
		listed := true
		for _, r := range []*replica{a, b, d} {
			c := r.a.Member.Claims()
			all, targets = all.Union(c.Working), targets.Union(c.Target)
			listed = listed && c.Target.Minus(r.a.Sharded.Covered()).Empty()
		}
		if targeted.IsZero() && targets.Len() == shard.Slots {
			targeted = time.Now()
		}
		if !targeted.IsZero() && covered.IsZero() && listed {
			covered = time.Now()
		}
		return all.Len() == shard.Slots
	}, "x's slots were not taken over: %s", lazy(func() string { return claimsOf(a, b, d) }))
	taken := time.Since(cut)
	listing := covered.Sub(targeted)
	waitSettled(t, settleLimit, objects, a, b, d)
	cached := time.Since(cut)
	after = owners(t, a, b, d)
	t.Logf("x cut off: it fenced itself after %s; its slots were taken over %s after the cut (lease %s, renew period %s; the survivors' lists of their new shards took %s), and in the stores %s after it; %d keys moved",
		fenced.Round(time.Millisecond), taken.Round(time.Millisecond), shardLease, shardRenew, listing.Round(time.Millisecond), cached.Round(time.Millisecond), moved(own, after))
	// How soon is a measurement (docs/sharding.md: 5.5–5.9 s unloaded),
	// reported, not asserted: under make test's -race on a busy machine,
	// renewals time out, the replicas fence themselves for a moment, and a
	// takeover took 15 s and more. That it happens at all is asserted above.
	if bound := shardLease + 4*shardRenew + 5*time.Second + listing; taken > bound {
		t.Logf("the slots of a replica cut off were taken over after %s, over the unloaded bound %s (lease, four renew periods, 5 s for requests, and the lists): a busy machine", taken, bound)
	}
	own = after

	// d leaves cleanly: its Lease is deleted, its slots are free at once.
	left := time.Now()
	d.stop()
	<-d.stopped
	took = waitSettled(t, settleLimit, objects, a, b)
	after = owners(t, a, b)
	t.Logf("d left cleanly: settled %s after it stopped; %d keys moved", time.Since(left).Round(time.Millisecond), moved(own, after))

	stopChurn()
	waitConverged(t, c, ns, objects)
	if len(after) != objects {
		t.Errorf("two replicas hold %d objects in all, want %d", len(after), objects)
	}
	ref.mu.Lock()
	defer ref.mu.Unlock()
	if ref.deletions != 0 {
		t.Errorf("%d deletions reported; no object was deleted (keys moved)", ref.deletions)
	}
	t.Logf("reconciles per replica, in all: %v", ref.count)
}

// gauge reads a gauge of r's metrics: the series whose one label has the
// value label ("" for a series without labels).
func gauge(t *testing.T, r *replica, name, label string) float64 {
	t.Helper()
	families, err := r.a.Metrics.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if (label == "" && len(m.GetLabel()) == 0) || (len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == label) {
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Errorf("%s: no %s{%s}", r.name, name, label)
	return -1
}
