package ring

import (
	"context"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"rawwatch/shard"
)

// Two members hold deletions of one free slot s, neither its owner: o, which
// withdrew s (a copy of its Lease claimed every slot) and heard a deletion D
// of it then, and a, which joined later (it listed s after D: it never heard
// of D) and holds a deletion of its own of s, heard while s was its target,
// before n joined and took s. When the copy runs out, a (first by identity)
// claims s in custody, into Releasing. o must keep watching s, and D, until
// it handles D itself: a's claim is no such thing (its sweep lists s after
// D; its store never held D's object). o's cover of s lingers while a
// claims it, and o holds s again once a lets it go.
func TestAHolderKeepsItsDeletionsWhenAnotherHolderClaimsTheSlot(t *testing.T) {
	h := newTwoHolders(t, "no slot moves from a to n", func(i int) bool { return owns("a", i, "a", "o") && owns("n", i, "a", "n", "o") })
	s, o, a, tick, join := h.s, h.o, h.a, h.tick, h.join
	for range 4 {
		tick(a)
		tick(o)
	}
	if !a.Claims().Target.Has(s) {
		t.Fatalf("a: %+v; want slot %d its target beside o", a.Claims(), s)
	}
	h.aHolds = true // E: heard by a while s is its target, not worked (the copy claims it)
	n := join("n", &h.never)
	for i := 0; ; i++ {
		tick(n)
		tick(a)
		tick(o)
		oc, ac, nc := o.Claims(), a.Claims(), n.Claims()
		if ac.Working.Union(ac.Releasing).Has(s) {
			h.aHolds = false // a's gate hands E to its workers
		}
		if oc.Working.Union(oc.Releasing).Has(s) {
			h.oHolds = false // o handles D
		}
		if h.oHolds && !oc.Watched().Has(s) {
			t.Fatalf("o stopped watching slot %d while it holds a deletion of it that no member claiming it heard of (dropped): o %+v; a %+v; n %+v", s, oc, ac, nc)
		}
		if !h.oHolds && !h.aHolds && nc.Working.Has(s) {
			break
		}
		if i == 400 {
			t.Fatalf("slot %d not worked by n 120 s after the copy: o %+v, a %+v, n %+v", s, oc, ac, nc)
		}
	}
}

// o withdrew slot s (a copy of its Lease claimed every slot) and holds a
// deletion D of it; then its watch of s breaks and relists (its cover of s
// is gone for fourteen seconds; the gate still holds D). Meanwhile n joins (s
// is n's share) and the copy runs out. o's Lease names s held all along,
// covered or not: n, which listed s after D, must leave s to o until o
// has handled D (o claims s once it covers it again), and o must keep
// watching s until then.
func TestAHolderWhoseWatchRelistsKeepsItsSlot(t *testing.T) {
	client := versionedClient()
	now := epoch
	clock := func() time.Time { return now }
	s := firstSlot(t, "no slot of n's beside o", func(i int) bool { return owns("n", i, "n", "o") })
	holding, relisting := false, false
	join := func(id string, held func() shard.SlotSet) *Member {
		m := coveringMember(t, client, id, clock, held)
		m.cfg.Covers = func() Cover { // o's cover of s lapses while it relists
			c := m.Claims()
			w := c.Watched().Minus(c.Lingering)
			if id == "o" && relisting {
				w = w.Minus(shard.SlotsOf(s))
			}
			return Cover{Slots: w, Since: 50, Synced: 200}
		}
		return m
	}
	ctx := context.Background()
	tick := func(m *Member) { stepMember(ctx, m, &now) }
	o := join("o", holdsIf(&holding, s))
	withdrawnByACopy(t, client, o, tick, s)
	holding = true // D
	n := join("n", func() shard.SlotSet { return shard.SlotSet{} })
	for i := 0; ; i++ {
		// o's watch of s relists from 2 s after the copy to 16 s after
		// it, over the copy's end.
		relisting = i >= 10 && i < 80
		tick(n)
		tick(o)
		oc, nc := o.Claims(), n.Claims()
		if oc.Working.Union(oc.Releasing).Has(s) {
			holding = false
		}
		if holding && !oc.Watched().Has(s) {
			t.Fatalf("o stopped watching slot %d while it holds a deletion of it nobody handled (dropped), at %d: o %+v; n %+v", s, i, oc, nc)
		}
		if holding && nc.Working.Has(s) {
			t.Fatalf("n works slot %d while o holds a deletion of it n never heard of, at %d: o %+v; n %+v", s, i, oc, nc)
		}
		if !holding && nc.Working.Has(s) {
			break
		}
		if i == 600 {
			t.Fatalf("slot %d not worked by n 60 s after the copy: o %+v, n %+v", s, oc, nc)
		}
	}
}

