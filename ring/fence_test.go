package ring

import (
	"context"
	"errors"
	goruntime "runtime"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"
	testclock "k8s.io/utils/clock/testing"

	"rawwatch/shard"
)

// The four findings of "trust the scale-out" (findings 1–4), each on a fake
// clientset with an injected clock: a member resumed past its fence, a
// Lease deleted by hand, requests that hang, and a joiner whose clock is
// ahead. Each fails on the code before it (quoted in the commit).

// The clocked tests' ring: lease duration and renew period (a member
// fences itself lease−renew = 3.5 s after its last renewal), and the
// instant their clocks start at.
const lease, renew = 4500 * time.Millisecond, time.Second

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// handoffMember is a member with the handoff on and nothing ever busy; no
// sweeps (a slot is let go as soon as it is released).
func handoffMember(t *testing.T, client *fake.Clientset, id string, lease, renew time.Duration, now func() time.Time) *Member {
	t.Helper()
	m, err := New(Config{Client: client, Namespace: "ns", Ring: "r", Identity: id,
		LeaseDuration: lease, RenewPeriod: renew, Now: now,
		OnClaims: func(Claims) {}, Busy: func() (_, _ shard.SlotSet) { return }})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// coveringMember is a member (lease 10 s, renew 1 s, on clock) whose cache
// covers what it watches at once (what only lingers is not published), whose
// every sweep asked for is done at once, at 100, the slots empty, and which
// holds deletions of the slots held gives (nil: none).
func coveringMember(t *testing.T, client *fake.Clientset, id string, clock func() time.Time, held func() shard.SlotSet) *Member {
	t.Helper()
	var m *Member
	m, err := New(Config{Client: client, Namespace: "ns", Ring: "r", Identity: id,
		LeaseDuration: 10 * time.Second, RenewPeriod: time.Second, Now: clock,
		OnClaims: func(Claims) {}, Busy: func() (_, _ shard.SlotSet) { return }, Held: held,
		Covers: func() Cover {
			c := m.Claims()
			return Cover{Slots: c.Watched().Minus(c.Lingering), Since: 50, Synced: 200}
		},
		Swept: func() Sweeps {
			w := Sweeps{Slots: m.Claims().Sweep}
			for _, i := range w.Slots.List() {
				w.At[i] = 100
			}
			return w
		}})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// stepMember moves *now on 100 ms and runs one round of m by hand: its
// renewal, its list, and what it makes of them.
func stepMember(ctx context.Context, m *Member, now *time.Time) {
	*now = now.Add(100 * time.Millisecond)
	renewErr := renewed(m, ctx)
	m.lookOK = m.look(ctx) == nil
	if m.lookOK {
		m.looks++
	}
	m.confirmed = renewErr == nil && m.lookOK && m.ownSeen
	m.update(klog.Background())
}

// pair is two members of a ring on a fresh fake client, of the clocked
// tests' lease and renew period, both on the clock *now.
func pair(t *testing.T, now *time.Time, id1, id2 string) (client *fake.Clientset, m1, m2 *Member) {
	client = versionedClient()
	clock := func() time.Time { return *now }
	return client, handoffMember(t, client, id1, lease, renew, clock), handoffMember(t, client, id2, lease, renew, clock)
}

// joinRounds: a lone member, lease 4.5 renew periods, Works every slot
// after this many rounds a renew period apart: its first write and list,
// then a lease duration claiming no free slot (a Lease it never read may
// be working: unseenUntil), a claim, and the list that confirms it.
const joinRounds = 8

// workAlone runs m's rounds alone, its clock (*now) a renew period later
// after each, as many as joinRounds takes at m's lease and renew period,
// and fails the test unless m then Works every slot.
func workAlone(t *testing.T, ctx context.Context, m *Member, now *time.Time, renew time.Duration) {
	t.Helper()
	for range int(m.cfg.LeaseDuration/renew) + 4 {
		m.round(ctx, klog.Background())
		*now = now.Add(renew)
	}
	if m.Claims().Working != shard.All() {
		t.Fatalf("alone, %s works %v, want every slot", m.cfg.Identity, m.Claims().Working)
	}
}

// admits is what m's gate may let in now: its Working slots, before its
// fence deadline (the gate reads the same deadline, OnDeadline).
func admits(m *Member) shard.SlotSet {
	m.mu.Lock()
	defer m.mu.Unlock()
	if fenced(m.renewed, m.Now(), m.fenceAfter()) {
		return shard.SlotSet{}
	}
	return m.claims.Working
}

// noSplit fails the test if two of ms Work one slot while either may admit
// a reconcile of it.
func noSplit(t *testing.T, when string, ms ...*Member) {
	t.Helper()
	for i, a := range ms {
		for _, b := range ms[i+1:] {
			both := a.Claims().Working.And(b.Claims().Working)
			if both.Empty() {
				continue
			}
			if open := admits(a).Union(admits(b)).And(both); !open.Empty() {
				t.Fatalf("%s: %s and %s both Work %d slots (%v), and may admit reconciles of %d of them",
					when, a.cfg.Identity, b.cfg.Identity, both.Len(), both, open.Len())
			}
		}
	}
}

// divided fails t unless a and b Work every slot between them, b some.
func divided(t *testing.T, a, b *Member) {
	t.Helper()
	wa, wb := a.Claims().Working, b.Claims().Working
	if wb.Empty() || wa.Len()+wb.Len() != shard.Slots {
		t.Fatalf("%s works %d slots, %s %d; want all %d between them", a.cfg.Identity, wa.Len(), b.cfg.Identity, wb.Len(), shard.Slots)
	}
}

// Finding 1. A member frozen past its lease (SIGSTOP, a VM paused, a GC
// storm) resumes with its fence timer and its ticker both ready; Run's
// select picked one at random, and on the tick the renewal succeeded and the
// member kept Working the slots the others had taken meanwhile. Now a
// member past its fence fences before it renews: the renewal sent on resume
// claims nothing, and the claims were dropped before it was sent.
func TestAResumedMemberFencesBeforeItRenews(t *testing.T) {
	client := versionedClient()
	now := epoch
	var mu sync.Mutex
	var log []string // OnClaims and the renewals, in order
	m, err := New(Config{Client: client, Namespace: "ns", Ring: "r", Identity: "a",
		LeaseDuration: lease, RenewPeriod: renew, Now: func() time.Time { return now },
		OnClaims: func(c Claims) { mu.Lock(); log = append(log, "claims working="+c.Working.String()); mu.Unlock() },
		Busy:     func() (_, _ shard.SlotSet) { return }})
	if err != nil {
		t.Fatal(err)
	}
	client.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		l := a.(k8stesting.UpdateAction).GetObject().(metav1.Object)
		mu.Lock()
		log = append(log, "renewal slots="+l.GetAnnotations()[AnnotationSlots])
		mu.Unlock()
		return false, nil, nil
	})
	ctx := klog.NewContext(context.Background(), klog.Background())
	workAlone(t, ctx, m, &now, renew)
	// Frozen for two lease durations: the others have taken its slots.
	now = now.Add(2 * lease)
	mu.Lock()
	log = nil
	mu.Unlock()
	m.round(ctx, klog.Background()) // what the loop does on the tick
	mu.Lock()
	defer mu.Unlock()
	if len(log) < 2 || log[0] != "claims working=" || log[1] != "renewal slots=" {
		t.Fatalf("resumed past its fence, a did %q; want its claims dropped first, then a renewal claiming nothing", log)
	}
	if !m.Claims().Working.Empty() {
		t.Fatalf("resumed past its fence, a still works %v", m.Claims().Working)
	}
}

