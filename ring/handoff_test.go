package ring

import (
	"math/rand/v2"
	"testing"

	"rawwatch/shard"
)

// A model of the handoff: members whose renew, list and step run as separate
// atomic operations, interleaved at random with the others' and with
// reconciles starting (only in a Working slot, as the app's gate allows) and
// ending. Targets change at random and the members need not agree on them:
// the protocol must be safe even while views differ. Two invariants, checked
// after every operation: no slot is Working at two members, and no slot has
// reconciles in flight at two members.
func TestHandoffNeverLetsTwoMembersWorkASlot(t *testing.T) {
	const members, slots = 3, 8
	for seed := range uint64(2000) {
		rng := rand.New(rand.NewPCG(seed, 7))
		type member struct {
			claims    Claims
			lease     shard.SlotSet // what its Lease says
			phase     int           // 0: renew next, 1: list next, 2: step next
			published shard.SlotSet
			others    shard.SlotSet
			target    shard.SlotSet
			busy      map[int]int // slot → reconciles in flight
		}
		ms := make([]*member, members)
		for i := range ms {
			ms[i] = &member{busy: map[int]int{}}
		}
		retarget := func() {
			// Each slot goes to a random member, sometimes to two (views
			// that disagree) or none (a member not yet seen).
			for _, m := range ms {
				m.target = shard.SlotSet{}
			}
			for s := range slots {
				ms[rng.IntN(members)].target = ms[rng.IntN(members)].target.With(s)
				if rng.IntN(4) == 0 {
					ms[rng.IntN(members)].target = ms[rng.IntN(members)].target.With(s)
				}
			}
		}
		retarget()
		for op := range 400 {
			if rng.IntN(60) == 0 {
				retarget()
			}
			i := rng.IntN(members)
			m := ms[i]
			switch rng.IntN(12) {
			case 0, 1: // a reconcile starts, if the gate lets it
				if s := rng.IntN(slots); m.claims.Working.Has(s) {
					m.busy[s]++
				}
			case 2: // a reconcile ends (they last a while)
				for s, n := range m.busy {
					if n > 0 {
						m.busy[s]--
						break
					}
				}
			default: // the member's loop moves on
				switch m.phase {
				case 0:
					m.lease = m.claims.Claimed()
					m.published = m.lease
				case 1:
					m.others = shard.SlotSet{}
					for j, o := range ms {
						if j != i {
							m.others = m.others.Union(o.lease)
						}
					}
				case 2:
					var busy shard.SlotSet
					for s, n := range m.busy {
						if n > 0 {
							busy = busy.With(s)
						}
					}
					m.claims = m.claims.Step(View{Live: true, Target: m.target, Confirmed: true,
						Published: m.published, Others: m.others, Busy: busy})
				}
				m.phase = (m.phase + 1) % 3
			}
			for s := range slots {
				working, reconciling := 0, 0
				for _, o := range ms {
					if o.claims.Working.Has(s) {
						working++
					}
					if o.busy[s] > 0 {
						reconciling++
					}
				}
				if working > 1 || reconciling > 1 {
					t.Fatalf("seed %d, operation %d: slot %d Working at %d members, reconciled at %d", seed, op, s, working, reconciling)
				}
			}
		}
	}
}

// Once the members agree on the targets and reconciles end, every slot ends
// up Working at its owner, within a few steps: a released slot is given up,
// and a free one is claimed, confirmed and worked.
func TestHandoffConverges(t *testing.T) {
	a, b := Claims{}, Claims{}
	var leaseA, leaseB shard.SlotSet
	step := func(c *Claims, lease *shard.SlotSet, other shard.SlotSet, target shard.SlotSet) {
		*lease = c.Claimed()
		*c = c.Step(View{Live: true, Target: target, Confirmed: true, Published: *lease, Others: other})
	}
	all := shard.SlotsOf(0, 1, 2, 3)
	for range 3 {
		step(&a, &leaseA, leaseB, all)
	}
	if a.Working != all {
		t.Fatalf("alone, a works %v after three steps, want %v", a.Working, all)
	}
	// b joins: the slots 2 and 3 are now b's.
	half, other := shard.SlotsOf(0, 1), shard.SlotsOf(2, 3)
	for n := 1; b.Working != other; n++ {
		if n > 5 {
			t.Fatalf("b works %v after 5 rounds (a: %+v), want %v", b.Working, a, other)
		}
		step(&b, &leaseB, leaseA, other)
		step(&a, &leaseA, leaseB, half)
		if a.Working.And(b.Working) != (shard.SlotSet{}) {
			t.Fatalf("both work %v", a.Working.And(b.Working))
		}
	}
	if a.Working != half || !a.Releasing.Empty() {
		t.Errorf("a: %+v, want to work %v and release nothing", a, half)
	}
	// a busy slot is held until its reconcile ends
	c := Claims{Working: shard.SlotsOf(5)}
	c = c.Step(View{Live: true, Busy: shard.SlotsOf(5), Confirmed: true})
	c = c.Step(View{Live: true, Busy: shard.SlotsOf(5), Confirmed: true})
	if c.Claimed() != shard.SlotsOf(5) || !c.Working.Empty() {
		t.Errorf("a slot with a reconcile in flight: %+v, want it Releasing", c)
	}
	if c = c.Step(View{Live: true, Confirmed: true}); !c.Claimed().Empty() {
		t.Errorf("after the reconcile: %+v, want nothing claimed", c)
	}
	// fenced: everything dropped at once
	if c := (Claims{Working: all}).Step(View{Live: false, Target: all}); c != (Claims{}) {
		t.Errorf("a member that is not live keeps %+v", c)
	}
}
