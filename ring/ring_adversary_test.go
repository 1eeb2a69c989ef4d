package ring

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"rawwatch/internal/testkit"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"

	"rawwatch/shard"
)

// Adversary tests: each showed a claim of docs/sharding.md that did not
// hold, failing on the code it reviewed; those that call openfinding.Skip
// still fail, the others hold the fix made since.

// Claims broken: "One identity, one process ... two processes never work
// under one identity" and "[a Lease deleted by hand:] its re-created Lease
// claims nothing for a lease duration" (docs/sharding.md, Membership and
// the handoff's last section).
//
// x1 Works every slot. x2, a second process started with the same
// identity, waits (its GET finds x1's Lease moving: errForeignWriter). The
// Lease is deleted by hand. x2's next renewal finds nothing, and since it
// never wrote the Lease (wrote is zero) it creates it at once, with no
// quiet period (lostLease is only for a member that had written it), and
// claims every slot one renew period later. x1's Lease API is failing for
// two renew periods (two 500s, well within its fence of L − R), so it has
// not found out; both Work all 256 slots while both may admit reconciles.
//
// Failure printed:
//
//	ring_adversary_test.go:90: the Lease deleted by hand, re-created by a second
//	process of identity x: x and x both Work 256 slots (0-255), and may admit
//	reconciles of 256 of them
//
// Severity: split brain (needs a duplicated identity, which the docs
// promise to survive, plus a hand delete and a short API blip for x1).
func TestAdversaryASecondProcessRecreatesAHandDeletedLeaseAndWorksAtOnce(t *testing.T) {
	w := twoOfOneIdentity(t)
	x1, x2 := w.x1, w.x2
	// x2 starts: it finds the Lease renewed by x1, and waits.
	for range 3 {
		x2.round(w.ctx, klog.Background())
		w.roundX1()
		noSplit(t, "x2 waiting", x1, x2)
		w.tick()
	}
	if !x2.Claims().Working.Empty() {
		t.Fatalf("x2 works %d slots while x1 renews the Lease", x2.Claims().Working.Len())
	}
	// The Lease is deleted by hand; x1's Lease API fails for two rounds.
	if err := w.client.Tracker().Delete(coordination(), "ns", x1.leaseName()); err != nil {
		t.Fatal(err)
	}
	w.x1Fails = func(string) bool { return true }
	for range 2 {
		x2.round(w.ctx, klog.Background())
		noSplit(t, "the Lease deleted by hand, re-created by a second process of identity x", x1, x2)
		w.roundX1()
		noSplit(t, "the Lease deleted by hand, re-created by a second process of identity x", x1, x2)
		w.tick()
	}
}

// Claims broken: "After an outage of the API server longer than the fence
// (every replica fences itself at once) the ring comes back as it was"
// (A fence keeps its deletions), and ring.go's package doc "The Lease API
// failing ... it retries every RenewPeriod".
//
// An etcd restore (from a snapshot, after the outage) puts the member's
// Lease back as it was a few renewals earlier: its renewTime is one the
// member wrote and forgot (neither wrote nor tried). From then on every
// renewal returns errForeignWriter: the member never renews again, and
// never works a slot again, though nobody else renews its Lease. With every
// replica's Lease restored, the whole controller stops for good (a restart
// is needed).
//
// Failure printed:
//
//	ring_adversary_test.go:161: 10 lease durations after the etcd restore, a
//	works 0 slots (last renewal error: another process renews this member's
//	Lease: ...); want it back at work
//
// Severity: outage (liveness; no split brain).
func TestAdversaryALeaseRestoredFromAnEtcdSnapshotFencesItsOwnerForGood(t *testing.T) {
	client := versionedClient()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const lease, renew = 4500 * time.Millisecond, time.Second
	m := handoffMember(t, client, "a", lease, renew, func() time.Time { return now })
	ctx := klog.NewContext(context.Background(), klog.Background())
	var snapshot *coordinationv1.Lease
	for i := range joinRounds + 2 {
		m.round(ctx, klog.Background())
		if i == joinRounds-1 { // the etcd snapshot is taken
			obj, err := client.Tracker().Get(coordination(), "ns", m.leaseName())
			if err != nil {
				t.Fatal(err)
			}
			snapshot = obj.(*coordinationv1.Lease).DeepCopy()
		}
		now = now.Add(renew)
	}
	if m.Claims().Working != shard.All() {
		t.Fatalf("alone, a works %v, want every slot", m.Claims().Working)
	}
	// The API server is down past the fence, and etcd is restored from the
	// snapshot.
	down := true
	client.PrependReactor("*", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if down {
			return true, nil, apierrors.NewServiceUnavailable("etcd is being restored")
		}
		return false, nil, nil
	})
	for range int(2 * lease / renew) {
		m.round(ctx, klog.Background())
		now = now.Add(renew)
	}
	if err := client.Tracker().Update(coordination(), snapshot, "ns"); err != nil {
		t.Fatal(err)
	}
	down = false
	for range int(10 * lease / renew) {
		m.round(ctx, klog.Background())
		now = now.Add(renew)
	}
	_, lastErr := m.renew(ctx)
	if m.Claims().Working.Empty() {
		t.Fatalf("10 lease durations after the etcd restore, a works %d slots (last renewal error: %v); want it back at work",
			m.Claims().Working.Len(), lastErr)
	}
}

