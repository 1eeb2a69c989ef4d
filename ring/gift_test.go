package ring

import (
	"context"
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"rawwatch/shard"
)

// A gift (AnnotationGiven) read from, or made to, a Lease whose
// holderIdentity was cleared by hand: the Lease is still the member its
// name says, whose own writes its annotations are, and whose next renewal
// writes its holder back. Custody must hold across that moment.

// ringLease is the Lease of member id of ring "r" as its holder wrote it
// at stamp (holder nil: cleared by hand since), with annotations ann.
func ringLease(id string, holder *string, stamp time.Time, ann map[string]string) coordinationv1.Lease {
	secs := int32(written(lease) / time.Second)
	t := metav1.NewMicroTime(stamp)
	a := map[string]string{AnnotationScheme: shard.Scheme}
	for k, v := range ann {
		a[k] = v
	}
	return coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "r." + id, Namespace: "ns", Labels: map[string]string{Label: "r"}, Annotations: a, ResourceVersion: "1"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: holder, LeaseDurationSeconds: &secs, AcquireTime: &t, RenewTime: &t},
	}
}

// live makes m a live member at now that has listed twice, as if its
// renewals and lists had succeeded; then it lists items and steps.
func live(m *Member, now time.Time, items ...coordinationv1.Lease) {
	m.setRenewed(m.Now())
	m.looks = 2
	own := ringLease(m.cfg.Identity, &m.cfg.Identity, now, nil)
	m.listed(klog.Background(), append(items, own), now)
	m.lookOK = true
	m.update(klog.Background())
}

// The giver a names slot 5 given to b; b's Lease, its holder cleared by
// hand, does not claim it yet: a must not take the gift for accepted (b
// is live, writes its holder back at its next renewal, and claims it).
func TestAGiftToALeaseWhoseHolderWasClearedStands(t *testing.T) {
	now := epoch
	a := handoffMember(t, versionedClient(), "a", lease, renew, func() time.Time { return now })
	a.claims.Given = shard.SlotsOf(5)
	a.givenTo[5], a.givenAt[5] = "b", now
	b := "b"
	live(a, now, ringLease("b", &b, now, map[string]string{AnnotationSlots: "", AnnotationPending: ""}))
	now = now.Add(renew)
	live(a, now, ringLease("b", nil, now.Add(-renew/2), map[string]string{AnnotationSlots: "", AnnotationPending: ""}))
	if !a.Claims().Given.Has(5) {
		t.Fatalf("b's holder cleared by hand, b not claiming slot 5 yet: a dropped the gift of slot 5 to b (%+v); b may never take it, its deletions kept for it lost", a.Claims())
	}
}

// The receiver b was given a slot by a, one that goes to c by the
// membership; a's Lease, its holder cleared by hand, still names the gift:
// b keeps it in custody, and so watches it.
func TestAGiftFromALeaseWhoseHolderWasClearedIsKept(t *testing.T) {
	now := epoch
	b := handoffMember(t, versionedClient(), "b", lease, renew, func() time.Time { return now })
	slot := shard.Assign([]string{"b", "c"})["c"][0]
	gift := map[string]string{AnnotationSlots: "", AnnotationPending: "", AnnotationGiven: fmt.Sprint("b=", slot)}
	claimsNothing := map[string]string{AnnotationSlots: "", AnnotationPending: ""}
	a, c := "a", "c"
	live(b, now, ringLease("a", &a, now, gift), ringLease("c", &c, now, claimsNothing))
	if !b.Claims().Custody.Has(slot) {
		t.Fatalf("a gives b slot %d: b's custody %v, want it", slot, b.Claims().Custody)
	}
	now = now.Add(renew)
	live(b, now, ringLease("a", nil, now.Add(-renew/2), gift), ringLease("c", &c, now, claimsNothing))
	if cl := b.Claims(); !cl.Watched().Has(slot) {
		t.Fatalf("a's holder cleared by hand, its Lease still giving b slot %d (c's by the membership): b no longer watches it (%+v); the deletions it kept for it are dropped", slot, cl)
	}
}

// Claims of docs/sharding.md's custody rules (a slot given by name) played
// against saved copies, failing renewals and hands that write labels.

