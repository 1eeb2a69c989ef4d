package ring

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"rawwatch/shard"
)

// A member that withdrew a slot holds the deletions it hears of there (its
// gate keeps them while it watches the slot) until it works the slot again.
// Here o works every slot; a copy of its Lease under another name (a hand)
// claims them all, so o withdraws them and holds the deletions of slot s;
// n joins, and s goes to n. When the copy's lease runs out, s is free: o,
// the holder, must claim it (into Releasing: it is n's now), handle what it
// held, and hand it on to n. Neither may o stop watching s while it holds
// deletions of it (they would be dropped), nor n work s before o let it go
// (n listed s after those deletions: nobody would handle them).
func TestAHolderClaimsTheFreeSlotItHoldsDeletionsOf(t *testing.T) {
	withdrawnSlotHandedOver(t, true)
}

// The same, when o's watch had not brought a deletion yet when it withdrew
// s (it lagged): o holds nothing, and still owes s's deletions. It must
// claim s again (its let-go sweeps s: the sweep finds what the watch had
// not brought) before n works it.
func TestAMemberOwesTheDeletionsOfASlotItWithdrew(t *testing.T) {
	withdrawnSlotHandedOver(t, false)
}

func withdrawnSlotHandedOver(t *testing.T, heard bool) {
	client := versionedClient()
	now := epoch
	clock := func() time.Time { return now }
	s := firstSlot(t, "no slot of n's beside o", func(i int) bool { return owns("n", i, "n", "o") }) // o's alone, n's once n joins
	holding := false                                                                                 // o's gate holds deletions of s
	join := func(id string, held func() shard.SlotSet) *Member {
		return coveringMember(t, client, id, clock, held)
	}
	ctx := context.Background()
	tick := func(m *Member) { stepMember(ctx, m, &now) }
	o := join("o", holdsIf(&holding, s))
	withdrawnByACopy(t, client, o, tick, s)
	holding = heard // a deletion in s reaches o, which no longer claims s
	owes := true    // o withdrew s: its deletions are o's until it claims s again
	n := join("n", func() shard.SlotSet { return shard.SlotSet{} })
	for i := 0; ; i++ {
		tick(n)
		tick(o)
		oc, nc := o.Claims(), n.Claims()
		if oc.Working.Union(oc.Releasing).Has(s) {
			holding, owes = false, false // claimed: the gate hands what it held to the workers
		}
		if owes && !oc.Watched().Has(s) {
			t.Fatalf("o stopped watching slot %d it withdrew before claiming it again: %+v", s, oc)
		}
		if owes && nc.Working.Has(s) {
			t.Fatalf("n works slot %d that o withdrew and never swept: o %+v, n %+v", s, oc, nc)
		}
		if holding && !oc.Watched().Has(s) {
			t.Fatalf("o stopped watching slot %d while it holds deletions of it (they are dropped): %+v", s, oc)
		}
		if holding && nc.Working.Has(s) {
			t.Fatalf("n works slot %d while o holds deletions of it that nobody handled: o %+v, n %+v", s, oc, nc)
		}
		if !owes && nc.Working.Has(s) {
			break
		}
		if i == 600 {
			t.Fatalf("slot %d not worked by n 60 s after the copy: o %+v, n %+v", s, oc, nc)
		}
	}
}

// withdrawnByACopy steps o alone until it Works every slot, then copies its
// Lease under another name (a rival claiming every slot) and steps o once:
// o withdraws its slots, s among them, and may hold deletions of s.
func withdrawnByACopy(t *testing.T, client *fake.Clientset, o *Member, tick func(*Member), s int) {
	t.Helper()
	for range 105 {
		tick(o)
	}
	if o.Claims().Working != shard.All() {
		t.Fatalf("o alone works %v, want every slot", o.Claims().Working)
	}
	ctx := context.Background()
	l, err := client.CoordinationV1().Leases("ns").Get(ctx, "r.o", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.ObjectMeta = metav1.ObjectMeta{Name: "r.o-copy", Namespace: "ns", Labels: l.Labels, Annotations: l.Annotations}
	if _, err := client.CoordinationV1().Leases("ns").Create(ctx, l, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tick(o)
	if o.Claims().Working.Has(s) {
		t.Fatalf("o still works slot %d beside a copy of its Lease: %+v", s, o.Claims())
	}
}

// holdsIf is a Held that holds deletions of slot s while *b.
func holdsIf(b *bool, s int) func() shard.SlotSet {
	return func() shard.SlotSet {
		if *b {
			return shard.SlotsOf(s)
		}
		return shard.SlotSet{}
	}
}