// Finding 1, the other half: a renewal sent in time, whose success comes
// back after the fence deadline passed (the member was frozen while it was
// in flight), fences the member before it extends its lease: the others
// may have counted it out and taken its slots before the write landed.
func TestARenewalAnsweredPastTheFenceDoesNotKeepTheClaims(t *testing.T) {
	client := versionedClient()
	now := epoch
	m := handoffMember(t, client, "a", lease, renew, func() time.Time { return now })
	ctx := klog.NewContext(context.Background(), klog.Background())
	for range joinRounds {
		now = now.Add(renew)
		m.round(ctx, klog.Background())
	}
	if m.Claims().Working != shard.All() {
		t.Fatalf("alone, a works %v, want every slot", m.Claims().Working)
	}
	last := now // its last renewal was sent then
	// The next renewal is sent 100 ms before the deadline, and answered
	// 1.5 s after it: past the old deadline, before the new one.
	now = last.Add(lease - renew - 100*time.Millisecond)
	client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		now = last.Add(lease + 500*time.Millisecond)
		return false, nil, nil
	})
	m.round(ctx, klog.Background())
	if !m.Claims().Working.Empty() {
		t.Fatalf("its renewal answered %s past the fence deadline, a still works %d slots", 1500*time.Millisecond, m.Claims().Working.Len())
	}
}

