package ring

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"

	"rawwatch/shard"
)

// drainRing is members on one fake server, stepped by hand on one clock
// (lease 10 s, renew period 1 s): each cache covers what its member
// watches at once, every sweep is done at once.
type drainRing struct {
	t       *testing.T
	now     time.Time
	ms      map[string]*Member
	order   []string
	dead    map[string]bool // stepped no more (killed)
	failing map[string]bool // its Lease's writes fail
	// requests counts each member's requests on Leases.
	requests map[string]int
	// held: the slots whose deletions each member's gate holds, until it
	// claims them (Working or Releasing: the gate hands them on).
	held map[string]shard.SlotSet
	// deleting: a deletion in every slot every renew period, which each
	// member's gate holds if it watches the slot and does not claim it.
	deleting bool
}

func newDrainRing(t *testing.T, ids ...string) *drainRing {
	r := &drainRing{t: t, now: epoch, ms: map[string]*Member{}, dead: map[string]bool{}, failing: map[string]bool{}, requests: map[string]int{}, held: map[string]shard.SlotSet{}}
	client := versionedClient()
	client.PrependReactor("*", "leases", func(act k8stesting.Action) (bool, runtime.Object, error) {
		name := ""
		if w, ok := act.(interface{ GetObject() runtime.Object }); ok {
			if o, ok := w.GetObject().(interface{ GetName() string }); ok {
				name = o.GetName()
			}
		}
		if id, ok := strings.CutPrefix(name, "r."); ok && r.failing[id] {
			return true, nil, errors.New("the Lease API fails for this member")
		}
		return false, nil, nil
	})
	for _, id := range ids {
		r.ms[id] = coveringMember(t, client, id, func() time.Time { return r.now }, func() shard.SlotSet {
			c := r.ms[id].Claims()
			r.held[id] = r.held[id].Minus(c.Working.Union(c.Releasing))
			return r.held[id]
		})
		r.order = append(r.order, id)
	}
	return r
}

// round is one renew period: each live member renews, lists and steps, a
// tenth of it apart; after each step no slot is admitted (Working or
// Releasing: a deletion of it may be handled) by two members.
func (r *drainRing) round(when string) {
	ctx := context.Background()
	for _, id := range r.order {
		r.now = r.now.Add(100 * time.Millisecond)
		if r.dead[id] {
			continue
		}
		m := r.ms[id]
		if r.deleting {
			c := m.Claims()
			r.held[id] = r.held[id].Union(c.Watched()).And(c.Watched()).Minus(c.Working.Union(c.Releasing))
		}
		r.requests[id] += 2 // a GET and an UPDATE (or CREATE)
		renewErr := renewed(m, ctx)
		r.requests[id]++
		m.lookOK = m.look(ctx) == nil
		if m.lookOK {
			m.looks++
		}
		m.confirmed = renewErr == nil && m.lookOK && m.ownSeen
		m.update(klog.Background())
		r.noTwoAdmit(when)
	}
	r.now = r.now.Add(time.Second - time.Duration(len(r.order))*100*time.Millisecond)
}