// a drains and gives slot s to c; a copy of a's Lease is saved while it
// names that gift (a backup, a GitOps export), and a leaves. Later n joins,
// s is n's share, and c hands s to n, which works it. Then the copy is
// applied under another name (r.a-copy, as the chaos run's r0-copy), and
// n's renewals fail for a few renew periods (an API server hiccup) while a
// label is written on n's Lease: n's Lease is in doubt, and n works s
// until its fence. The copy's gift is no giver's current word: c must not
// claim s on it while n may still admit reconciles of s.
func TestAGiftOnACopyUnderAnotherNameSplitsNoBrain(t *testing.T) {
	r := newDrainRing(t, "n", "a", "c") // n steps first: c lists after n's last renewal
	r.dead["n"] = true                  // not started yet
	r.settle(30, "a and c join", "a", "c")
	a, n := r.ms["a"], r.ms["n"]
	s := firstSlot(t, "no slot of a's goes to n once a left", func(i int) bool { return a.Claims().Working.Has(i) && owns("n", i, "c", "n") })
	ctx := context.Background()
	leases := a.cfg.Client.CoordinationV1().Leases("ns")
	a.Drain()
	var saved *coordinationv1.Lease // a's Lease while it names s given to c
	for i := 1; saved == nil; i++ {
		r.round("a drains")
		if a.Claims().Given.Has(s) {
			l, err := leases.Get(ctx, "r.a", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if l.Annotations[AnnotationGiven] == "" {
				continue // named from its next renewal
			}
			saved = l
			t.Logf("a's Lease saved naming %s", l.Annotations[AnnotationGiven])
		}
		if i == drainBound {
			t.Fatalf("a never named slot %d given: %s", s, r.claims())
		}
	}
	r.drained(drainBound, "a drains", "a")
	r.leave("a")
	delete(r.dead, "n")
	for i := 1; !n.Claims().Working.Has(s); i++ {
		r.round("n joins")
		if i == 30 {
			t.Fatalf("n does not work slot %d 30 renew periods after it joined: %s", s, r.claims())
		}
	}
	for range 3 {
		r.round("n works slot s")
	}
	// The copy applied; a label on n's Lease after n's last renewal that
	// goes through; n's renewals fail from then on (n fences 9 s later).
	saved.ObjectMeta = metav1.ObjectMeta{Name: "r.a-copy", Namespace: "ns", Labels: saved.Labels, Annotations: saved.Annotations}
	if _, err := leases.Create(ctx, saved, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	l, err := leases.Get(ctx, "r.n", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.Labels["touched"] = "1"
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.failing["n"] = true
	for i := range 6 { // within n's fence: n still works s
		r.round("a copy of a's Lease names s given to c; n's Lease in doubt, n renewing in vain")
		if !n.Claims().Working.Has(s) {
			t.Logf("n no longer works slot %d after %d renew periods: %+v", s, i+1, n.Claims())
			break
		}
	}
}

// a drains and gives slot s to c by name; n joins just then, and s is
// n's share: c confirms s and hands it on to n a few renew periods later.
// a's lists fail while c's Lease shows s confirmed (a LIST outage of a few
// seconds; its renewals go through). a then reads c no longer claiming s:
// c has not confirmed it by a's view, so a names s given to c on and on,
// and nobody else may claim a slot given by name: n cannot take s (given
// on to it by c) until a's gift runs out (HandoffTimeout, 40 renew
// periods), nor can a's drain end. A gift confirmed and handed on must be
// worked within a few renew periods, and a's drain end within drainBound.
func TestAGiftHandedOnBeforeItsGiverSawItConfirmedStallsNoSlot(t *testing.T) {
	r := newDrainRing(t, "a", "c", "n")
	r.dead["n"] = true // not started yet
	r.settle(30, "a and c join", "a", "c")
	a, c, n := r.ms["a"], r.ms["c"], r.ms["n"]
	s := firstSlot(t, "no slot of a's goes to n", func(i int) bool { return a.Claims().Working.Has(i) && owns("n", i, "c", "n") })
	ctx := context.Background()
	leases := a.cfg.Client.CoordinationV1().Leases("ns")
	confirmedAtC := func() bool { // c's Lease claims s, not Pending
		l, err := leases.Get(ctx, "r.c", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		claims, _ := shard.ParseSlotSet(l.Annotations[AnnotationSlots])
		pending, _ := shard.ParseSlotSet(l.Annotations[AnnotationPending])
		return claims.Minus(pending).Has(s)
	}
	// round is r.round, but a's lists fail while c's Lease shows s
	// confirmed (five at most: a LIST outage of a few seconds, its
	// renewals going through).
	missed := 0
	round := func() {
		for _, id := range r.order {
			r.now = r.now.Add(100 * time.Millisecond)
			if r.dead[id] {
				continue
			}
			m := r.ms[id]
			renewErr := renewed(m, ctx)
			if id == "a" && missed < 5 && confirmedAtC() {
				missed++
				m.lookOK = false
			} else {
				m.lookOK = m.look(ctx) == nil
			}
			if m.lookOK {
				m.looks++
			}
			m.confirmed = renewErr == nil && m.lookOK && m.ownSeen
			m.update(klog.Background())
			r.noTwoAdmit("a drains, gives s to c, n joins")
		}
		r.now = r.now.Add(time.Second - time.Duration(len(r.order))*100*time.Millisecond)
	}
	a.Drain()
	gift := 0
	for i := 1; ; i++ {
		round()
		if gift == 0 && a.Claims().Given.Has(s) {
			gift = i
			delete(r.dead, "n") // n joins as a lets s go
		}
		if n.Claims().Working.Has(s) && a.Drained() {
			t.Logf("n works slot %d and a drained %d renew periods after a gave it (a missed %d list)", s, i-gift, missed)
			return
		}
		if gift > 0 && i-gift > drainBound {
			t.Fatalf("%d renew periods after a gave slot %d to c (a missed the %d lists that showed c confirm it): a still names it given to %q %v, drained %v; c %+v; n working %v custody %v pending %v",
				i-gift, s, missed, a.givenTo[s], a.Claims().Given.Has(s), a.Drained(), c.Claims().Given.Has(s), n.Claims().Working.Has(s), n.Claims().Custody.Has(s), n.Claims().Pending.Has(s))
		}
		if i == 60 {
			t.Fatalf("a never gave slot %d: %s", s, r.claims())
		}
	}
}