// Claims broken: the same ("a failing Lease API is retried at the same
// period"; "the ring comes back as it was"), without an etcd restore: a
// renewal that times out after the server wrote it, followed by 64
// renewals whose UPDATE fails (etcd out of space: reads work, writes fail;
// 64 s at this renew period, 128 s at the default), makes the Lease hold a
// renewTime the member has dropped from tried (it keeps 64). When writes
// work again, the member takes its own write for another process's, and
// never renews again.
//
// Failure printed:
//
//	ring_adversary_test.go:217: writes work again, yet a's renewal fails for
//	good: another process renews this member's Lease: ...
//
// Severity: outage of the member (liveness), until it is restarted.
func TestAdversaryAnOwnWriteOlderThanSixtyFourAttemptsFencesForGood(t *testing.T) {
	client := versionedClient()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const lease, renew = 4500 * time.Millisecond, time.Second
	m := handoffMember(t, client, "a", lease, renew, func() time.Time { return now })
	ctx := context.Background()
	if err := renewed(m, ctx); err != nil {
		t.Fatalf("creating the Lease: %v", err)
	}
	updates := 0
	client.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		updates++
		switch {
		case updates == 1: // written, then the answer is lost
			if err := client.Tracker().Update(a.GetResource(), a.(k8stesting.UpdateAction).GetObject(), "ns"); err != nil {
				t.Fatal(err)
			}
			return true, nil, errors.New("context deadline exceeded")
		case updates <= 65: // etcd out of space
			return true, nil, apierrors.NewInternalError(errors.New("etcdserver: mvcc: database space exceeded"))
		}
		return false, nil, nil
	})
	for range 65 {
		now = now.Add(renew)
		if err := renewed(m, ctx); err == nil {
			t.Fatal("a renewal succeeded while writes fail")
		}
	}
	var err error
	// Writes work again: the Lease holds a write of ours we no longer
	// remember; it stands still, so it is ours again a lease duration after
	// we first found it (a renew period later at most).
	for range int(lease/renew) + 2 {
		now = now.Add(renew)
		if err = renewed(m, ctx); err == nil {
			return
		}
	}
	t.Fatalf("writes work again, yet a's renewal fails for good: %v", err)
}

