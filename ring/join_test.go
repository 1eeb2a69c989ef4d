package ring

import (
	"context"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rawwatch/shard"
)

// A joiner takes the slots it is given within a few renew periods of the
// gift: whatever Lease a hand moves meanwhile, and whatever the giver's
// gate hears of them after it let them go.

// label writes a label on every Lease of r's ring, as a GitOps tool does
// (their resourceVersions move; their holders' records do not).
func label(t *testing.T, r *drainRing, n int) {
	t.Helper()
	ctx := context.Background()
	leases := r.ms[r.order[0]].cfg.Client.CoordinationV1().Leases("ns")
	list, err := leases.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range list.Items {
		l.Labels["touched"] = fmt.Sprint(n)
		if _, err := leases.Update(ctx, &l, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// giftWhileDMoves runs a ring of a and d (lease 10 s, renew period 1 s);
// then d dies (its Lease left behind; with copy, a copy of it too, under
// another name), b joins, and a hand labels every Lease every renew
// period: d's Lease moves on, so a and b keep it current a while (a move
// may hide a renewal) and take it as claiming every slot. a gives b a slot
// s of b's share; a's gate holds a deletion of s while a watches s without
// claiming it if heardByA (the churn goes on). It returns how many renew
// periods after the gift b works s.
func giftWhileDMoves(t *testing.T, heardByA, copy bool) int {
	r := newDrainRing(t, "a", "d", "b")
	r.dead["b"] = true // not started yet
	r.settle(30, "a and d", "a", "d")
	a, b := r.ms["a"], r.ms["b"]
	s := firstSlot(t, "no slot of a's goes to b", func(i int) bool {
		return a.Claims().Working.Has(i) && owns("b", i, "a", "b", "d") && owns("b", i, "a", "b")
	})
	heard := false // a deletion of s waits in a's gate
	a.cfg.Held = func() shard.SlotSet {
		c := a.Claims()
		switch {
		case c.Working.Union(c.Releasing).Has(s): // the gate hands it to a's workers
			heard = false
		case !c.Watched().Has(s): // no longer watched: another's, dropped
			heard = false
		}
		if heard {
			return shard.SlotsOf(s)
		}
		return shard.SlotSet{}
	}
	r.dead["d"], r.dead["b"] = true, false
	if copy {
		ctx := context.Background()
		leases := a.cfg.Client.CoordinationV1().Leases("ns")
		l, err := leases.Get(ctx, "r.d", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		l.ObjectMeta = metav1.ObjectMeta{Name: "r.d-copy", Namespace: "ns", Labels: l.Labels, Annotations: l.Annotations}
		if _, err := leases.Create(ctx, l, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	gift := 0
	for i := 1; ; i++ {
		label(t, r, i)
		r.round("d dead, b joins, every Lease labelled")
		ac, bc := a.Claims(), b.Claims()
		if gift == 0 && ac.Given.Has(s) {
			gift = i
		}
		if heardByA && gift > 0 && ac.Watched().Has(s) && !ac.Claimed().Has(s) {
			heard = true // an object of s deleted; a's watch brings it
		}
		if bc.Working.Has(s) {
			if gift == 0 {
				t.Fatalf("b works slot %d before a gave it: a %+v; b %+v", s, ac, bc)
			}
			t.Logf("b works slot %d %d renew periods after a gave it; d died %d renew periods before", s, i-gift, i)
			return i - gift
		}
		if i == 100 {
			t.Fatalf("b does not work slot %d 100 renew periods after it joined (gift at %d): %s", s, gift, r.claims())
		}
	}
}

// giftWithin: a gift is confirmed (Pending after the renewal that reads
// it, Working after the list that follows the next), with a renew period
// of slack for the order of the members' rounds.
const giftWithin = 4

// d's Lease, moved by a hand since d died, counts as claiming every slot
// until each member counts d out (two lease durations after it first read
// it, at most). A slot that a, live, gave b by name was a's, claimed and
// confirmed, from before d could have claimed it: no renewal of d's that a
// move hides can have confirmed it. b takes it within a few renew periods.
func TestAJoinerTakesItsGiftWhileADeadMembersLeaseMoves(t *testing.T) {
	if took := giftWhileDMoves(t, false, false); took > giftWithin {
		t.Fatalf("b works the slot a gave it %d renew periods after the gift; want at most %d", took, giftWithin)
	}
}

// While a still watches s (its cover lingers while d's Lease counts as
// claiming every slot), deletions of s reach a's gate, which holds them
// (a watches s and does not claim it). They are b's: b covered s before
// a's sweep let s go (HandedOver), so it hears every one of them. a must
// not keep s from b on their account (a holds s, so b leaves it to a; a
// gave s, so it does not claim it) until the gift runs out
// (HandoffTimeout).
func TestAGiverThatHearsDeletionsOfASlotItGaveKeepsNoReceiverFromIt(t *testing.T) {
	if took := giftWhileDMoves(t, true, false); took > giftWithin {
		t.Fatalf("b works the slot a gave it %d renew periods after the gift (it runs out after HandoffTimeout, 40 renew periods); want at most %d", took, giftWithin)
	}
}

// The same with a copy of d's Lease under another name beside it (a stray:
// no member, its claims stand until its lease runs out), moved by the hand
// too: in doubt, what it claims is unknown, as for d's own Lease, and it
// keeps b from a's gift no more than d's does.
func TestAJoinerTakesItsGiftWhileACopyOfADeadMembersLeaseMoves(t *testing.T) {
	if took := giftWhileDMoves(t, false, true); took > giftWithin {
		t.Fatalf("b works the slot a gave it %d renew periods after the gift; want at most %d", took, giftWithin)
	}
}
