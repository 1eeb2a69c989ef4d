package ring

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"

	"rawwatch/openfinding"
	"rawwatch/shard"
)

// Claims of docs/sharding.md's "Membership" played against saved copies,
// hand edits and members' pauses, each as a real cluster produces them.

// A joiner reads, at first sight, a copy of an old gift re-applied over a
// live member's Lease: when c once joined a ring of a and b, b gave c part
// of its share (the copy saved while b named the gift), then c left; a
// sync puts that saved Lease back over the live b, which works its whole
// share again (its requests fail from just after its last renewal: it
// never reads the copy, and works on until its fence, 3.5 s after that
// renewal), and c, a StatefulSet's identity, joins then. The copy is
// unmarked: read at first sight it counts as b's word, and its gift must
// not make c Work a slot b may still admit.
func TestAJoinerReadingACopyOfAnOldGiftSplitsNoBrain(t *testing.T) {
	now := epoch
	r := newDividedRing(t, &now)
	client, a, b, ctx := r.client, r.a, r.b, r.ctx
	ms := []*Member{a, b}
	step := func(when string) { r.period(when, ms...) }
	// When c joined a ring of a and b, b gave c the slots of its share
	// that became c's, and kept the rest; that state of b's Lease was
	// saved. b now works its share of a ring of a and b again.
	slots := func(ids ...string) (s shard.SlotSet) {
		for _, i := range shard.Assign(ids)[ids[len(ids)-1]] {
			s = s.With(i)
		}
		return s
	}
	share := slots("a", "b").And(slots("a", "b", "c"))
	kept := slots("a", "c", "b")
	leases := client.CoordinationV1().Leases("ns")
	l, err := leases.Get(ctx, b.leaseName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	renewed := metav1.NewMicroTime(epoch.Add(-time.Hour))
	acq := metav1.NewMicroTime(epoch.Add(-2 * time.Hour))
	l.Spec.RenewTime, l.Spec.AcquireTime = &renewed, &acq
	l.Annotations[AnnotationSlots] = kept.String()
	l.Annotations[AnnotationPending] = ""
	l.Annotations[AnnotationGiven] = "c=" + share.String()
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.cut = "b"
	ms = append(ms, coveringMember(t, client, "c", func() time.Time { return now }, nil))
	start := now
	for range 6 {
		step(fmt.Sprintf("%s after b cut off, a copy of its old gift (%d slots to c) applied, c joined", now.Sub(start), share.Len()))
	}
}

// A saved copy of a renewal the observer never read (its list came after
// the next renewal, or failed that period) re-applied once after its
// holder died: a state the Lease really had, of the holder's acquisition,
// between renewTimes the observer read. Copies renew nothing: b must be
// out within two lease durations of its last renewal read.
func TestACopyOfARenewalNeverReadRenewsNothing(t *testing.T) {
	now := epoch
	a := copiesObserver(t, &now)
	bRenews(a, &now, 5)
	now = now.Add(renew)
	missed := now // b renews; a's list that period fails; a sync saves it
	stamps := bRenews(a, &now, 3)
	died := now
	for now.Sub(died) < 3*lease/2 { // b dead: its Lease stands still
		now = now.Add(renew)
		live(a, now, leaseOfB(stamps[len(stamps)-1]))
	}
	for now.Sub(died) <= 2*written(lease)+renew { // the copy, re-applied once
		now = now.Add(renew)
		live(a, now, leaseOfB(missed))
	}
	if slices.Contains(a.Members(), "b") {
		t.Fatalf("b (lease %s) dead for %s; a copy of its renewal of %s, which a never read, re-applied %s after it died: a counts b live (members %v)",
			written(lease), now.Sub(died), missed.Sub(epoch), 3*lease/2, a.Members())
	}
}

// An operator marks a live member's Lease leaving, valued as the collector
// writes it (its renewTime), just after a renewal the observer has not
// read yet: b is in its first lease duration (a Lease it never read may be
// working: it claims nothing yet), so the renewal claims nothing. The mark
// is nobody's leave: it counts for nothing on a live member's record, read
// before or not, and b must stay a member.
func TestALeavingMarkOnARenewalNotYetReadCountsNobodyOut(t *testing.T) {
	now := epoch
	a := copiesObserver(t, &now)
	bRenews(a, &now, 2)
	now = now.Add(renew)
	marked := leaseOfB(now) // b's renewal, claiming nothing, then the operator's mark
	marked.Annotations[AnnotationLeaving] = markCollected(now)
	marked.ResourceVersion = "2"
	live(a, now, marked)
	if !slices.Contains(a.Members(), "b") {
		t.Fatalf("b live, claiming nothing yet; an operator's leaving mark on its renewal, read with it: a counts b out (members %v)", a.Members())
	}
}

// A sync (GitOps self-heal, a restore job) puts a saved copy of b's Lease
// back whenever b's renewals made it drift, checking every 5 s. b, finding
// its Lease set back, counts itself out until it stood still a lease
// duration, takes it back, then claims nothing for a lease duration; a
// counts b live all along (b renews between the syncs). Each set-back may
// cost b's share a while, but its slots must not stay unworked most of the
// time for as long as the sync runs: either b works them, or a does.
func TestALeaseSetBackOnEveryDriftLeavesNoShareUnworked(t *testing.T) {
	openfinding.Skip(t)
	now := epoch
	r := newDividedRing(t, &now)
	client, a, b, ctx := r.client, r.a, r.b, r.ctx
	leases := client.CoordinationV1().Leases("ns")
	saved, err := leases.Get(ctx, b.leaseName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	share := b.Claims().Working
	const every, periods = 5 * time.Second, 120
	synced, unworked := now, 0
	for range periods {
		if now.Sub(synced) >= every {
			synced = now
			l, err := leases.Get(ctx, b.leaseName(), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !l.Spec.RenewTime.Equal(saved.Spec.RenewTime) { // drifted: put the copy back
				l.Spec, l.Annotations = *saved.Spec.DeepCopy(), maps.Clone(saved.Annotations)
				if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
		}
		r.period("b's Lease set back on every drift", a, b)
		if a.Claims().Working.Union(b.Claims().Working).And(share) != share {
			unworked++
		}
	}
	if unworked > periods/4 {
		t.Fatalf("b's Lease set back to a saved copy whenever it drifted, checked every %s: b's share (%d slots) not all Worked in %d of %d renew periods; at the end a works %d of them, b %d (members in a's view %v)",
			every, share.Len(), unworked, periods, a.Claims().Working.And(share).Len(), b.Claims().Working.And(share).Len(), a.Members())
	}
}

// b joins a ring where a works every slot, but b's lists of the ring's
// Leases fail (RBAC without list in a rolling update, or LISTs that time
// out while its GET and UPDATE of one Lease go through); its renewals do.
// b claims nothing while it cannot list; a, reading b's renewals, counts
// it live and hands it b's share. A live member must not take its share
// from the ring for good: every slot must be Worked by someone within a
// few lease durations.
func TestAMemberThatCannotListTakesNoShareFromTheRing(t *testing.T) {
	openfinding.Skip(t)
	now := epoch
	client := versionedClient()
	clock := func() time.Time { return now }
	a := handoffMember(t, client, "a", lease, renew, clock)
	b := handoffMember(t, client, "b", lease, renew, clock)
	acting := ""
	client.PrependReactor("list", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if acting == "b" {
			return true, nil, apierrors.NewTimeoutError("the list of the ring's Leases timed out", 1)
		}
		return false, nil, nil
	})
	ctx := klog.NewContext(context.Background(), klog.Background())
	workAlone(t, ctx, a, &now, renew)
	start := now
	var unworked shard.SlotSet
	for now.Sub(start) < 10*lease {
		for _, m := range []*Member{a, b} {
			acting = m.cfg.Identity
			m.round(ctx, klog.Background())
			acting = ""
		}
		now = now.Add(renew)
		unworked = shard.All().Minus(a.Claims().Working).Minus(b.Claims().Working)
	}
	if !unworked.Empty() {
		t.Fatalf("%s after b joined, its lists failing, its renewals not: %d slots Worked by nobody (a counts %v live; a works %d, releases %d, gives %d; b claims %v)",
			now.Sub(start), unworked.Len(), a.Members(), a.Claims().Working.Len(), a.Claims().Releasing.Len(), a.Claims().Given.Len(), b.Claims().Claimed())
	}
}

// A rolling update that changes --sharding-ring: the old replicas' ring
// and the new ones' share the namespace and the objects, each dividing
// every slot among its own members. As with a change of scheme (a Lease
// of another scheme claims every slot while it lives), no object may be
// reconciled by a member of each.
func TestARollingUpdateThatRenamesTheRingSplitsNoBrain(t *testing.T) {
	openfinding.Skip(t)
	now := epoch
	client := versionedClient()
	clock := func() time.Time { return now }
	old := handoffMember(t, client, "a", lease, renew, clock)
	ctx := klog.NewContext(context.Background(), klog.Background())
	workAlone(t, ctx, old, &now, renew)
	renamed, err := New(Config{Client: client, Namespace: "ns", Ring: "r2", Identity: "b",
		LeaseDuration: lease, RenewPeriod: renew, Now: clock,
		OnClaims: func(Claims) {}, Busy: func() (_, _ shard.SlotSet) { return }})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 * joinRounds {
		for _, m := range []*Member{old, renamed} {
			m.round(ctx, klog.Background())
			noSplit(t, "b, of ring r2, starts beside a, of ring r", old, renamed)
		}
		now = now.Add(renew)
	}
}

// docs/sharding.md: a renewTime is fresh when its acquisition was never
// read, "or when it is above the highest read in it". One between two
// renewTimes read (a renewal the observer missed, saved, re-applied) is
// below the highest: no renewal.
func TestARenewTimeBelowTheHighestReadIsNotFresh(t *testing.T) {
	var g ledger
	at := epoch
	for k := range 4 {
		if k == 2 {
			continue // the renewal of 3 s, never read
		}
		at = at.Add(time.Second)
		g = g.read(epoch, epoch.Add(time.Duration(k+1)*time.Second), true, at, time.Time{})
	}
	if missed := epoch.Add(3 * time.Second); g.fresh(epoch, missed) {
		t.Fatalf("renewTimes read in one acquisition 1s, 2s, 4s (highest kept %s); one of %s, below the highest, is fresh", g[0].renewed.Sub(epoch), missed.Sub(epoch))
	}
}

// The fence's clock counts a system suspend by the boot clock running
// ahead of the monotonic one, and a step of the wall clock counts nothing: a's wall clock ran a minute ahead when a started, and NTP
// stepped it back. Then a's node is suspended three lease durations (b
// takes every slot); a resumes, and its gate must admit none of its old
// share: the step back must not swallow the suspend.
func TestASuspendAfterTheWallClockWasSteppedBackKeepsNoGateOpen(t *testing.T) {
	client := versionedClient()
	world := epoch
	var lag time.Duration // a's monotonic clock lags the world's by this (suspended)
	ahead := time.Minute  // a's wall clock runs ahead of the world's by this
	a, err := New(Config{Client: client, Namespace: "ns", Ring: "r", Identity: "a",
		LeaseDuration: lease, RenewPeriod: renew,
		Now:      func() time.Time { return world.Add(-lag) },
		Wall:     func() time.Time { return world.Add(ahead) },
		Boot:     func() time.Time { return world }, // counts the suspend, never stepped
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
	divided(t, b, a)
	ahead = 0 // NTP steps a's wall clock back
	for range 3 {
		a.round(ctx, klog.Background())
		b.round(ctx, klog.Background())
		noSplit(t, "a's wall clock stepped back", a, b)
		world = world.Add(renew)
	}
	suspend(t, ctx, a, b, &world, &lag)
	if both := admits(a).And(admits(b)); !both.Empty() {
		t.Fatalf("a, its wall clock stepped back a minute, resumed from a %s system suspend: a and b both admit reconciles in %d slots",
			lag, both.Len())
	}
}

// b sends a renewal that the server holds (etcd slow to commit): b's
// request times out, b is cut off from then on and fences; a counts b out
// and takes every slot. Then the held write lands, a lease duration and
// more after it was sent: a renewal of b's, claiming b's old share
// confirmed. Nothing on a Lease tells a write that landed late from one
// sent late (no renewTime is compared with the observer's clock), so a
// counts b live from that read and withdraws what b claims; b, fenced long
// ago, works nothing. That stall is bounded: b's Lease then stands still,
// and a works every slot again within b's written lease duration and two
// renew periods of the landing (docs/sharding.md, "What cannot be
// promised").
func TestARenewalLandingAfterItsMemberFencedStopsItsSlotsALeaseDurationAtMost(t *testing.T) {
	now := epoch
	r := newDividedRing(t, &now)
	client, a, b, ctx := r.client, r.a, r.b, r.ctx
	var held *coordinationv1.Lease
	hold := false
	client.PrependReactor("update", "leases", func(act k8stesting.Action) (bool, runtime.Object, error) {
		if hold && r.acting == "b" {
			held = act.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease).DeepCopy()
			hold = false
			return true, nil, apierrors.NewTimeoutError("etcd slow to commit", 1)
		}
		return false, nil, nil
	})
	hold = true
	r.period("b's renewal held by the server", a, b)
	if held == nil {
		t.Fatal("b sent no renewal")
	}
	r.cut = "b"
	sent := now
	for a.Claims().Working != shard.All() && now.Sub(sent) < 4*lease {
		r.period("b cut off", a, b)
	}
	if a.Claims().Working != shard.All() {
		t.Fatalf("b cut off %s ago: a works %d slots, want every one", now.Sub(sent), a.Claims().Working.Len())
	}
	for range int(lease / renew) {
		r.period("b cut off, a works every slot", a, b)
	}
	if _, err := client.CoordinationV1().Leases("ns").Update(ctx, held, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	landed, fewest, short := now, shard.Slots, 0
	for now.Sub(landed) < 3*lease {
		r.period("b's held renewal landed", a, b)
		fewest = min(fewest, a.Claims().Working.Len())
		if a.Claims().Working != shard.All() {
			short++
		}
	}
	if bound := int(written(lease)/renew) + 2; short > bound || a.Claims().Working != shard.All() {
		t.Fatalf("b's renewal landed %s after it was sent, b fenced since: a stopped working %d slots for %d renew periods, want %d at most (it works %d of %d %s later)",
			landed.Sub(sent), shard.Slots-fewest, short, bound, a.Claims().Working.Len(), shard.Slots, now.Sub(landed))
	}
}

// A leaving mark on a Lease already out in the observer's view counts (the
// collector's), but the view may be out of date while the member lives:
// b's requests fail for two renew periods (well within its fence), a's
// lists fail from then on for four; b renews again, working its share
// throughout; an operator marks b's Lease leaving, valued as the collector
// writes it, and b pauses (a GC) just after. a's first list since (its last
// one under a lease duration before: no blind stretch) reads the marked
// record, the last renewal of b it read a lease duration old. a must not
// Work b's share while b may still admit it.
func TestALeavingMarkReadAfterAStaleViewSplitsNoBrain(t *testing.T) {
	now := epoch
	r := newDividedRing(t, &now)
	client, a, b, ctx := r.client, r.a, r.b, r.ctx
	bFails, aListFails := false, false
	client.PrependReactor("*", "leases", func(act k8stesting.Action) (bool, runtime.Object, error) {
		if r.acting == "b" && bFails || r.acting == "a" && aListFails && act.GetVerb() == "list" {
			return true, nil, apierrors.NewInternalError(errors.New("etcdserver: request timed out"))
		}
		return false, nil, nil
	})
	share := b.Claims().Working
	bFails = true
	for range 2 {
		r.period("b's requests fail", a, b)
	}
	bFails, aListFails = false, true
	for range 3 {
		r.period("a's lists fail", a, b)
	}
	if b.Claims().Working != share {
		t.Fatalf("b renewing again: it works %d slots, want its share of %d", b.Claims().Working.Len(), share.Len())
	}
	leases := client.CoordinationV1().Leases("ns")
	l, err := leases.Get(ctx, b.leaseName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.Annotations[AnnotationLeaving] = markCollected(l.Spec.RenewTime.Time) // as the collector writes it
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	aListFails = false
	for range 3 { // b paused
		r.period("a lists again, b paused", a)
		noSplit(t, fmt.Sprintf("an operator's leaving mark on b's Lease, read by a's first list in %s, b paused", 4*renew), a, b)
	}
}