// Finding 2. A Lease deleted by hand is not a clean leave: its owner does
// not know, and works on until its own fence (its re-creates failing here,
// 500s). The others took a vanished Lease for a leave and freed its slots at
// once: two members then Worked the same 128 slots. Now a Lease that
// vanishes unmarked counts as live until its lease runs out on the
// observer's clock, its claims as last seen.
func TestAHandDeletedLeaseIsNotALeave(t *testing.T) {
	now := epoch
	client, a, b := pair(t, &now, "a", "b")
	ctx := klog.NewContext(context.Background(), klog.Background())
	rounds := func(n int, when string) {
		for range n {
			a.round(ctx, klog.Background())
			noSplit(t, when, a, b)
			b.round(ctx, klog.Background())
			noSplit(t, when, a, b)
			now = now.Add(renew)
		}
	}
	rounds(8, "joining")
	divided(t, a, b)
	// b's Lease is deleted by hand; its re-creates fail.
	if err := client.Tracker().Delete(coordination(), "ns", b.leaseName()); err != nil {
		t.Fatal(err)
	}
	client.PrependReactor("create", "leases", func(act k8stesting.Action) (bool, runtime.Object, error) {
		if act.(k8stesting.CreateAction).GetObject().(metav1.Object).GetName() == b.leaseName() {
			return true, nil, apierrors.NewInternalError(errors.New("etcdserver: request timed out"))
		}
		return false, nil, nil
	})
	rounds(int(3*lease/renew), "b's Lease deleted by hand")
	if b.Claims() != (Claims{}) || a.Claims().Working != shard.All() {
		t.Fatalf("three lease durations later: a works %d slots, b claims %+v; want b fenced and a working all", a.Claims().Working.Len(), b.Claims())
	}
}

func coordination() schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}
}

// Finding 3. The fence timer was read only between the loop's turns; a
// renewal and a list that hung to their timeouts made a turn last two
// renew periods, and the member fenced that late. Now the fence fires on a
// timer of its own, whatever the loop is doing: here the requests hang and
// never return (the fake clientset ignores their context), and the member
// fences at its deadline anyway.
func TestTheFenceFiresWhileRequestsHang(t *testing.T) {
	client := versionedClient()
	clk := testclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	fencedAt := make(chan time.Time, 16)
	m, err := New(Config{Client: client, Namespace: "ns", Ring: "r", Identity: "a",
		LeaseDuration: lease, RenewPeriod: renew, Clock: clk,
		OnClaims: func(c Claims) {
			if c == (Claims{}) {
				fencedAt <- clk.Now()
			}
		},
		Busy: func() (_, _ shard.SlotSet) { return }})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	lists, hang, released := 0, false, make(chan struct{})
	var lastSent time.Time
	client.PrependReactor("*", "leases", func(act k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		h := hang
		if act.GetVerb() == "list" {
			lists++
		}
		if act.GetVerb() == "update" || act.GetVerb() == "create" {
			lastSent = clk.Now()
		}
		mu.Unlock()
		if h {
			<-released
			return true, nil, errors.New("context deadline exceeded")
		}
		return false, nil, nil
	})
	listed := func() int { mu.Lock(); defer mu.Unlock(); return lists }
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.Background()))
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	defer func() {
		close(released)
		cancel()
		for { // leave waits a renew period on the clock
			select {
			case <-done:
				return
			case <-time.After(10 * time.Millisecond):
				clk.Step(renew)
			}
		}
	}()
	waitList := func(n int) {
		for end := time.Now().Add(time.Minute); listed() < n; time.Sleep(time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("the loop never made list %d", n)
			}
		}
	}
	waitList(1)
	for i := 2; m.Claims().Working != shard.All(); i++ {
		if i > 10 {
			t.Fatalf("alone, a works %v after %d turns, want every slot", m.Claims().Working, i)
		}
		clk.Step(renew)
		waitList(i)
	}
	for len(fencedAt) > 0 { // the claims it had while joining
		<-fencedAt
	}
	// Every Lease request hangs from the next turn on.
	mu.Lock()
	hang = true
	sent := lastSent
	mu.Unlock()
	clk.Step(renew) // the turn starts, its renewal hangs
	deadline := sent.Add(lease - renew)
	for clk.Now().Before(deadline) {
		select {
		case at := <-fencedAt:
			t.Fatalf("fenced at %s, before its deadline %s", at.Sub(sent), lease-renew)
		case <-time.After(10 * time.Millisecond):
		}
		clk.Step(min(100*time.Millisecond, deadline.Sub(clk.Now())))
	}
	select {
	case at := <-fencedAt:
		t.Logf("fenced %s after its last renewal was sent (deadline %s), its requests hanging", at.Sub(sent), lease-renew)
	case <-time.After(30 * time.Second):
		t.Fatalf("its requests hanging, a was not fenced at its deadline (%s after its last renewal was sent): it works %d slots", lease-renew, m.Claims().Working.Len())
	}
}