// A holds annotation written by hand on a live member's Lease, naming every
// slot, while the slots of a dead member are free: the others leave those
// slots to it, and it hands none on (it holds nothing); its next renewal
// writes the annotation back, and the slots are worked within a few renew
// periods. No slot is admitted by two members meanwhile.
func TestAHoldsAnnotationWrittenByHandStallsNoSlotForLong(t *testing.T) {
	r := newDrainRing(t, "a", "b", "c")
	r.settle(30, "a, b and c join", "a", "b", "c")
	r.dead["c"] = true
	r.order = []string{"b", "a", "c"} // b lists after the hand wrote, before a renews
	for range 8 {
		r.round("c dead")
	}
	ctx := context.Background()
	for range 6 { // written again after each of a's renewals, for a while
		l, err := r.ms["a"].cfg.Client.CoordinationV1().Leases("ns").Get(ctx, "r.a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		l.Annotations[AnnotationHolds] = "0-255"
		if _, err := r.ms["a"].cfg.Client.CoordinationV1().Leases("ns").Update(ctx, l, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		r.round("a's Lease says it holds every slot")
	}
	took := r.settle(10, "the hand's annotation gone", "a", "b")
	t.Logf("a and b work every slot %d renew periods after the hand stopped", took)
}

// o withdrew slot s (a copy of its Lease claimed every slot) and holds a
// deletion of it that always fails (its reconciler errs). Once the copy
// runs out o claims s in custody, into Releasing; the deletion fails on:
// o lets s go once it is overdue (HandoffTimeout), and n, whose share s
// is, works it; o neither keeps s claimed for ever nor claims it again.
func TestAHolderWhoseDeletionAlwaysFailsLetsTheSlotGo(t *testing.T) {
	client := versionedClient()
	now := epoch
	clock := func() time.Time { return now }
	s := firstSlot(t, "no slot of n's beside o", func(i int) bool { return owns("n", i, "n", "o") })
	holding, failing := false, false
	join := func(id string, held func() shard.SlotSet, busy func() (_, _ shard.SlotSet)) *Member {
		m := coveringMember(t, client, id, clock, held)
		m.cfg.Busy = busy
		return m
	}
	ctx := context.Background()
	tick := func(m *Member) { stepMember(ctx, m, &now) }
	var o *Member
	o = join("o", holdsIf(&holding, s), func() (busy, fail shard.SlotSet) {
		if failing && o.Claims().Releasing.Has(s) {
			fail = shard.SlotsOf(s)
		}
		return
	})
	withdrawnByACopy(t, client, o, tick, s)
	holding = true
	n := join("n", func() shard.SlotSet { return shard.SlotSet{} }, func() (_, _ shard.SlotSet) { return })
	claimed := false
	for i := 0; ; i++ {
		tick(n)
		tick(o)
		oc, nc := o.Claims(), n.Claims()
		if oc.Releasing.Has(s) {
			holding, failing, claimed = false, true, true
		}
		if claimed && nc.Working.Has(s) {
			t.Logf("n works slot %d %.1f s after the copy", s, float64(i)*0.2)
			break
		}
		if i == 1000 { // 200 s: the copy's lease, a HandoffTimeout, and slack
			t.Fatalf("slot %d not worked by n 200 s after the copy (o claimed it: %v): o %+v; n %+v", s, claimed, oc, nc)
		}
	}
	for range 100 {
		tick(n)
		tick(o)
		if oc := o.Claims(); oc.Claimed().Has(s) {
			t.Fatalf("o claims slot %d again after letting it go to n: %+v", s, oc)
		}
	}
}

// Two members, a and b, hold deletions of slot s, neither its owner; s's
// worker c dies, and so does a, the first holder by identity, just after.
// b must claim s once a's lease runs out (handling what it held) before
// o, s's owner, works it; and o works it within a few leases.
func TestTheSecondHolderTakesTheSlotWhenTheFirstDies(t *testing.T) {
	r := newDrainRing(t, "a", "b", "c", "o")
	r.settle(30, "a, b, c and o join", "a", "b", "c", "o")
	s := firstSlot(t, "no slot of c's goes to o", func(i int) bool {
		return r.ms["c"].Claims().Working.Has(i) && owns("o", i, "b", "o") && owns("o", i, "a", "b", "o")
	})
	r.held["a"], r.held["b"] = shard.SlotsOf(s), shard.SlotsOf(s)
	r.dead["c"] = true
	r.round("c dead")
	r.dead["a"] = true
	for i := 1; ; i++ {
		r.round("c and a dead")
		if r.ms["o"].Claims().Working.Has(s) {
			if !r.held["b"].Empty() {
				t.Fatalf("o works slot %d after %d renew periods while b still holds deletions of it: %s", s, i, r.claims())
			}
			t.Logf("o works slot %d %d renew periods after c died", s, i+1)
			return
		}
		if i == 40 {
			t.Fatalf("o does not work slot %d 40 renew periods after c and a died: %s", s, r.claims())
		}
	}
}

// o withdrew slot s (a copy of its Lease claimed every slot) and holds a
// deletion D of it; then its watch of s relists and never covers s again
// (each list is cut short: a 410 loop, a list that always times out). n,
// whose share s is, leaves s to o while o's Lease names it held, covered
// or not; o cannot claim s uncovered. Some member must still work s within
// a bounded time (a holder, like a gift, cannot keep a slot from everyone
// for good): here, three HandoffTimeouts after the copy ran out.
func TestAHolderWhoseWatchNeverCoversAgainKeepsNoSlotForever(t *testing.T) {
	client := versionedClient()
	now := epoch
	clock := func() time.Time { return now }
	s := firstSlot(t, "no slot of n's beside o", func(i int) bool { return owns("n", i, "n", "o") })
	relisting := false
	join := func(id string, held func() shard.SlotSet) *Member {
		m := coveringMember(t, client, id, clock, held)
		m.cfg.Covers = func() Cover { // o's cover of s lapses for good
			c := m.Claims()
			w := c.Watched().Minus(c.Lingering)
			if id == "o" && relisting {
				w = w.Minus(shard.SlotsOf(s))
			}
			return Cover{Slots: w, Since: 50, Synced: 200}
		}
		return m
	}
	ctx := context.Background()
	tick := func(m *Member) { stepMember(ctx, m, &now) }
	holding := false
	o := join("o", holdsIf(&holding, s))
	withdrawnByACopy(t, client, o, tick, s)
	holding = true // D
	n := join("n", func() shard.SlotSet { return shard.SlotSet{} })
	handoff := n.cfg.HandoffTimeout
	for i := 0; ; i++ {
		relisting = i >= 10 // 2 s after the copy, for good
		tick(n)
		tick(o)
		oc, nc := o.Claims(), n.Claims()
		if oc.Working.Union(oc.Releasing).Union(nc.Working).Has(s) {
			t.Logf("slot %d worked %v after the copy", s, time.Duration(i)*200*time.Millisecond)
			return
		}
		if time.Duration(i)*200*time.Millisecond > 3*handoff+20*time.Second {
			t.Fatalf("slot %d worked by nobody %v after the copy (its lease 10 s, HandoffTimeout %v): o holding %v covers %v; n target %v pending %v; o %+v",
				s, time.Duration(i)*200*time.Millisecond, handoff, oc.Holding.Has(s), o.cfg.Covers().Slots.Has(s), nc.Target.Has(s), nc.Pending.Has(s), oc)
		}
	}
}

// o withdrew slot s (a copy of its Lease claimed every slot) and holds a
// deletion D of it; a joined after D (it listed s later: it never heard of
// D) and holds a deletion of its own of s, heard while s was its target
// and the copy claimed it; n joined, s its share. When the copy runs out,
// a, first holder by identity, claims s into Releasing. Then o drains (a
// rolling update). Its drain must not end while it still holds D, which
// nobody claiming s heard of: a leave reports what it holds abandoned (its
// owner "heard of them too"), and D would reach no replica.
func TestAHolderThatDrainsWhileAnotherHolderClaimsTheSlotKeepsItsDeletion(t *testing.T) {
	h := newTwoHolders(t, "no slot moves from a to n", func(i int) bool {
		return owns("a", i, "a", "o") && owns("n", i, "a", "n", "o") && owns("n", i, "a", "n")
	})
	s, o, a, tick, join := h.s, h.o, h.a, h.tick, h.join
	for range 4 {
		tick(a)
		tick(o)
	}
	h.aHolds = true // E
	n := join("n", &h.never)
	draining, began := false, 0
	for i := 0; ; i++ {
		tick(n)
		tick(a)
		tick(o)
		oc, ac := o.Claims(), a.Claims()
		if ac.Working.Union(ac.Releasing).Has(s) {
			h.aHolds = false
			if !draining && h.oHolds {
				draining, began = true, i
				o.Drain()
				t.Logf("a claims slot %d (%+v); o, holding D, drains", s, ac.Claimed().Has(s))
			}
		}
		if oc.Working.Union(oc.Releasing).Has(s) {
			h.oHolds = false // o handles D
		}
		if draining && o.Drained() {
			if h.oHolds {
				t.Fatalf("o drained (its leave reports D abandoned) while it holds D of slot %d, which a, claiming it, never heard of: o %+v; a claims %v", s, oc, ac.Claimed().Has(s))
			}
			t.Logf("o drained %v after its drain began, D handled", time.Duration(i-began)*300*time.Millisecond)
			return
		}
		if i == 400 {
			t.Fatalf("o not drained 80 s after the copy (draining %v), holding D %v: o %+v; a %+v", draining, h.oHolds, oc, ac)
		}
	}
}

// As above (o holds D of slot s, which a listed after; a claims s first,
// into Releasing, holding E), but a's workers take a few renew periods
// over E (a backlog, a deletion retried twice): s stays busy at a a while.
// Meanwhile o's Lease stops naming s held (a works it), so a, letting s
// go, names n, s's owner, its new owner by name; and a slot given by name
// is left to its receiver whatever others hold of it. But a never heard of
// D: n must not work s while o still holds D, or D reaches no replica.
func TestAHolderKeepsItsDeletionWhenAnotherHolderHandsTheSlotOnSlowly(t *testing.T) {
	h := newTwoHolders(t, "no slot moves from a to n", func(i int) bool { return owns("a", i, "a", "o") && owns("n", i, "a", "n", "o") })
	busyUntil := time.Time{} // a's workers on E
	s, o, a, tick, join := h.s, h.o, h.a, h.tick, h.join
	a.cfg.Busy = func() (busy, _ shard.SlotSet) {
		if h.now.Before(busyUntil) {
			busy = shard.SlotsOf(s)
		}
		return
	}
	for range 4 {
		tick(a)
		tick(o)
	}
	h.aHolds = true // E
	n := join("n", &h.never)
	for i := 0; ; i++ {
		tick(n)
		tick(a)
		tick(o)
		oc, ac, nc := o.Claims(), a.Claims(), n.Claims()
		if h.aHolds && ac.Working.Union(ac.Releasing).Has(s) {
			h.aHolds = false // a's gate hands E to its workers: busy 3 s
			busyUntil = h.now.Add(3 * time.Second)
		}
		if oc.Working.Union(oc.Releasing).Has(s) {
			h.oHolds = false // o handles D
		}
		if h.oHolds && nc.Working.Has(s) {
			t.Fatalf("n works slot %d while o holds D of it, which neither n nor a (which gave n the slot) heard of: o holding %v; a gave it to %q; n %+v",
				s, oc.Holding.Has(s), a.givenTo[s], nc.Working.Has(s))
		}
		if !h.oHolds && nc.Working.Has(s) {
			return
		}
		if i == 400 {
			t.Fatalf("slot %d not worked by n 120 s after the copy: o %+v, a %+v, n %+v", s, oc, ac, nc)
		}
	}
}

// How long a hold stands: a holder that cannot cover its slot does not
// keep it for good (holds_claims_test.go), and a fence is no such stretch.

// o withdrew slot s (a copy of its Lease claimed every slot) and holds a
// deletion D of it; n joins, s its share. Then the API server is down
// longer than HandoffTimeout: both fence, and o's watch covers nothing
// while fenced. When it comes back, o's hold must stand (it was nobody's
// holder while fenced, not a holder that never covers): o claims s and
// handles D before n works s.
func TestAHoldOutlastsAnOutageLongerThanHandoffTimeout(t *testing.T) {
	client := versionedClient()
	down := false
	client.PrependReactor("*", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if down {
			return true, nil, errors.New("the API server is down")
		}
		return false, nil, nil
	})
	now := epoch
	clock := func() time.Time { return now }
	s := firstSlot(t, "no slot of n's beside o", func(i int) bool { return owns("n", i, "n", "o") })
	holding := false
	ctx := context.Background()
	tick := func(m *Member) { stepMember(ctx, m, &now) }
	o := coveringMember(t, client, "o", clock, holdsIf(&holding, s))
	withdrawnByACopy(t, client, o, tick, s)
	holding = true // D
	n := coveringMember(t, client, "n", clock, func() shard.SlotSet { return shard.SlotSet{} })
	outage := o.cfg.HandoffTimeout + 10*time.Second
	for i := 0; ; i++ {
		elapsed := time.Duration(i) * 200 * time.Millisecond
		down = elapsed >= 4*time.Second && elapsed < 4*time.Second+outage
		tick(n)
		tick(o)
		oc, nc := o.Claims(), n.Claims()
		if oc.Working.Union(oc.Releasing).Has(s) {
			t.Logf("o claims slot %d %v after the copy, %v after the outage", s, elapsed, elapsed-4*time.Second-outage)
			return
		}
		if nc.Working.Has(s) {
			t.Fatalf("n works slot %d %v after the copy (the outage %v) while o holds D of it, which n never heard of: o holding %v",
				s, elapsed, outage, oc.Holding.Has(s))
		}
		if elapsed > outage+60*time.Second {
			t.Fatalf("slot %d claimed by neither %v after the copy: o %+v", s, elapsed, oc)
		}
	}
}

// twoHolders: o works every slot alone, withdraws them beside a copy of
// its Lease and holds a deletion D of slot s; a joins (not yet stepped).
type twoHolders struct {
	t                     *testing.T
	client                *fake.Clientset
	now                   time.Time
	s                     int
	oHolds, aHolds, never bool // never: n holds nothing
	o, a                  *Member
}

// newTwoHolders sets the scene on s, the first slot for which is holds.
func newTwoHolders(t *testing.T, why string, is func(i int) bool) *twoHolders {
	h := &twoHolders{t: t, client: versionedClient(), now: epoch}
	h.s = firstSlot(t, why, is)
	h.o = h.join("o", &h.oHolds)
	withdrawnByACopy(t, h.client, h.o, h.tick, h.s)
	h.oHolds = true // D: heard by o, which no longer claims s; before a listed s
	h.a = h.join("a", &h.aHolds)
	return h
}

func (h *twoHolders) join(id string, held *bool) *Member {
	return coveringMember(h.t, h.client, id, func() time.Time { return h.now }, holdsIf(held, h.s))
}

func (h *twoHolders) tick(m *Member) { stepMember(context.Background(), m, &h.now) }
