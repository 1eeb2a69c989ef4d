package ring

import (
	"context"
	"testing"
	"time"

	"rawwatch/shard"
)

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
	client := versionedClient()
	now := epoch
	clock := func() time.Time { return now }
	s := firstSlot(t, "no slot moves from a to n", func(i int) bool {
		return owns("a", i, "a", "o") && owns("n", i, "a", "n", "o") && owns("n", i, "a", "n")
	})
	oHolds, aHolds := false, false // D at o, E at a
	join := func(id string, held *bool) *Member {
		return coveringMember(t, client, id, clock, holdsIf(held, s))
	}
	ctx := context.Background()
	tick := func(m *Member) { stepMember(ctx, m, &now) }
	var never bool
	o := join("o", &oHolds)
	withdrawnByACopy(t, client, o, tick, s)
	oHolds = true // D: heard by o, which no longer claims s; before a listed s
	a := join("a", &aHolds)
	for range 4 {
		tick(a)
		tick(o)
	}
	aHolds = true // E
	n := join("n", &never)
	draining, began := false, 0
	for i := 0; ; i++ {
		tick(n)
		tick(a)
		tick(o)
		oc, ac := o.Claims(), a.Claims()
		if ac.Working.Union(ac.Releasing).Has(s) {
			aHolds = false
			if !draining && oHolds {
				draining, began = true, i
				o.Drain()
				t.Logf("a claims slot %d (%+v); o, holding D, drains", s, ac.Claimed().Has(s))
			}
		}
		if oc.Working.Union(oc.Releasing).Has(s) {
			oHolds = false // o handles D
		}
		if draining && o.Drained() {
			if oHolds {
				t.Fatalf("o drained (its leave reports D abandoned) while it holds D of slot %d, which a, claiming it, never heard of: o %+v; a claims %v", s, oc, ac.Claimed().Has(s))
			}
			t.Logf("o drained %v after its drain began, D handled", time.Duration(i-began)*300*time.Millisecond)
			return
		}
		if i == 400 {
			t.Fatalf("o not drained 80 s after the copy (draining %v), holding D %v: o %+v; a %+v", draining, oHolds, oc, ac)
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
	client := versionedClient()
	now := epoch
	clock := func() time.Time { return now }
	s := firstSlot(t, "no slot moves from a to n", func(i int) bool { return owns("a", i, "a", "o") && owns("n", i, "a", "n", "o") })
	oHolds, aHolds := false, false // D at o, E at a
	busyUntil := time.Time{}       // a's workers on E
	join := func(id string, held *bool) *Member {
		return coveringMember(t, client, id, clock, holdsIf(held, s))
	}
	ctx := context.Background()
	tick := func(m *Member) { stepMember(ctx, m, &now) }
	var never bool
	o := join("o", &oHolds)
	withdrawnByACopy(t, client, o, tick, s)
	oHolds = true // D: heard by o, which no longer claims s; before a listed s
	a := join("a", &aHolds)
	a.cfg.Busy = func() (busy, _ shard.SlotSet) {
		if now.Before(busyUntil) {
			busy = shard.SlotsOf(s)
		}
		return
	}
	for range 4 {
		tick(a)
		tick(o)
	}
	aHolds = true // E
	n := join("n", &never)
	for i := 0; ; i++ {
		tick(n)
		tick(a)
		tick(o)
		oc, ac, nc := o.Claims(), a.Claims(), n.Claims()
		if aHolds && ac.Working.Union(ac.Releasing).Has(s) {
			aHolds = false // a's gate hands E to its workers: busy 3 s
			busyUntil = now.Add(3 * time.Second)
		}
		if oc.Working.Union(oc.Releasing).Has(s) {
			oHolds = false // o handles D
		}
		if oHolds && nc.Working.Has(s) {
			t.Fatalf("n works slot %d while o holds D of it, which neither n nor a (which gave n the slot) heard of: o holding %v; a gave it to %q; n %+v",
				s, oc.Holding.Has(s), a.givenTo[s], nc.Working.Has(s))
		}
		if !oHolds && nc.Working.Has(s) {
			return
		}
		if i == 400 {
			t.Fatalf("slot %d not worked by n 120 s after the copy: o %+v, a %+v, n %+v", s, oc, ac, nc)
		}
	}
}