// Finding 3: every ring request is bounded by the fence deadline while it
// is ahead (and by a renew period), so the loop is back when the member
// counts itself out.
func TestARequestEndsByTheFenceDeadline(t *testing.T) {
	now := epoch
	m := handoffMember(t, fake.NewSimpleClientset(), "a", 10*time.Second, 2*time.Second, func() time.Time { return now })
	m.renewed = now.Add(-(m.fenceAfter() - 300*time.Millisecond)) // 300 ms before the deadline
	ctx, cancel := m.request(context.Background())
	defer cancel()
	d, ok := ctx.Deadline()
	if !ok || time.Until(d) > 300*time.Millisecond {
		t.Fatalf("a request sent 300 ms before the fence deadline ends in %s, want by the deadline", time.Until(d))
	}
	m.renewed = now.Add(-time.Hour) // fenced already: a renew period, to come back
	ctx2, cancel2 := m.request(context.Background())
	defer cancel2()
	if d, _ := ctx2.Deadline(); time.Until(d) < time.Second {
		t.Fatalf("a request of a fenced member ends in %s, want a renew period", time.Until(d))
	}
}

// Finding 4. The shortcut "a Lease seen first with a renewTime two lease
// durations old is a dead member's" compared clocks across machines: a
// joiner 25 s ahead (lease 10 s) took a live member's slots, once that
// member's Lease had not moved for two of the joiner's lists (here, three
// renewals failing, well within its fence). Now a Lease seen first counts
// as just renewed, on the observer's own clock.
func TestASkewedJoinerTakesNoLiveMembersSlots(t *testing.T) {
	client := versionedClient()
	now := epoch
	const lease, renew, skew = 10 * time.Second, 2 * time.Second, 25 * time.Second
	a := handoffMember(t, client, "a", lease, renew, func() time.Time { return now })
	j := handoffMember(t, client, "j", lease, renew, func() time.Time { return now.Add(skew) })
	ctx := klog.NewContext(context.Background(), klog.Background())
	workAlone(t, ctx, a, &now, renew)
	// a's next three renewals fail (500s): it is still well within its
	// fence (lease − renew period after its last renewal), and Works on.
	failing := 3
	client.PrependReactor("update", "leases", func(act k8stesting.Action) (bool, runtime.Object, error) {
		if act.(k8stesting.UpdateAction).GetObject().(metav1.Object).GetName() == a.leaseName() && failing > 0 {
			failing--
			return true, nil, apierrors.NewInternalError(errors.New("etcdserver: request timed out"))
		}
		return false, nil, nil
	})
	for range 8 {
		j.round(ctx, klog.Background())
		noSplit(t, "j, 25 s ahead, joins", a, j)
		a.round(ctx, klog.Background())
		noSplit(t, "j, 25 s ahead, joins", a, j)
		now = now.Add(renew)
	}
	divided(t, a, j)
}

// The fence's clock is the monotonic clock plus what the boot clock ran
// ahead of it: a suspend (the monotonic clock stands still, the boot clock
// runs) counts; a step of the wall clock, back, put right, or forward,
// counts nothing, nor does a step back followed by a suspend.
func TestTheFenceClockCountsASuspendAndNoStepOfTheWallClock(t *testing.T) {
	mono := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	wall, boot := mono, mono
	c := fenceClock{now: func() time.Time { return mono }, wall: func() time.Time { return wall },
		boot: func() time.Time { return boot }}
	start := c.read()
	var total time.Duration
	for _, step := range []struct {
		name             string
		mono, wall, boot time.Duration
		want             time.Duration // the reading's advance
	}{
		{"all run", time.Second, time.Second, time.Second, time.Second},
		{"suspended: the monotonic clock stood still", time.Millisecond, 13 * time.Second, 13 * time.Second, 13 * time.Second},
		{"the wall clock stepped back an hour", time.Second, time.Second - time.Hour, time.Second, time.Second},
		{"suspended after the step back", time.Millisecond, 13 * time.Second, 13 * time.Second, 13 * time.Second},
		{"the wall clock put right", time.Second, time.Second + time.Hour, time.Second, time.Second},
		{"the wall clock stepped forward a minute", time.Second, time.Minute, time.Second, time.Second},
	} {
		before := c.read()
		mono, wall, boot = mono.Add(step.mono), wall.Add(step.wall), boot.Add(step.boot)
		if got := c.read().Sub(before); got != step.want {
			t.Errorf("%s: the fence's clock advanced %v, want %v", step.name, got, step.want)
		}
		total += step.want
	}
	if got := c.read().Sub(start); got != total {
		t.Errorf("in all the fence's clock advanced %v, want %v", got, total)
	}
}