// leave ends a drained member's Run as its leave does: its claims dropped,
// its Lease marked leaving, a round for the others to read the mark, and
// its Lease deleted.
func (r *drainRing) leave(id string) {
	r.t.Helper()
	m := r.ms[id]
	given, _ := m.quit()
	rv, err := m.markLeaving(given)
	if err != nil {
		r.t.Fatalf("%s: marking its Lease leaving: %v", id, err)
	}
	r.dead[id] = true
	r.round(id + " leaves")
	err = m.cfg.Client.CoordinationV1().Leases("ns").Delete(context.Background(), m.leaseName(), metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
	if err != nil {
		r.t.Fatalf("%s: deleting its Lease: %v", id, err)
	}
}

func (r *drainRing) noTwoAdmit(when string) {
	r.t.Helper()
	var seen shard.SlotSet
	for _, id := range r.order {
		if r.dead[id] {
			continue
		}
		c := r.ms[id].Claims()
		admitted := c.Working.Union(c.Releasing)
		if both := seen.And(admitted); !both.Empty() {
			r.t.Fatalf("%s: slots %v admitted by %s and another member at once: %s", when, both, id, r.claims())
		}
		seen = seen.Union(admitted)
	}
}

func (r *drainRing) claims() string {
	var b strings.Builder
	for _, id := range r.order {
		c := r.ms[id].Claims()
		fmt.Fprintf(&b, "%s working %d releasing %d pending %d given %d custody %d holding %d; ", id,
			c.Working.Len(), c.Releasing.Len(), c.Pending.Len(), c.Given.Len(), c.Custody.Len(), c.Holding.Len())
	}
	return b.String()
}

// settle runs rounds until the live members work every slot between them.
func (r *drainRing) settle(limit int, when string, ids ...string) int {
	r.t.Helper()
	for i := 1; ; i++ {
		r.round(when)
		var all shard.SlotSet
		for _, id := range ids {
			all = all.Union(r.ms[id].Claims().Working)
		}
		if all == shard.All() {
			return i
		}
		if i == limit {
			r.t.Fatalf("%s: %s do not work every slot after %d renew periods: %s", when, ids, limit, r.claims())
		}
	}
}

// drained runs rounds until each of ids has handed everything over.
func (r *drainRing) drained(limit int, when string, ids ...string) int {
	r.t.Helper()
	for i := 1; ; i++ {
		r.round(when)
		done := true
		for _, id := range ids {
			done = done && r.ms[id].Drained()
		}
		if done {
			return i
		}
		if i == limit {
			r.t.Fatalf("%s: %v not drained after %d renew periods: %s", when, ids, limit, r.claims())
		}
	}
}

// drainBound is the most renew periods a drain takes here (quick caches,
// quick sweeps): the others read the mark and cover the slots (a list, a
// renewal), the drainer sweeps and lets go (a list, a step), the new
// owner claims and confirms (a renewal, a list), and writes it confirmed
// (a renewal) for the drainer's list to read: six steps, each of which
// may wait up to a round for another member's step (eight measured here),
// and two of slack.
const drainBound = 10

// A member that drains hands every slot over through the handoff, within
// drainBound renew periods, making no request more than a member's three
// a renew period; no slot is admitted by it and another member at once;
// the members that stay work every slot.
func TestADrainingMemberHandsEverySlotOver(t *testing.T) {
	r := newDrainRing(t, "a", "b", "c")
	r.settle(30, "a, b and c join", "a", "b", "c")
	before := r.requests["a"]
	r.ms["a"].Drain()
	took := r.drained(drainBound, "a drains", "a")
	if n := r.requests["a"] - before; n > 3*took {
		t.Errorf("a made %d requests on Leases in the %d renew periods of its drain; want at most %d", n, took, 3*took)
	}
	if c := r.ms["a"].Claims(); !c.Claimed().Empty() {
		t.Errorf("a drained, still claiming %v", c.Claimed())
	}
	r.settle(4, "after a drained", "b", "c")
	t.Logf("a drained in %d renew periods", took)
}

// Two members drain at once: each hands its slots to the one that stays,
// never to the other (it has no share), within the same bound.
func TestTwoMembersDrainingAtOnceHandOverToTheOneThatStays(t *testing.T) {
	r := newDrainRing(t, "a", "b", "c")
	r.settle(30, "a, b and c join", "a", "b", "c")
	r.ms["a"].Drain()
	r.ms["b"].Drain()
	r.drained(drainBound, "a and b drain", "a", "b")
	if w := r.ms["c"].Claims().Working; w != shard.All() {
		t.Errorf("c works %v after a and b drained, want every slot", w)
	}
}

// The member a drainer's slots go to dies mid-handoff (it covered them,
// and stops): once the others count it out, the slots go to the member
// that stays, and the drainer hands them over to it; at no instant do two
// live members admit one slot.
func TestADrainWhoseSuccessorDiesHandsOverToTheNext(t *testing.T) {
	r := newDrainRing(t, "a", "b", "c")
	r.settle(30, "a, b and c join", "a", "b", "c")
	r.ms["a"].Drain()
	r.round("a drains")
	r.round("a drains")
	r.dead["b"] = true
	// b's lease (10 s), then the handoff to c.
	r.drained(10+drainBound, "a drains, b dead", "a")
	r.settle(20, "a drained, b dead", "c")
}

// A drainer whose renewals fail fences itself at its deadline, as any
// member does: from then on it admits nothing, and the others take its
// slots only after they counted it out; at no instant does it admit a
// slot another member admits.
func TestADrainerWhoseRenewalsFailFences(t *testing.T) {
	r := newDrainRing(t, "a", "b", "c")
	r.settle(30, "a, b and c join", "a", "b", "c")
	r.ms["a"].Drain()
	r.round("a drains")
	r.failing["a"] = true
	for i := 0; i < 30; i++ {
		r.round("a drains, its renewals failing")
	}
	if c := r.ms["a"].Claims(); !c.Claimed().Empty() {
		t.Errorf("a still claims %v 30 s after its renewals began to fail", c.Claimed())
	}
	r.settle(4, "after a fenced", "b", "c")
}

// A draining mark written by hand on a live member's Lease (its value
// bound to the Lease's renewTime, as the member would write it), again
// after each of its renewals for a while: the others divide the slots
// without it, but it still works them, so nobody takes one; its renewals
// write the mark away, and the ring is as before within a few renew
// periods. No slot is admitted by two members at any step.
func TestADrainingMarkWrittenByHandOnALiveLeaseSplitsNoSlot(t *testing.T) {
	r := newDrainRing(t, "a", "b", "c")
	r.settle(30, "a, b and c join", "a", "b", "c")
	r.order = []string{"a", "c", "b"} // a and c list after the hand wrote, before b renews
	before := r.ms["b"].Claims().Working
	ctx := context.Background()
	client := r.ms["b"].cfg.Client
	for range 8 {
		l, err := client.CoordinationV1().Leases("ns").Get(ctx, "r.b", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		l.Annotations[AnnotationDraining] = mark(l.Spec.RenewTime.Time)
		if _, err := client.CoordinationV1().Leases("ns").Update(ctx, l, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		r.round("b's Lease marked draining by hand")
	}
	for range 4 {
		r.round("the hand stopped")
	}
	if w := r.ms["b"].Claims().Working; w != before {
		t.Errorf("b works %v after the hand stopped, want %v as before", w, before)
	}
	r.settle(4, "the hand stopped", "a", "b", "c")
}

// A drainer fenced (its renewals fail past its deadline) whose renewals
// then recover, and which is asked to drain a second time (a second
// SIGTERM): it claims nothing again (it has no share), the others work
// every slot, and it counts as drained at once.
func TestADrainerFencedThenRenewingAgainClaimsNothing(t *testing.T) {
	r := newDrainRing(t, "a", "b", "c")
	r.settle(30, "a, b and c join", "a", "b", "c")
	r.ms["a"].Drain()
	r.round("a drains")
	r.failing["a"] = true
	for range 15 {
		r.round("a drains, its renewals failing")
	}
	r.failing["a"] = false
	r.ms["a"].Drain()
	for range 5 {
		r.round("a drains, renewing again")
		if c := r.ms["a"].Claims(); !c.Claimed().Empty() {
			t.Fatalf("a, draining, claims %v once its renewals recover: %s", c.Claimed(), r.claims())
		}
	}
	if !r.ms["a"].Drained() {
		t.Errorf("a not drained 5 renew periods after its renewals recovered: %s", r.claims())
	}
	r.settle(4, "after a fenced", "b", "c")
}

// a drains; slot s goes from a to c. h (not s's owner) holds a deletion of
// s, heard while it watched s, which counts only once a no longer works s:
// at a's let-go. From then on h's Lease names s held, so c leaves s to h,
// though a gave it to c by name; and h cannot claim s, given to c. Neither
// may the drain wait for a given slot's HandoffTimeout: it must end within
// drainBound renew periods, and s be worked by c.
func TestADrainWhoseSlotAnotherMemberHoldsEndsInTime(t *testing.T) {
	r := newDrainRing(t, "a", "c", "h")
	r.settle(30, "a, c and h join", "a", "c", "h")
	s := firstSlot(t, "no slot of a's goes to c", func(i int) bool { return r.ms["a"].Claims().Working.Has(i) && owns("c", i, "c", "h") })
	r.order = []string{"a", "h", "c"} // h renews before c lists
	r.held["h"] = shard.SlotsOf(s)
	r.ms["a"].Drain()
	for i := 1; ; i++ {
		r.round("a drains, h holding a deletion of its slot")
		if r.ms["a"].Drained() {
			t.Logf("a drained in %d renew periods; c works slot %d: %v", i, s, r.ms["c"].Claims().Working.Has(s))
			break
		}
		if i == drainBound {
			c, h := r.ms["c"].Claims(), r.ms["h"].Claims()
			t.Fatalf("a not drained after %d renew periods: slot %d given %v by a, c pending %v custody %v working %v, h holding %v claimed %v: %s",
				i, s, r.ms["a"].Claims().Given.Has(s), c.Pending.Has(s), c.Custody.Has(s), c.Working.Has(s), h.Holding.Has(s), h.Claimed().Has(s), r.claims())
		}
	}
}

// A rolling update, as a Deployment with one pod of surge runs it: n1
// joins; each old member drains once the previous new one is up (two
// renew periods after it joined), while the next new one joins; each
// leaves once drained. Deletions come in every slot, every renew period:
// every member holds one of each slot it watches and does not claim (its
// gate keeps them while it watches the slot). Each drain must end within
// drainBound renew periods, at most three requests a renew period, no slot
// admitted by two members at once, and the new members work every slot;
// whatever order the members step in within a renew period.
func TestARollingUpdateDrainsEachMemberInTime(t *testing.T) {
	for _, order := range [][]string{
		{"a", "b", "c", "n1", "n2", "n3"},
		{"n1", "n2", "n3", "a", "b", "c"},
		{"n3", "n2", "n1", "c", "b", "a"},
		{"c", "b", "a", "n3", "n2", "n1"},
		{"a", "n1", "b", "n2", "c", "n3"},
		{"n1", "a", "n2", "b", "n3", "c"},
		{"b", "n2", "c", "n1", "a", "n3"},
		{"n3", "c", "n1", "b", "n2", "a"},
	} {
		t.Run(strings.Join(order, ","), func(t *testing.T) { rollingUpdate(t, order) })
	}
}

func rollingUpdate(t *testing.T, order []string) {
	r := newDrainRing(t, order...)
	r.deleting = true
	for _, id := range []string{"n1", "n2", "n3"} {
		r.dead[id] = true // not started yet
	}
	r.settle(30, "a, b and c join", "a", "b", "c")
	delete(r.dead, "n1")
	r.round("n1 joins")
	r.round("n1 joins")
	for i, old := range []string{"a", "b", "c"} {
		if i < 2 {
			delete(r.dead, []string{"n2", "n3"}[i])
		}
		before := r.requests[old]
		r.ms[old].Drain()
		took := r.drained(drainBound, old+" drains, a new member joining", old)
		if n := r.requests[old] - before; n > 3*took {
			t.Errorf("%s made %d requests on Leases in the %d renew periods of its drain; want at most %d", old, n, took, 3*took)
		}
		t.Logf("%s drained in %d renew periods", old, took)
		r.leave(old)
	}
	took := r.settle(30, "after the update", "n1", "n2", "n3")
	t.Logf("n1, n2 and n3 work every slot %d renew periods after c left", took)
}

// A rolling update that changes --sharding-lease-duration (within the
// factor of four docs/sharding.md calls safe): the new members n1..n3
// write newLease, the old ones 10 s. Each drain must still end within
// drainBound renew periods, no slot admitted by two members at once.
func rollingUpdateWithLease(t *testing.T, newLease time.Duration) {
	for _, order := range [][]string{
		{"a", "b", "c", "n1", "n2", "n3"},
		{"n1", "n2", "n3", "a", "b", "c"},
		{"n3", "c", "n1", "b", "n2", "a"},
	} {
		t.Run(strings.Join(order, ","), func(t *testing.T) { rollingUpdateOrdered(t, newLease, order) })
	}
}

func rollingUpdateOrdered(t *testing.T, newLease time.Duration, order []string) {
	r := newDrainRing(t, order...)
	r.deleting = true
	for _, id := range []string{"n1", "n2", "n3"} {
		m := r.ms[id]
		m.cfg.LeaseDuration, m.cfg.HandoffTimeout, m.longest = newLease, 4*newLease, newLease
		r.dead[id] = true // not started yet
	}
	r.settle(30, "a, b and c join", "a", "b", "c")
	delete(r.dead, "n1")
	r.round("n1 joins")
	r.round("n1 joins")
	for i, old := range []string{"a", "b", "c"} {
		if i < 2 {
			delete(r.dead, []string{"n2", "n3"}[i])
		}
		r.ms[old].Drain()
		took := r.drained(drainBound, old+" drains, a new member joining", old)
		t.Logf("%s drained in %d renew periods", old, took)
		r.leave(old)
	}
	took := r.settle(60, "after the update", "n1", "n2", "n3")
	t.Logf("n1, n2 and n3 work every slot %d renew periods after c left", took)
}

func TestARollingUpdateToALongerLeaseDrainsEachMemberInTime(t *testing.T) {
	rollingUpdateWithLease(t, 30*time.Second)
}

func TestARollingUpdateToAShorterLeaseDrainsEachMemberInTime(t *testing.T) {
	rollingUpdateWithLease(t, 3*time.Second)
}