// Claims broken: "Each replica makes three requests per renew period ...:
// 90 a minute at the default 2 s, whatever happens (a failing Lease API is
// retried at the same period, never faster)", and the chaos run's bound of
// 289 requests on Leases in any minute at the default renew period
// (docs/sharding.md, What it costs).
//
// A Lease API (behind a proxy or a load balancer) that answers every
// request 503 with "Retry-After: 0": client-go retries each GET and LIST
// ten times at once (its default maxRetries; the ring sets none), so each
// round makes 22 requests instead of 2, on the real clientset with the
// app's limiter (QPS 200, burst 400). (kube-apiserver itself never sends a
// Retry-After below 1 s; with 1 s the retries fit the chaos bound.)
//
// Failure printed:
//
//	ring_adversary_test.go:270: every Lease request answered 503 Retry-After: 0:
//	66 requests in 3 rounds, 660 a minute at the default renew period 2s
//	(the docs: 90, whatever happens; the chaos bound 289)
//
// Severity: request storm (×7 the documented rate), needs a non-kube proxy.
func TestAdversaryARetryAfterZeroStormsTheLeaseAPI(t *testing.T) {
	url, requests := testkit.FailingAPI(t, http.StatusServiceUnavailable)
	client, err := NewClient(&rest.Config{Host: url, QPS: 200, Burst: 400}) // as internal/app builds the ring's client
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m, err := New(Config{Client: client, Namespace: "ns", Ring: "r", Identity: "a",
		Now:      func() time.Time { return now }, // defaults: lease 15 s, renew period 2 s
		OnClaims: func(Claims) {}, Busy: func() (_, _ shard.SlotSet) { return }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := klog.NewContext(context.Background(), klog.Background())
	const rounds = 3
	for range rounds {
		m.round(ctx, klog.Background())
		now = now.Add(DefaultRenewPeriod)
	}
	n := requests.Load()
	perMinute := n * int64(time.Minute/DefaultRenewPeriod) / rounds
	if perMinute > 289 {
		t.Fatalf("every Lease request answered 503 Retry-After: 0: %d requests in %d rounds, %d a minute at the default renew period %s (the docs: 90, whatever happens; the chaos bound 289)",
			n, rounds, perMinute, DefaultRenewPeriod)
	}
	t.Logf("%d requests in %d rounds, %d a minute", n, rounds, perMinute)
}

// Claim broken (docs/sharding.md, Membership, "Withdraw"): "A member that
// finds a slot it Works claimed, confirmed, by another live member ...
// drops it from Working at once".
//
// a Works every slot. Another live member, b (its Lease renewed every
// round), claims slot 5 confirmed: a split brain made by some wrong view.
// a's lists succeed and show it every round; only a's renewals fail (500s).
// A step whose renewal failed is not Confirmed, and Claims.Step returns
// before the withdrawal: a keeps Working slot 5 until its fence, L − R
// later, not "at once" (a split brain lasts up to 13 s at the defaults
// instead of ending at the first list that shows it).
//
// Failure printed:
//
//	ring_adversary_test.go:341: b (live) claims slot 5 confirmed, shown by 3
//	of a's lists (its renewals failing): a still Works it, 500ms before its
//	fence
//
// (With a's renewals succeeding, the same test passes: withdrawn at the
// first list.)
//
// Severity: a split brain, once made, lasts until the fence (doc wrong:
// "at once").
func TestAdversaryARivalSeenWhileRenewalsFailIsNotWithdrawn(t *testing.T) {
	client := versionedClient()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const lease, renew = 4500 * time.Millisecond, time.Second
	a := handoffMember(t, client, "a", lease, renew, func() time.Time { return now })
	ctx := klog.NewContext(context.Background(), klog.Background())
	workAlone(t, ctx, a, &now, renew)
	last := now.Add(-renew) // a's last successful renewal was sent then
	client.PrependReactor("update", "leases", func(act k8stesting.Action) (bool, runtime.Object, error) {
		if act.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease).Name == a.leaseName() {
			return true, nil, apierrors.NewInternalError(errors.New("etcdserver: request timed out"))
		}
		return false, nil, nil
	})
	id := "b"
	b := &coordinationv1.Lease{}
	b.Name, b.Namespace = "r-b", "ns"
	b.Labels = map[string]string{Label: "r"}
	b.Annotations = map[string]string{AnnotationSlots: "5", AnnotationPending: ""}
	b.Spec.HolderIdentity = &id
	for i := 1; ; i++ {
		b.ResourceVersion = fmt.Sprint("b", i) // b renews every round
		var err error
		if i == 1 {
			err = client.Tracker().Create(coordination(), b.DeepCopy(), "ns")
		} else {
			err = client.Tracker().Update(coordination(), b.DeepCopy(), "ns")
		}
		if err != nil {
			t.Fatal(err)
		}
		a.round(ctx, klog.Background())
		if !admits(a).Has(5) {
			return // withdrawn, or fenced
		}
		if i >= 3 {
			t.Fatalf("b (live) claims slot 5 confirmed, shown by %d of a's lists (its renewals failing): a still Works it, %s before its fence",
				i, last.Add(lease-renew).Sub(now))
		}
		now = now.Add(renew)
	}
}

// Claim broken (docs/sharding.md, "One identity, one process"): "A replica
// that finds its own Lease already there, renewed by someone it is not ...,
// takes it over only once it has stood still for a lease duration" — the
// second process does not take it, but when it stops (a rolling update of a
// StatefulSet-like identity, a duplicated Deployment scaled down) its
// leave deletes it: leave marks the Lease only if this process wrote it
// (wrote non-zero), and deletes it either way. The first process, which
// works every slot, finds its Lease gone at its next renewal, fences, and
// its re-created Lease claims nothing for a lease duration; the others hold
// the unmarked vanished Lease as claiming every slot meanwhile.
//
// Failure printed:
//
//	ring_adversary_test.go:390: a second process of identity x left without
//	ever working: x1, the one that works, Works 0 slots one renew period
//	later (want 256)
//
// Severity: outage (every slot of the first process unworked for over a
// lease duration; no split brain).
func TestAdversaryASecondProcessOfOneIdentityDeletesTheFirstsLeaseOnLeaving(t *testing.T) {
	client := versionedClient()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	const lease, renew = 4500 * time.Millisecond, time.Second
	x1 := handoffMember(t, client, "x", lease, renew, clock)
	x2 := handoffMember(t, client, "x", lease, renew, clock)
	ctx := klog.NewContext(context.Background(), klog.Background())
	for range joinRounds {
		x1.round(ctx, klog.Background())
		now = now.Add(renew)
	}
	for range 2 {
		x2.round(ctx, klog.Background()) // waits: the Lease is x1's, moving
		x1.round(ctx, klog.Background())
		now = now.Add(renew)
	}
	if x1.Claims().Working != shard.All() || !x2.Claims().Working.Empty() {
		t.Fatalf("x1 works %d slots, x2 %d; want 256 and 0", x1.Claims().Working.Len(), x2.Claims().Working.Len())
	}
	x2.leave(klog.Background())
	x1.round(ctx, klog.Background())
	if n := x1.Claims().Working.Len(); n != shard.Slots {
		t.Fatalf("a second process of identity x left without ever working: x1, the one that works, Works %d slots one renew period later (want %d)", n, shard.Slots)
	}
}

// Claim broken (docs/sharding.md, the fence and the bounds table): "its
// gate admits nothing more [past L − R], the gate's own clock, even if the
// fence's goroutine is late or the process was frozen", "so workers resumed
// from a pause start nothing before the fence has run".
//
// The gate's clock and the fence timer are Go's monotonic clock, which on
// Linux is CLOCK_MONOTONIC: it does not count a system suspend (S3 or
// hibernation of the node, or a guest whose clock is stopped while its VM
// is suspended; Go kept CLOCK_MONOTONIC on purpose, golang/go#24595). Here
// a's clock stands still for a suspend of three lease durations while b's
// runs (the model's clocks are skewed, never at different rates; the docs
// say drift "is not modelled", and a suspend is drift of the whole pause).
// b counts a out and Works every slot; a resumes believing 1 ms passed:
// its deadline is ahead on its own clock, its gate admits its old share at
// once, before any renewal or list (and its renewal then succeeds too: its
// Lease is still there, renewTime its own).
//
// Failure printed:
//
//	ring_adversary_test.go:448: a resumed from a 13s system suspend (its
//	monotonic clock stopped): a and b both Work 128 slots (...), and may
//	admit reconciles of 128 of them
//
// Severity: split brain, only where the monotonic clock stops during a
// pause (system suspend); SIGSTOP, cgroup freezes and CPU throttling are
// counted and fenced correctly.
func TestAdversaryASuspendedNodesMonotonicClockKeepsItsGateOpen(t *testing.T) {
	client := versionedClient()
	world := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var suspendedFor time.Duration // a's monotonic clock lags the world's by this
	const lease, renew = 4500 * time.Millisecond, time.Second
	a, err := New(Config{Client: client, Namespace: "ns", Ring: "r", Identity: "a",
		LeaseDuration: lease, RenewPeriod: renew,
		Now:      func() time.Time { return world.Add(-suspendedFor) },
		Wall:     func() time.Time { return world }, // the wall clock counts the suspend
		OnClaims: func(Claims) {}, Busy: func() (_, _ shard.SlotSet) { return }})
	if err != nil {
		t.Fatal(err)
	}
	b := handoffMember(t, client, "b", lease, renew, func() time.Time { return world })
	ctx := klog.NewContext(context.Background(), klog.Background())
	for range joinRounds + 2 {
		a.round(ctx, klog.Background())
		b.round(ctx, klog.Background())
		noSplit(t, "joining", a, b)
		world = world.Add(renew)
	}
	if a.Claims().Working.Empty() || a.Claims().Working.Len()+b.Claims().Working.Len() != shard.Slots {
		t.Fatalf("a works %d slots, b %d; want all 256 between them", a.Claims().Working.Len(), b.Claims().Working.Len())
	}
	// The node of a is suspended: the world runs on, a's clock does not.
	const suspend = 3 * lease
	for range int(suspend / renew) {
		b.round(ctx, klog.Background())
		world = world.Add(renew)
		suspendedFor += renew
	}
	if b.Claims().Working != shard.All() {
		t.Fatalf("a suspended for %s: b works %d slots, want every one", suspend, b.Claims().Working.Len())
	}
	world = world.Add(time.Millisecond) // a resumes; its workers run first
	// a still holds its Working slots (no round, no fence timer has run
	// yet): its gate's clock must admit none of them.
	if both := admits(a).And(admits(b)); !both.Empty() {
		t.Fatalf("a resumed from a %s system suspend (its monotonic clock stopped): a and b both admit reconciles in %d slots (%v)",
			suspendedFor, both.Len(), both)
	}
	a.round(ctx, klog.Background())
	noSplit(t, fmt.Sprintf("a's first round after a %s system suspend", suspendedFor), a, b)
}

// Claims broken (docs/sharding.md, Membership): "[the owner of a Lease
// deleted by hand] fences at once, and the Lease it re-creates claims
// nothing for a lease duration. So every Lease that ever claims a slot
// existed for longer than a lease duration first, and an observer whose
// lists are less than that apart has read it."
//
// Found by the ring model at seed 12463 (the model's 10,000 seeds miss
// it), replayed here on a fake clientset. c's Lease is deleted by hand
// while c's requests fail: c fences at its deadline, its claims already
// empty when its renewal finally finds the Lease gone, so renew creates
// it at once (errLeaseDeleted, and with it the quiet period, is only for
// a member whose claims are not empty), and c Works again two renew
// periods later. a's lists fail meanwhile (for less than a lease
// duration: not "blind"), so a never reads the re-created Lease; it is
// deleted by hand again, c's requests fail again, and a, which counted the
// first vanishing from long before, forgets c and takes its slots while c
// Works them until its fence.
//
// Failure printed:
//
//	ring_adversary_test.go:498: c's Lease re-created without a quiet period,
//	then deleted again: a and c both Work 128 slots (...), and may admit
//	reconciles of 128 of them
//
// Severity: split brain (two hand deletes of one Lease within seconds,
// with its owner's requests and an observer's lists failing).
func TestAdversaryALeaseRecreatedAfterItsOwnerFencedClaimsAtOnce(t *testing.T) {
	client := versionedClient()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	const lease, renew = 4500 * time.Millisecond, time.Second
	a := handoffMember(t, client, "a", lease, renew, clock)
	c := handoffMember(t, client, "c", lease, renew, clock)
	who := ""
	cFails, aListFails := false, false
	client.PrependReactor("*", "leases", func(act k8stesting.Action) (bool, runtime.Object, error) {
		if who == "c" && cFails || who == "a" && aListFails && act.GetVerb() == "list" {
			return true, nil, apierrors.NewInternalError(errors.New("etcdserver: request timed out"))
		}
		return false, nil, nil
	})
	ctx := klog.NewContext(context.Background(), klog.Background())
	const when = "c's Lease re-created without a quiet period, then deleted again"
	rounds := func(n int) {
		for range n {
			who = "a"
			a.round(ctx, klog.Background())
			noSplit(t, when, a, c)
			who = "c"
			c.round(ctx, klog.Background())
			noSplit(t, when, a, c)
			who = ""
			now = now.Add(renew)
		}
	}
	rounds(8)
	if c.Claims().Working.Empty() || a.Claims().Working.Len()+c.Claims().Working.Len() != shard.Slots {
		t.Fatalf("a works %d slots, c %d; want all 256 between them", a.Claims().Working.Len(), c.Claims().Working.Len())
	}
	// c's Lease is deleted by hand; c's requests fail until it has fenced.
	if err := client.Tracker().Delete(coordination(), "ns", c.leaseName()); err != nil {
		t.Fatal(err)
	}
	cFails = true
	rounds(4)
	if c.Claims() != (Claims{}) {
		t.Fatalf("c's requests failing for 4 s: c claims %+v, want it fenced", c.Claims())
	}
	// c's requests work again (it re-creates its Lease); a's lists fail.
	cFails, aListFails = false, true
	recreated := now
	for c.Claims().Working.Empty() && now.Sub(recreated) < lease {
		rounds(1)
	}
	t.Logf("c Works %d slots %s after re-creating its Lease (the docs: nothing for %s)", c.Claims().Working.Len(), now.Sub(recreated), lease)
	// Deleted by hand again; c's requests fail again; a's lists work.
	if err := client.Tracker().Delete(coordination(), "ns", c.leaseName()); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	cFails, aListFails = true, false
	rounds(4)
}