// The real boot clock runs with the monotonic one while the system is
// not suspended (a reading disturbed by load is taken again).
func TestTheBootClockRunsWithTheMonotonicClock(t *testing.T) {
	if goruntime.GOOS != "linux" {
		t.Skip("CLOCK_BOOTTIME is Linux's")
	}
	for try := 1; ; try++ {
		b0, n0 := bootNow(), time.Now()
		time.Sleep(50 * time.Millisecond)
		b1, n1 := bootNow(), time.Now()
		if b0.IsZero() || b1.IsZero() {
			t.Fatal("CLOCK_BOOTTIME unreadable")
		}
		drift := b1.Sub(b0) - n1.Sub(n0)
		if drift.Abs() < 20*time.Millisecond {
			return
		}
		if try == 5 {
			t.Fatalf("over %s of the monotonic clock, the boot clock ran %s (tried %d times)", n1.Sub(n0), b1.Sub(b0), try)
		}
	}
}

// A renewal whose answer comes back later than a lease duration after it
// was sent (a slow server) extends nothing: the others count the member
// out a lease duration after they saw the write, which landed after the
// renewal was sent, so the member's right to work is counted from the
// sending, as client-go's leader election counts its renew deadline.
func TestARenewalAnsweredPastItsOwnLeaseExtendsNothing(t *testing.T) {
	client := versionedClient()
	now := epoch
	var until time.Time
	m, err := New(Config{Client: client, Namespace: "ns", Ring: "r", Identity: "a",
		LeaseDuration: lease, RenewPeriod: renew, Now: func() time.Time { return now },
		OnDeadline: func(u time.Time) { until = u },
		OnClaims:   func(Claims) {}, Busy: func() (_, _ shard.SlotSet) { return }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := klog.NewContext(context.Background(), klog.Background())
	for range joinRounds {
		now = now.Add(renew)
		m.round(ctx, klog.Background())
	}
	if m.Claims().Working != shard.All() {
		t.Fatalf("alone, a works %v, want every slot", m.Claims().Working)
	}
	sent := now.Add(renew)
	now = sent
	client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		now = sent.Add(lease + renew) // answered a lease duration and more after it was sent
		return false, nil, nil
	})
	m.round(ctx, klog.Background())
	if w := m.Claims().Working; !w.Empty() || !until.IsZero() && !until.Before(sent.Add(lease)) {
		t.Fatalf("a renewal answered %s after it was sent: a works %d slots, its gate open until %s after the sending; want none, and no later than %s",
			lease+renew, w.Len(), until.Sub(sent), m.fenceAfter())
	}
	if admits(m).Len() > 0 {
		t.Fatalf("a renewal answered %s after it was sent: a's gate admits %d slots", lease+renew, admits(m).Len())
	}
}

// cutRing is a ring of a and b on a fake server on which the Lease
// requests of one member fail once it is cut off (cut names it).
// newDividedRing returns one whose members have joined and divided the
// slots.
type cutRing struct {
	t           *testing.T
	now         *time.Time
	client      *fake.Clientset
	a, b        *Member
	ctx         context.Context
	cut, acting string
}

func newDividedRing(t *testing.T, now *time.Time) *cutRing {
	client, a, b := pair(t, now, "a", "b")
	r := &cutRing{t: t, now: now, client: client, a: a, b: b, ctx: klog.NewContext(context.Background(), klog.Background())}
	client.PrependReactor("*", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if r.cut != "" && r.acting == r.cut {
			return true, nil, apierrors.NewInternalError(errors.New("cut off"))
		}
		return false, nil, nil
	})
	for range 20 {
		r.period("a and b join", a, b)
	}
	divided(t, a, b)
	return r
}

// period runs a round of each of ms, 10 ms apart, checking after each that
// no slot is worked by two of them, then moves to the next renew period.
func (r *cutRing) period(when string, ms ...*Member) {
	for _, m := range ms {
		r.acting = m.cfg.Identity
		m.round(r.ctx, klog.Background())
		r.acting = ""
		noSplit(r.t, when, ms...)
		*r.now = r.now.Add(10 * time.Millisecond)
	}
	*r.now = r.now.Add(renew - 20*time.Millisecond)
}
