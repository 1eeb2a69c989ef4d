package ring

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"

	"rawwatch/internal/testkit"
	"rawwatch/observe"
	"rawwatch/shard"
)

// One identity in two processes, Leases restored or deleted by hand, clocks
// that step or stop: each test holds a claim of docs/sharding.md under such
// an input; those that call openfinding.Skip still fail (open findings).

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
func TestASecondProcessRecreatingAHandDeletedLeaseDoesNotWorkAtOnce(t *testing.T) {
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
func TestALeaseRestoredFromAnEtcdSnapshotDoesNotFenceItsOwnerForGood(t *testing.T) {
	client := versionedClient()
	now := epoch
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
func TestAnOwnWriteOlderThanSixtyFourAttemptsDoesNotFenceForGood(t *testing.T) {
	client := versionedClient()
	now := epoch
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
func TestARetryAfterZeroDoesNotStormTheLeaseAPI(t *testing.T) {
	url, requests := testkit.FailingAPI(t, http.StatusServiceUnavailable)
	client, err := NewClient(&rest.Config{Host: url, QPS: 200, Burst: 400}) // as app builds the ring's client
	if err != nil {
		t.Fatal(err)
	}
	now := epoch
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
func TestARivalSeenWhileRenewalsFailIsWithdrawn(t *testing.T) {
	client := versionedClient()
	now := epoch
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
func TestASecondProcessOfOneIdentityDoesNotDeleteTheFirstsLeaseOnLeaving(t *testing.T) {
	now := epoch
	_, x1, x2 := pair(t, &now, "x", "x")
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
func TestASuspendedNodesMonotonicClockDoesNotKeepItsGateOpen(t *testing.T) {
	client := versionedClient()
	world := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var suspendedFor time.Duration // a's monotonic clock lags the world's by this
	a, b := suspendable(t, client, &world, &suspendedFor, "b")
	ctx := klog.NewContext(context.Background(), klog.Background())
	for range joinRounds + 2 {
		a.round(ctx, klog.Background())
		b.round(ctx, klog.Background())
		noSplit(t, "joining", a, b)
		world = world.Add(renew)
	}
	divided(t, b, a)
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
func TestALeaseRecreatedAfterItsOwnerFencedDoesNotClaimAtOnce(t *testing.T) {
	now := epoch
	client, a, c := pair(t, &now, "a", "c")
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
	divided(t, a, c)
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

// From the second adversarial review of the ring: each test failed on the
// code it reviewed, and holds the fix made since.

// Claim broken (ring.go, leave: "Only a Lease this process holds is marked
// and deleted: one it never wrote, or one renewed behind its back, is
// another process's (of the same identity), which works under it"; commit
// 2c4b65f: "a second process of one identity, which never held the Lease,
// no longer deletes the first's on leaving").
//
// x1 Works every slot; x2, a second process with identity x, waits. x1's
// Lease API fails for longer than a lease duration: x1 fences, the Lease
// stands still, and x2 adopts it (f996d50) and Works every slot. x1 is
// then stopped. Its leave's mark fails with an error that is not
// errForeignWriter (its GET answered 500: x1's API trouble has not quite
// ended) and the leave then deletes the Lease with no precondition at all:
// the Lease x2 holds and renews. x2's next renewal finds it gone
// (errLeaseDeleted): x2 drops every slot and stays quiet for a lease
// duration after its re-create; the others count the unmarked vanished
// Lease live for a lease duration, claiming every slot.
//
// Failure printed:
//
//	adv2_test.go:96: x1, fenced and adopted by x2, left with its mark's GET
//	refused: x2 admits 0 slots one renew period later (want 256; its Lease
//	exists: false)
//
// Severity: outage (every slot of identity x unworked for over a lease
// duration; needs a duplicated identity, which the docs promise to
// survive, and one failed request in the leave).
func TestALeaveWhoseMarkFailsDoesNotDeleteTheLeaseAnotherProcessHolds(t *testing.T) {
	w := twoOfOneIdentity(t)
	x1, x2 := w.x1, w.x2
	for range 2 {
		x2.round(w.ctx, klog.Background()) // waits: x1 renews the Lease
		w.roundX1()
		w.tick()
	}
	if x1.Claims().Working != shard.All() || !x2.Claims().Working.Empty() {
		t.Fatalf("x1 works %d slots, x2 %d; want 256 and 0", x1.Claims().Working.Len(), x2.Claims().Working.Len())
	}
	// x1's Lease API fails: x1 fences, x2 adopts the Lease once it stood
	// still for a lease duration, and claims every slot.
	w.x1Fails = func(string) bool { return true }
	for range 12 {
		w.roundX1()
		x2.round(w.ctx, klog.Background())
		noSplit(t, "x1 cut off, x2 adopting", x1, x2)
		w.tick()
	}
	if x2.Claims().Working != shard.All() || !x1.Claims().Working.Empty() {
		t.Fatalf("x1 cut off for 12 renew periods: x1 works %d slots, x2 %d; want 0 and 256", x1.Claims().Working.Len(), x2.Claims().Working.Len())
	}
	// x1 is stopped; only its mark's GET fails now.
	w.x1Fails = func(verb string) bool { return verb == "get" }
	w.inX1 = true
	x1.leave(klog.Background())
	w.inX1 = false
	w.tick()
	x2.round(w.ctx, klog.Background())
	if n := admits(x2).Len(); n != shard.Slots {
		t.Fatalf("x1, fenced and adopted by x2, left with its mark's GET refused: x2 admits %d slots one renew period later (want %d; its Lease exists: %v)", n, shard.Slots, leaseExists(w.client, x2))
	}
}

// oneIdentity is two processes of identity x on one fake clientset and
// one clock (lease 4.5 s, renew period 1 s): x1 works every slot alone, x2
// has not started; x1's requests fail while x1Fails says so of their verb.
type oneIdentity struct {
	client  *fake.Clientset
	now     time.Time
	x1, x2  *Member
	ctx     context.Context
	inX1    bool
	x1Fails func(verb string) bool
}

const oneIdentityRenew = time.Second

func twoOfOneIdentity(t *testing.T) *oneIdentity {
	w := &oneIdentity{client: versionedClient(), now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		ctx: klog.NewContext(context.Background(), klog.Background()), x1Fails: func(string) bool { return false }}
	clock := func() time.Time { return w.now }
	w.x1 = handoffMember(t, w.client, "x", 4500*time.Millisecond, oneIdentityRenew, clock)
	w.x2 = handoffMember(t, w.client, "x", 4500*time.Millisecond, oneIdentityRenew, clock)
	w.client.PrependReactor("*", "leases", func(act k8stesting.Action) (bool, runtime.Object, error) {
		if w.inX1 && w.x1Fails(act.GetVerb()) {
			return true, nil, apierrors.NewInternalError(errors.New("etcdserver: request timed out"))
		}
		return false, nil, nil
	})
	for range joinRounds {
		w.roundX1()
		w.tick()
	}
	if w.x1.Claims().Working != shard.All() {
		t.Fatalf("alone, x1 works %v, want every slot", w.x1.Claims().Working)
	}
	return w
}

// roundX1 is a round of x1's, its requests failing as x1Fails says.
func (w *oneIdentity) roundX1() { w.inX1 = true; w.x1.round(w.ctx, klog.Background()); w.inX1 = false }

// tick moves the clock a renew period on.
func (w *oneIdentity) tick() { w.now = w.now.Add(oneIdentityRenew) }

func leaseExists(client interface {
	Tracker() k8stesting.ObjectTracker
}, m *Member) bool {
	_, err := client.Tracker().Get(coordination(), "ns", m.leaseName())
	return err == nil
}

// Claim broken (ring.go, try: "Every attempt since the last success
// counts: under load, one times out after the server wrote it ... (Only the
// last counted once: a member then took its own earlier write for another
// process's ...)"; and 3e3be83: "the re-created Lease's quiet lease
// duration counts from the re-create that succeeded").
//
// a's Lease is deleted by hand; a finds out (errLeaseDeleted) and
// re-creates it at its next turn. The create lands, but its answer is lost
// (a timeout under load). At the next turn a's GET finds the Lease, and as
// wrote is zero it takes the branch for a Lease "not written by us" — it
// never consults tried, which holds this very create's renewTime — and
// waits a lease duration for its own Lease to stand still
// (errForeignWriter), then adopts it, and only then starts the quiet lease
// duration (wroteLease). a claims nothing for two lease durations and more
// after its own create landed, instead of one. (With a second member the
// Lease standing still makes it count a dead and take its slots, then hand
// them back: two handoffs for nothing.)
//
// Failure printed:
//
//	adv2_test.go:185: a ring of one whose re-create landed with its answer
//	lost: a Works 0 slots 7s after the create landed (L + 3R), not renewing its own Lease (taken for another process's) at [0s
//	1s 2s 3s 4s 5s] after; want every slot
//
// (With the create's answer received, the same test passes: a Works every
// slot within L + 3R.)
//
// Severity: outage (the member's slots, an extra lease duration and a
// renew period; a ring of one: every slot).
func TestAReCreateWhoseAnswerIsLostIsNotTakenForAnotherProcesss(t *testing.T) {
	client := versionedClient()
	now := epoch
	clock := func() time.Time { return now }
	a := handoffMember(t, client, "a", lease, renew, clock)
	ctx := klog.NewContext(context.Background(), klog.Background())
	workAlone(t, ctx, a, &now, renew)
	if err := client.Tracker().Delete(coordination(), "ns", a.leaseName()); err != nil {
		t.Fatal(err)
	}
	a.round(ctx, klog.Background()) // errLeaseDeleted: out now
	now = now.Add(renew)
	created := loseTheNextCreatesAnswer(t, client)
	landed := now
	var waited []time.Duration
	for now.Sub(landed) <= lease+3*renew {
		a.round(ctx, klog.Background())
		if a.wrote.IsZero() {
			waited = append(waited, now.Sub(landed))
		}
		now = now.Add(renew)
	}
	if !created() {
		t.Fatal("the re-create never came")
	}
	if n := a.Claims().Working.Len(); n != shard.Slots {
		t.Fatalf("a ring of one whose re-create landed with its answer lost: a Works %d slots %s after the create landed (L + 3R), not renewing its own Lease (taken for another process's) at %v after; want every slot", n, now.Sub(landed)-renew, waited)
	}
}

// Claim broken (ring.go renew, f996d50: "a second process with our
// identity, which keeps renewing, still never is [adopted]"; the code
// comment: "another process keeps renewing it; a stale write of ours stands
// still, and is ours again then"; docs/sharding.md: "two processes never
// work under one identity").
//
// found is kept by resourceVersion and never reset: a resourceVersion seen
// again counts as standing still since it was first seen. An etcd restore
// from a snapshot (without --bump-revision) brings resourceVersions back.
// x1 Works; its API fails past a lease duration; x2, a second process of
// identity x, adopts the Lease and Works every slot. x1 is back for one
// renewal, which finds x2's write (found: that resourceVersion, then);
// x1's API fails again while x2 renews on for 6 renew periods. etcd is
// restored from a snapshot taken at x1's look: the Lease is back at the
// resourceVersion x1 found. x1's next renewal takes it as having stood
// still for 7 s and adopts it at once; x2's requests fail meanwhile (the
// restore), so it Works on until its fence — and x1 confirms every slot
// within two renew periods. (The control, a restore to the resourceVersion
// x2 wrote a renew period later, which x1 never saw: x1 waits a lease
// duration, by when x2 has fenced; no split.)
//
// Failure printed:
//
//	adv2_test.go:246: etcd restored to the resourceVersion x1 found 7s
//	before: x and x both Work 256 slots (0-255), and may admit reconciles
//	of 256 of them
//
// Severity: split brain (needs a duplicated identity, an etcd restore that
// reuses resourceVersions, and the working process's requests failing
// right after it: rare).
func TestAResourceVersionSeenAgainAfterARestoreIsNotAdoptedAtOnce(t *testing.T) {
	// The control: restored to the resourceVersion x2 wrote just after
	// (x1 never saw it), x1 waits a lease duration, and x2 has fenced by
	// then.
	t.Run("control", func(t *testing.T) { restoredAfterFound(t, false) })
	restoredAfterFound(t, true)
}

func restoredAfterFound(t *testing.T, seen bool) {
	now := epoch
	client, x1, x2 := pair(t, &now, "x", "x")
	var in *Member
	failing := map[*Member]bool{}
	client.PrependReactor("*", "leases", func(act k8stesting.Action) (bool, runtime.Object, error) {
		if in != nil && failing[in] {
			return true, nil, apierrors.NewInternalError(errors.New("etcdserver: request timed out"))
		}
		return false, nil, nil
	})
	ctx := klog.NewContext(context.Background(), klog.Background())
	round := func(m *Member) { in = m; m.round(ctx, klog.Background()); in = nil }
	rounds := func(n int, when string) {
		for range n {
			round(x1)
			round(x2)
			noSplit(t, when, x1, x2)
			now = now.Add(renew)
		}
	}
	for range joinRounds {
		round(x1)
		now = now.Add(renew)
	}
	rounds(2, "x2 waiting")
	failing[x1] = true
	rounds(12, "x1 cut off, x2 adopting")
	if x2.Claims().Working != shard.All() || !x1.Claims().Working.Empty() {
		t.Fatalf("x1 cut off for 12 renew periods: x1 works %d slots, x2 %d; want 0 and 256", x1.Claims().Working.Len(), x2.Claims().Working.Len())
	}
	failing[x1] = false
	round(x1) // finds x2's write: found
	if !seen {
		round(x2)
		now = now.Add(renew)
	}
	snapshot, err := client.Tracker().Get(coordination(), "ns", x1.leaseName())
	if err != nil {
		t.Fatal(err)
	}
	snapshot = snapshot.DeepCopyObject()
	foundAt := now
	rv := snapshot.(*coordinationv1.Lease).ResourceVersion
	round(x2)
	now = now.Add(renew)
	failing[x1] = true
	rounds(6, "x1 cut off again")
	// etcd restored from the snapshot; x2's requests fail, x1's are back.
	if err := client.Tracker().Update(coordination(), snapshot, "ns"); err != nil {
		t.Fatal(err)
	}
	if l, _ := client.Tracker().Get(coordination(), "ns", x1.leaseName()); l.(*coordinationv1.Lease).ResourceVersion != rv {
		t.Fatalf("the restore did not bring resourceVersion %s back", rv)
	}
	failing[x1], failing[x2] = false, true
	restored := now
	rounds(map[bool]int{true: 3, false: 8}[seen], "etcd restored to the resourceVersion x1 found "+restored.Sub(foundAt).String()+" before")
}

// Claim broken (ring.go, leave: "Only a Lease this process holds is marked
// and deleted: one it never wrote, or one renewed behind its back, is
// another process's (of the same identity)"; the log line "Leaving the
// ring's Lease in place: this process never held it"; docs/sharding.md: a
// clean leave is out "at the next list after the mark").
//
// The same root as TestAReCreateWhoseAnswerIsLostIsNotTakenForAnotherProcesss:
// "wrote" is the only record of holding the Lease. A member whose create
// landed with its answer lost (a timeout under load) and that is stopped
// before its next successful renewal leaves its own Lease in place,
// unmarked: the others count it live, its share theirs to give it and
// nobody's to work, until it has stood still for a lease duration.
//
// Failure printed:
//
//	adv2_test.go:371: a member whose create landed with its answer lost
//	left: its Lease is still there, not marked leaving; want it marked and
//	deleted
//
// Severity: outage (the member's share, a lease duration after a leave
// that should have ended it at once).
func TestALeaveAfterACreateWhoseAnswerIsLostMarksItsLease(t *testing.T) {
	client := versionedClient()
	now := epoch
	a := handoffMember(t, client, "a", 4500*time.Millisecond, time.Second, func() time.Time { return now })
	created := loseTheNextCreatesAnswer(t, client)
	a.round(klog.NewContext(context.Background(), klog.Background()), klog.Background())
	if !created() || !leaseExists(client, a) {
		t.Fatal("the create did not land")
	}
	a.leave(klog.Background())
	if l, err := client.Tracker().Get(coordination(), "ns", a.leaseName()); err == nil {
		if _, marked := l.(*coordinationv1.Lease).Annotations[AnnotationLeaving]; !marked {
			t.Fatalf("a member whose create landed with its answer lost left: its Lease is still there, not marked leaving; want it marked and deleted")
		}
	}
}

// loseTheNextCreatesAnswer makes the next create of a Lease land while its
// client sees a timeout; landed tells whether it has.
func loseTheNextCreatesAnswer(t *testing.T, client *fake.Clientset) (landed func() bool) {
	lost := false
	client.PrependReactor("create", "leases", func(act k8stesting.Action) (bool, runtime.Object, error) {
		if lost {
			return false, nil, nil
		}
		lost = true
		obj := act.(k8stesting.CreateAction).GetObject().DeepCopyObject().(*coordinationv1.Lease)
		obj.ResourceVersion = "1000"
		if err := client.Tracker().Create(coordination(), obj, "ns"); err != nil {
			t.Fatal(err)
		}
		return true, nil, context.DeadlineExceeded // landed; the client timed out
	})
	return func() bool { return lost }
}

// Leases never read and the fence's clock (unseenUntil, a suspend, a wall
// clock stepped).

// Claim broken (docs/sharding.md, Membership, "A Lease never read"): "for a
// lease duration after its first successful list, after a list that ends a
// blind stretch, and after the first write of its own Lease, a member claims
// no free slot". A blind stretch is measured on the monotonic clock
// (sight: now.Sub(prev) >= lease, now from Config.Now), which a system
// suspend stops: a member suspended for three lease durations was blind all
// that while, but its first list after the resume is a few milliseconds
// after its last one before, so the code does not notice. Its fence counts
// the suspend (fenceClock), so it fences and comes back, and claims the
// free slots at once.
//
// a Works every slot; its node is suspended for 3 L. d joins meanwhile
// (a's Lease stands still: d counts a out and Works every slot), then d's
// Lease is deleted by hand and d's requests time out: d Works on to its
// fence (L − R after its last renewal). a resumes: its list shows no d (it
// never read d's Lease), no blind stretch on its monotonic clock, so no
// unseenUntil: it claims every slot and Works them while d still does.
//
// Failure printed:
//
//	ring_adversary_test.go:961: a resumed from a 13s suspend, d's Lease
//	deleted by hand before: a and d both Work 256 slots (0-255), and may
//	admit reconciles of 256 of them
//
// The same schedule with a's monotonic clock running through the pause
// (SIGSTOP, not a suspend) holds: a's first list ends a blind stretch.
//
// Severity: split brain (a system suspend of a member longer than a lease
// duration, a joiner during it, a hand delete of the joiner's Lease with its
// requests failing).
//
// The rule: the fence's clock counts the most the wall clock ran ahead
// of the monotonic one, and a blind stretch is measured on it.
func TestASuspendIsNoticedAsABlindStretch(t *testing.T) {
	client := versionedClient()
	world := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var suspendedFor time.Duration // a's monotonic clock lags the world's by this
	a, d := suspendable(t, client, &world, &suspendedFor, "d")
	who, dFails := "", false
	client.PrependReactor("*", "leases", func(act k8stesting.Action) (bool, runtime.Object, error) {
		if who == "d" && dFails {
			return true, nil, apierrors.NewTimeoutError("request timed out", 1)
		}
		return false, nil, nil
	})
	ctx := klog.NewContext(context.Background(), klog.Background())
	workAlone(t, ctx, a, &world, renew)
	// a's node is suspended; d joins.
	const suspend = 3 * lease
	for range int(suspend / renew) {
		who = "d"
		d.round(ctx, klog.Background())
		who = ""
		world = world.Add(renew)
		suspendedFor += renew
	}
	if d.Claims().Working != shard.All() {
		t.Fatalf("a suspended for %s: d works %d slots, want every one", suspend, d.Claims().Working.Len())
	}
	// d's Lease is deleted by hand; d's requests time out from now on.
	if err := client.Tracker().Delete(coordination(), "ns", d.leaseName()); err != nil {
		t.Fatal(err)
	}
	dFails = true
	world = world.Add(time.Millisecond) // a resumes
	when := fmt.Sprintf("a resumed from a %s suspend, d's Lease deleted by hand before", suspendedFor)
	for range 4 {
		a.round(ctx, klog.Background())
		noSplit(t, when, a, d)
		who = "d"
		d.round(ctx, klog.Background())
		who = ""
		noSplit(t, when, a, d)
		world = world.Add(renew)
	}
}

// wallMember is a lone member whose fence reads wall beside its monotonic
// clock (*mono), Working every slot once workAlone returns; fences counts
// the times it fenced itself.
func wallMember(t *testing.T, ctx context.Context, mono *time.Time, wall func() time.Time, fences *int) *Member {
	t.Helper()
	const lease, renew = 4500 * time.Millisecond, time.Second
	m, err := New(Config{Client: versionedClient(), Namespace: "ns", Ring: "r", Identity: "a",
		LeaseDuration: lease, RenewPeriod: renew,
		Now: func() time.Time { return *mono }, Wall: wall,
		OnClaims: func(Claims) {}, Busy: func() (_, _ shard.SlotSet) { return },
		Observer: observe.Func(func(e observe.Event) {
			if c, ok := e.(ClaimsChanged); ok && c.Fenced {
				*fences++
			}
		})})
	if err != nil {
		t.Fatal(err)
	}
	workAlone(t, ctx, m, mono, renew)
	return m
}

// Claim broken (docs/sharding.md, The fence's clock counts a suspend): "a
// wall clock stepped back counts nothing (the monotonic clock's advance
// stands); one stepped forward fences the member early — safe: it fences,
// and is back at its next renewal and list". The fence's clock adds, at
// every reading, the larger of the two advances since the previous one, so
// a wall clock that steps back and forth counts every forward step and none
// of the backward ones: it runs ahead of both clocks without bound, by the
// amplitude times half the number of readings. The gate reads it once per
// reconcile it admits (Admits), so the busier the member, the faster its
// fence runs. A wall clock flapping by 20 ms (two time sources fighting
// over it, each stepping it back to its own: ntpd and a hypervisor's time
// sync), read 500 times a second by the gate, runs a healthy lone member's
// fence clock 6 times faster than time: it fences itself every round.
//
// Failure printed:
//
//	ring_adversary_test.go:1046: a wall clock flapping 20ms back and forth,
//	the gate reading it 500 times a renew period: over 30 renew periods a
//	healthy lone member fenced itself 29 times, and Works 0 slots at the
//	end (its fence clock ran 2m31.8s ahead of its monotonic clock)
//
// Severity: outage (a member whose wall clock flaps works none of its
// slots, or works them in bursts between fences, each fence cancelling its
// reconciles in flight: a storm of fences, one a round). Not from time.Now
// alone: Config.Wall unset, the wall reading is time.Now's own, read a few
// nanoseconds before its monotonic one, so the phantom time is only the
// sum of the preemptions that land between the two (negligible).
//
// The rule: the fence's clock counts the most the wall clock ran ahead
// of the monotonic one, and a blind stretch is measured on it.
func TestAWallClockSteppedBackAndForthDoesNotRunTheFenceAhead(t *testing.T) {
	ctx := klog.NewContext(context.Background(), klog.Background())
	mono := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const amplitude, gateReads = 20 * time.Millisecond, 500
	flapping, ahead := false, false
	fences := 0
	m := wallMember(t, ctx, &mono, func() time.Time {
		if flapping {
			ahead = !ahead
		}
		if ahead {
			return mono.Add(amplitude)
		}
		return mono
	}, &fences)
	fences, flapping = 0, true
	start, startMono := m.Now(), mono
	const rounds = 30
	for range rounds {
		m.round(ctx, klog.Background())
		for i := range gateReads { // the gate, admitting reconciles over the renew period
			mono = mono.Add(time.Second / gateReads)
			Admits(m.Claims(), time.Time{}, m.Now(), i%shard.Slots, false)
		}
	}
	if fences > 0 || m.Claims().Working != shard.All() {
		t.Fatalf("a wall clock flapping %s back and forth, the gate reading it %d times a renew period: over %d renew periods a healthy lone member fenced itself %d times, and Works %d slots at the end (its fence clock ran %s ahead of its monotonic clock)",
			amplitude, gateReads, rounds, fences, m.Claims().Working.Len(), m.Now().Sub(start)-mono.Sub(startMono))
	}
}

// Claim broken (the same): "a wall clock stepped back counts nothing". It
// counts nothing when stepped back, but the step forward that corrects it
// (the operator, or NTP, putting it right) counts in full, though the wall
// clock is then exactly where it would have been: net, no step at all, and
// the fence's clock is an hour ahead. A healthy member fences itself.
//
// Failure printed:
//
//	ring_adversary_test.go:1086: the wall clock stepped back 1h0m0s and put
//	right 3 renew periods later: a healthy lone member fenced itself 1
//	times (its fence clock 1h0m0s ahead of its monotonic clock)
//
// Severity: outage (one fence of a healthy member per correction: its
// slots unworked for two renew periods or so, its reconciles in flight
// cancelled).
//
// The rule: the fence's clock counts the most the wall clock ran ahead
// of the monotonic one, and a blind stretch is measured on it.
func TestAWallClockPutRightAfterASteppedBackDoesNotFenceAHealthyMember(t *testing.T) {
	ctx := klog.NewContext(context.Background(), klog.Background())
	mono := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var offset time.Duration // the wall clock's step
	fences := 0
	m := wallMember(t, ctx, &mono, func() time.Time { return mono.Add(offset) }, &fences)
	fences = 0
	start, startMono := m.Now(), mono
	for i := range 8 {
		switch i {
		case 2:
			offset = -time.Hour // stepped back
		case 5:
			offset = 0 // put right
		}
		m.round(ctx, klog.Background())
		mono = mono.Add(time.Second)
	}
	if ahead := m.Now().Sub(start) - mono.Sub(startMono); fences > 0 || ahead > time.Second {
		t.Fatalf("the wall clock stepped back %s and put right 3 renew periods later: a healthy lone member fenced itself %d times (its fence clock %s ahead of its monotonic clock)",
			time.Hour, fences, ahead)
	}
}

// Claim broken (docs/sharding.md, Membership: "[a Lease deleted by hand:]
// its owner ... fences at once, re-creates it at its next renewal ... and
// the re-created Lease claims nothing for a lease duration"): the owner
// recovers from a hand edit of its Lease. A hand edit that removes the
// ring's label (kubectl label lease r-a rawwatch.example.com/ring-) takes
// the Lease out of every list, its owner's included, while the Lease is
// still there by name: the owner's list does not show it, so it takes it
// for deleted (afterLook: lostLease) and fences; its renewal then finds it
// by name, renews it, and writes back the labels as read, without the
// ring's. Every round the same: the member never claims a slot again, and
// nothing in the log says why beyond a fence a round.
//
// Failure printed:
//
//	ring_adversary_test.go:1135: the ring's label removed by hand from a's
//	Lease: 30 renew periods later a Works 0 slots (its Lease's labels: map[])
//
// Severity: outage (a member works nothing until its Lease is deleted or
// relabelled by hand; the others take its slots after a lease duration).
//
// The rule: a renewal writes the ring's label back.
func TestALeaseUnlabelledByHandDoesNotFenceItsOwnerForGood(t *testing.T) {
	client := versionedClient()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const renew = time.Second
	a := handoffMember(t, client, "a", 4500*time.Millisecond, renew, func() time.Time { return now })
	ctx := klog.NewContext(context.Background(), klog.Background())
	workAlone(t, ctx, a, &now, renew)
	leases := client.CoordinationV1().Leases("ns")
	l, err := leases.Get(ctx, a.leaseName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	delete(l.Labels, Label)
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	const rounds = 30
	for range rounds {
		a.round(ctx, klog.Background())
		now = now.Add(renew)
	}
	if a.Claims().Working != shard.All() {
		l, _ := leases.Get(ctx, a.leaseName(), metav1.GetOptions{})
		t.Fatalf("the ring's label removed by hand from a's Lease: %d renew periods later a Works %d slots (its Lease's labels: %v)",
			rounds, a.Claims().Working.Len(), l.Labels)
	}
}

// suspendable is member a of client's ring, whose monotonic clock lags
// *world by *lag (a system suspend stops it) while its wall clock keeps the
// world's (it counts the suspend), and member other, on the world's clock.
func suspendable(t *testing.T, client *fake.Clientset, world *time.Time, lag *time.Duration, other string) (a, o *Member) {
	t.Helper()
	a, err := New(Config{Client: client, Namespace: "ns", Ring: "r", Identity: "a",
		LeaseDuration: lease, RenewPeriod: renew,
		Now:      func() time.Time { return world.Add(-*lag) },
		Wall:     func() time.Time { return *world },
		OnClaims: func(Claims) {}, Busy: func() (_, _ shard.SlotSet) { return }})
	if err != nil {
		t.Fatal(err)
	}
	return a, handoffMember(t, client, other, lease, renew, func() time.Time { return *world })
}
