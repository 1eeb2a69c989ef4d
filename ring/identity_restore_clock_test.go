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
// an input.

// Two processes never work under one identity. x1 Works every slot; x2,
// of the same identity, waits on x1's moving Lease. The Lease is deleted
// by hand while x1's Lease API fails for two renew periods (within its
// fence): x2 re-creates it, and claims nothing before x1 has fenced.
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

// A Lease restored from an etcd snapshot (a renewTime its member wrote and
// forgot) fences its owner only until it stood still a lease duration: the
// member then takes it back and works again.
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

// A write of the member's own older than the 64 attempts it keeps (a
// renewal that timed out after the server wrote it, then 64 failed
// UPDATEs) fences it only until the Lease stood still a lease duration.
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

// A Lease API answering every request 503 with "Retry-After: 0" gets no
// more requests than at the renew period: client-go's retries are off on
// the ring's client (docs/sharding.md, What it costs).
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

// A member withdraws a slot it Works at the first list that shows another
// live member claiming it confirmed, whether or not its own renewal went
// through (docs/sharding.md, Membership, "Withdraw").
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

// A second process of one identity, which never held the Lease, leaves it
// in place when it stops: the first, which works under it, keeps its
// slots.
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

// The gate admits nothing past the fence deadline even across a system
// suspend, which Go's monotonic clock does not count (golang/go#24595): a
// resumes after a suspend of three lease durations, b having taken every
// slot, and admits none of its old share (fenceClock).
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
	suspend(t, ctx, a, b, &world, &suspendedFor)
	// a still holds its Working slots (no round, no fence timer has run
	// yet): its gate's clock must admit none of them.
	if both := admits(a).And(admits(b)); !both.Empty() {
		t.Fatalf("a resumed from a %s system suspend (its monotonic clock stopped): a and b both admit reconciles in %d slots (%v)",
			suspendedFor, both.Len(), both)
	}
	a.round(ctx, klog.Background())
	noSplit(t, fmt.Sprintf("a's first round after a %s system suspend", suspendedFor), a, b)
}

// A Lease its owner re-creates after it was deleted by hand claims nothing
// for a lease duration, also when the owner had fenced (claims empty)
// before it found the Lease gone: c's Lease is deleted twice while its
// requests and a's lists fail, and a and c never Work one slot.
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

// A leave whose mark fails deletes nothing: x2 adopted the Lease after
// x1 fenced, and x1's leave (its mark's GET refused) must not delete the
// Lease x2 holds and renews.
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

// A re-create whose answer is lost is the member's own write (tried): a
// finds the Lease it created and renews it, its quiet lease duration
// counted from the create, and Works every slot within L + 3R.
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

// A Lease is adopted only after it stood still a lease duration of
// consecutive reads: a record seen again after a gap (an etcd restore
// brings back one seen long before) starts the count anew, so x1 does not
// adopt the Lease x2 still works under.
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

// A member whose create landed with its answer lost holds its Lease (its
// attempt is on it): its leave marks the Lease and deletes it.
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

// A system suspend ends in a blind stretch: a member suspended three lease
// durations (its monotonic clock stopped) claims no free slot for a lease
// duration after it resumes, so d, whose Lease a never read, works its
// slots to its fence alone.
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
		Now: func() time.Time { return *mono }, Wall: wall, Boot: func() time.Time { return *mono },
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

// A wall clock flapping back and forth counts its largest step once: the
// fence's clock does not run ahead however often the gate reads it, and a
// healthy member does not fence itself.
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

// A wall clock stepped back, then put right, counts nothing: the fence's
// clock counts the most the wall clock ran ahead of the monotonic one, and
// a healthy member does not fence itself.
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

// A Lease whose ring label was taken off by hand gets it back at its
// owner's next renewal: the owner fences once, then works again.
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
// *world by *lag (a system suspend stops it) while its wall and boot clocks
// keep the world's (they count the suspend), and member other, on the
// world's clock.
func suspendable(t *testing.T, client *fake.Clientset, world *time.Time, lag *time.Duration, other string) (a, o *Member) {
	t.Helper()
	a, err := New(Config{Client: client, Namespace: "ns", Ring: "r", Identity: "a",
		LeaseDuration: lease, RenewPeriod: renew,
		Now:      func() time.Time { return world.Add(-*lag) },
		Wall:     func() time.Time { return *world },
		Boot:     func() time.Time { return *world },
		OnClaims: func(Claims) {}, Busy: func() (_, _ shard.SlotSet) { return }})
	if err != nil {
		t.Fatal(err)
	}
	return a, handoffMember(t, client, other, lease, renew, func() time.Time { return *world })
}

// suspend runs b alone for three lease durations while a's node is
// suspended (a's monotonic clock, *lag behind the world, stands still),
// checks that b took every slot, and resumes a a millisecond later, before
// any round of it.
func suspend(t *testing.T, ctx context.Context, a, b *Member, world *time.Time, lag *time.Duration) {
	t.Helper()
	const d = 3 * lease
	for range int(d / renew) {
		b.round(ctx, klog.Background())
		*world = world.Add(renew)
		*lag += renew
	}
	if b.Claims().Working != shard.All() {
		t.Fatalf("a suspended for %s: b works %d slots, want every one", d, b.Claims().Working.Len())
	}
	*world = world.Add(time.Millisecond) // a resumes; its workers run first
}
