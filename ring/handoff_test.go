package ring

import (
	"math"
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
			covers    shard.SlotSet // what its Lease says it covers
			covered   shard.SlotSet // what the others' said, at its last list
			pending   shard.SlotSet // what its Lease says is not confirmed
			given     map[int]int   // what its Lease says it gave, to whom
			givenTo   map[int]int   // whom it gave each Given slot
			custody   shard.SlotSet // given to it, at its last list
			confirmed map[int]shard.SlotSet
			swept     shard.SlotSet // sweeps done since Claims.Sweep asked
			target    shard.SlotSet
			busy      map[int]int // slot → reconciles in flight
		}
		ms := make([]*member, members)
		for i := range ms {
			ms[i] = &member{busy: map[int]int{}, given: map[int]int{}, givenTo: map[int]int{}}
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
			switch rng.IntN(13) {
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
			case 3: // a sweep asked for ends
				m.swept = m.swept.Union(m.claims.Sweep)
			default: // the member's loop moves on
				switch m.phase {
				case 0:
					m.lease = m.claims.Claimed()
					m.published = m.lease
					m.pending = m.claims.Pending
					m.covers = m.claims.Watched() // its watcher lists what it watches
					m.given = map[int]int{}
					for _, s := range m.claims.Given.List() {
						m.given[s] = m.givenTo[s]
					}
				case 1:
					m.others, m.covered, m.custody = shard.SlotSet{}, shard.SlotSet{}, shard.SlotSet{}
					m.confirmed = map[int]shard.SlotSet{}
					for j, o := range ms {
						if j != i {
							m.others = m.others.Union(o.lease)
							m.covered = m.covered.Union(o.covers)
							m.confirmed[j] = o.lease.Minus(o.pending)
							for s, to := range o.given {
								if to == i {
									m.custody = m.custody.With(s)
								} else {
									m.others = m.others.With(s)
								}
							}
						}
					}
				case 2:
					var busy shard.SlotSet
					for s, n := range m.busy {
						if n > 0 {
							busy = busy.With(s)
						}
					}
					var overdue shard.SlotSet
					if rng.IntN(10) == 0 {
						overdue = m.claims.Releasing
					}
					var accepted shard.SlotSet
					for _, s := range m.claims.Given.List() {
						if to := m.givenTo[s]; to < 0 || m.confirmed[to].Has(s) {
							accepted = accepted.With(s)
						}
					}
					before := m.claims
					m.claims = m.claims.Step(View{Live: true, Target: m.target, Confirmed: true,
						Published: m.published, Others: m.others, Busy: busy,
						Covers: m.covers, Covered: m.covered, Overdue: overdue, Swept: m.swept, Handed: m.covered,
						Custody: m.custody, Accepted: accepted})
					for _, s := range m.claims.Given.Minus(before.Given).List() {
						m.givenTo[s] = rng.IntN(members+1) - 1 // to anyone, or nobody (-1)
						if m.givenTo[s] == i {
							m.givenTo[s] = -1
						}
					}
					m.swept = m.swept.And(m.claims.Sweep) // a sweep counts for the request it answered
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
		*c = c.Step(View{Live: true, Target: target, Confirmed: true, Published: *lease, Others: other,
			Covers: shard.All(), Covered: shard.All(), Swept: c.Sweep, Handed: shard.All()})
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
	c = c.Step(View{Live: true, Busy: shard.SlotsOf(5), Confirmed: true, Covered: shard.All(), Handed: shard.All()})
	c = c.Step(View{Live: true, Busy: shard.SlotsOf(5), Confirmed: true, Covered: shard.All(), Handed: shard.All(), Swept: c.Sweep})
	if c.Claimed() != shard.SlotsOf(5) || !c.Working.Empty() {
		t.Errorf("a slot with a reconcile in flight: %+v, want it Releasing", c)
	}
	if c = c.Step(View{Live: true, Confirmed: true, Covered: shard.All(), Handed: shard.All(), Swept: c.Sweep}); !c.Claimed().Empty() {
		t.Errorf("after the reconcile: %+v, want nothing claimed", c)
	}
	// fenced: everything dropped at once
	if c := (Claims{Working: all}).Step(View{Live: false, Target: all}); c != (Claims{}) {
		t.Errorf("a member that is not live keeps %+v", c)
	}
}

// A released slot is let go only after a sweep asked for once another
// member covers it (or it is overdue), and made since: not on a sweep done
// before the new owner covered it, not while nobody covers it.
func TestReleasingWaitsForTheNewOwnerAndASweep(t *testing.T) {
	five := shard.SlotsOf(5)
	c := Claims{Working: five}.Step(View{Live: true, Confirmed: true})
	if c.Releasing != five || !c.Sweep.Empty() {
		t.Fatalf("no longer target, nobody covers it: %+v, want Releasing and no sweep asked", c)
	}
	// A sweep made while nobody covered the slot does not count.
	for range 3 {
		c = c.Step(View{Live: true, Confirmed: true, Swept: five})
	}
	if c.Releasing != five || !c.Sweep.Empty() {
		t.Fatalf("swept while uncovered: %+v, want still Releasing", c)
	}
	// The new owner covers it: a sweep is asked for; until it is done, the
	// slot stays.
	c = c.Step(View{Live: true, Confirmed: true, Covered: five})
	if c.Sweep != five {
		t.Fatalf("covered: %+v, want a sweep asked for", c)
	}
	c = c.Step(View{Live: true, Confirmed: true, Covered: five})
	if c.Releasing != five {
		t.Fatalf("not swept yet: %+v, want still Releasing", c)
	}
	// Swept, but the new owner's cache has not reached what the sweep
	// listed: the slot stays.
	c = c.Step(View{Live: true, Confirmed: true, Covered: five, Swept: five})
	if c.Releasing != five || c.Sweep != five {
		t.Fatalf("swept, not handed over: %+v, want still Releasing, the sweep standing", c)
	}
	// The new owner relisted after the sweep: it is asked for again (the
	// request dropped for a step, which makes the gate forget the sweep).
	c = c.Step(View{Live: true, Confirmed: true, Covered: five, Swept: five, Stale: five})
	if c.Releasing != five || !c.Sweep.Empty() {
		t.Fatalf("a stale sweep: %+v, want still Releasing and the sweep dropped", c)
	}
	if c = c.Step(View{Live: true, Confirmed: true, Covered: five}); c.Sweep != five {
		t.Fatalf("after a stale sweep: %+v, want a sweep asked for again", c)
	}
	// Swept and handed over, but a deletion it found is still queued: the
	// slot stays.
	c = c.Step(View{Live: true, Confirmed: true, Covered: five, Swept: five, Handed: five, Busy: five})
	if c.Releasing != five {
		t.Fatalf("swept, deletions queued: %+v, want still Releasing", c)
	}
	if c = c.Step(View{Live: true, Confirmed: true, Covered: five, Swept: five, Handed: five}); !c.Claimed().Empty() {
		t.Fatalf("swept and handled: %+v, want it let go", c)
	}
	// Swept, but the new owner no longer covers it (it dropped the slot,
	// and the deletions it kept): the slot stays, and no sweep is asked.
	c = Claims{Releasing: five, Sweep: five}.Step(View{Live: true, Confirmed: true, Swept: five})
	if c.Releasing != five || !c.Sweep.Empty() {
		t.Fatalf("swept, cover withdrawn: %+v, want still Releasing and no sweep asked", c)
	}
	// Overdue: swept and let go without a new owner covering it.
	c = Claims{Releasing: five}.Step(View{Live: true, Confirmed: true, Overdue: five})
	if c.Sweep != five {
		t.Fatalf("overdue: %+v, want a sweep asked for", c)
	}
	if c = c.Step(View{Live: true, Confirmed: true, Overdue: five, Swept: five}); !c.Claimed().Empty() {
		t.Fatalf("overdue and swept: %+v, want it let go", c)
	}
	// A deletion that keeps failing holds the slot until it is overdue; one
	// queued (however long the queue) or being handled holds it even then.
	releasing := Claims{Releasing: five, Sweep: five}
	if c = releasing.Step(View{Live: true, Confirmed: true, Covered: five, Swept: five, Handed: five, Failing: five}); c.Releasing != five {
		t.Fatalf("a deletion failing: %+v, want still Releasing", c)
	}
	if c = releasing.Step(View{Live: true, Confirmed: true, Swept: five, Overdue: five, Busy: five, Failing: five}); c.Releasing != five {
		t.Fatalf("overdue, a deletion queued behind the failing one: %+v, want still Releasing", c)
	}
	if c = releasing.Step(View{Live: true, Confirmed: true, Swept: five, Overdue: five, Failing: five}); !c.Claimed().Empty() {
		t.Fatalf("overdue, a deletion waiting for its retry: %+v, want it let go", c)
	}
	// The slot comes back while it waits: Working again, no sweep asked.
	c = Claims{Releasing: five, Sweep: five}.Step(View{Live: true, Confirmed: true, Target: five, Covered: five})
	if c.Working != five || !c.Sweep.Empty() {
		t.Fatalf("target again: %+v, want Working and no sweep", c)
	}
	// Even in the step where it would have been let go: not given away.
	c = Claims{Releasing: five, Sweep: five}.Step(View{Live: true, Confirmed: true, Target: five, Covered: five, Swept: five, Handed: five})
	if c.Working != five || !c.Given.Empty() {
		t.Fatalf("target again as it was swept and handed over: %+v, want Working and nothing given", c)
	}
}

// A member claims a slot only once its cache covers it: working a slot it
// has not listed, it would miss the deletions made before its list.
func TestAMemberClaimsOnlyWhatItCovers(t *testing.T) {
	two := shard.SlotsOf(1, 2)
	c := Claims{}.Step(View{Live: true, Confirmed: true, Target: two, Covers: shard.SlotsOf(1)})
	if c.Pending != shard.SlotsOf(1) {
		t.Fatalf("covers slot 1 of its target 1-2: %+v, want only 1 Pending", c)
	}
	c = c.Step(View{Live: true, Confirmed: true, Target: two, Covers: two, Published: c.Claimed()})
	if c.Working != shard.SlotsOf(1) || c.Pending != shard.SlotsOf(2) {
		t.Fatalf("then covers both: %+v, want 1 Working and 2 Pending", c)
	}
}

// HandedOver: a slot is handed over once the new owner's cache holds every
// object the sweep listed, on a watch unbroken since a list made at or
// before the sweep's.
func TestHandedOver(t *testing.T) {
	five := shard.SlotsOf(5)
	for _, c := range []struct {
		name          string
		cover         Cover
		at, newest    uint64
		handed, stale bool
	}{
		{"caught up", Cover{five, 100, 150}, 120, 110, true, false},
		{"caught up with the newest object, behind the sweep", Cover{five, 100, 110}, 120, 110, true, false},
		{"an empty slot", Cover{five, 100, 100}, 120, 0, true, false},
		{"listed at the sweep's resourceVersion", Cover{five, 120, 120}, 120, 110, true, false},
		{"behind the newest object", Cover{five, 100, 105}, 120, 110, false, false},
		{"relisted after the sweep", Cover{five, 130, 140}, 120, 110, false, true},
		{"does not cover the slot", Cover{shard.SlotsOf(4), 100, 150}, 120, 110, false, false},
		{"positions unknown", Cover{five, 0, 0}, 120, 110, false, false},
		{"a sweep's position unknown", Cover{five, 100, 150}, 0, 0, false, false},
		{"a resourceVersion that is not a number", Cover{five, 100, 150}, 120, math.MaxUint64, false, false},
	} {
		handed, stale := HandedOver(5, c.cover, c.at, c.newest)
		if handed != c.handed || stale != c.stale {
			t.Errorf("%s: handed %v, stale %v; want %v, %v", c.name, handed, stale, c.handed, c.stale)
		}
	}
}

// A slot let go is given to its new owner by name until that owner
// confirms it: nobody else claims it meanwhile, the giver included. The
// named member claims it whatever its target: into Working if it is its
// target, else into Releasing (it handles the deletions it kept, then hands
// the slot on as usual).
func TestAGivenSlotIsClaimedByItsNewOwnerWhateverItsTarget(t *testing.T) {
	five := shard.SlotsOf(5)
	// The giver: let go, the slot is Given; back in its target, it does
	// not claim it while it is given; accepted, it is free again.
	c := Claims{Releasing: five, Sweep: five}.Step(View{Live: true, Confirmed: true, Covered: five, Swept: five, Handed: five})
	if !c.Claimed().Empty() || c.Given != five {
		t.Fatalf("let go: %+v, want nothing claimed and slot 5 given", c)
	}
	if c = c.Step(View{Live: true, Confirmed: true, Target: five, Covers: five}); !c.Claimed().Empty() || c.Given != five {
		t.Fatalf("given, then target again: %+v, want it still given and not claimed", c)
	}
	if c = c.Step(View{Live: true, Confirmed: true, Target: five, Covers: five, Accepted: five}); !c.Given.Empty() || c.Pending != five {
		t.Fatalf("accepted: %+v, want it no longer given, and claimed again", c)
	}

	// The new owner, whose target lost the slot before it claimed it.
	n := Claims{}.Step(View{Live: true, Confirmed: true, Custody: five, Covers: five})
	if n.Pending != five || n.Custody != five || !n.Watched().Has(5) {
		t.Fatalf("given a slot out of its target: %+v, want it Pending, in custody, watched", n)
	}
	// Another member claims it at the same time: withdrawn, custody kept.
	n = n.Step(View{Live: true, Confirmed: true, Custody: five, Covers: five, Published: five, Others: five})
	if !n.Pending.Empty() || n.Custody != five {
		t.Fatalf("a conflict: %+v, want the claim withdrawn and the custody kept", n)
	}
	n = n.Step(View{Live: true, Confirmed: true, Custody: five, Covers: five})
	n = n.Step(View{Live: true, Confirmed: true, Custody: five, Covers: five, Published: n.Claimed()})
	if n.Releasing != five || !n.Working.Empty() || !n.Custody.Empty() {
		t.Fatalf("confirmed out of its target: %+v, want it Releasing", n)
	}
	// In its target: Working.
	w := Claims{Pending: five}.Step(View{Live: true, Confirmed: true, Custody: five, Target: five, Covers: five, Published: five})
	if w.Working != five {
		t.Fatalf("confirmed in its target: %+v, want it Working", w)
	}
}

// A sweep that stays stale (the new owner's list always after it: a server
// whose resourceVersions went backwards, or a new owner that keeps
// relisting) is asked for again at most every other step, one LIST each,
// and once the slot is overdue it is swept and let go: it neither storms
// the server nor stalls the handoff for good.
func TestAStaleSweepIsAskedAgainEveryOtherStepUntilOverdue(t *testing.T) {
	five := shard.SlotsOf(5)
	c := Claims{Releasing: five}
	asked := 0
	for step := range 20 {
		v := View{Live: true, Confirmed: true, Covered: five, Swept: c.Sweep, Stale: c.Sweep}
		if step >= 16 {
			v.Overdue = five
		}
		before := c.Sweep
		c = c.Step(v)
		if c.Sweep.Has(5) && !before.Has(5) {
			asked++
		}
		if c.Claimed().Empty() {
			if step < 16 {
				t.Fatalf("let go at step %d on a stale sweep, before it was overdue", step)
			}
			if asked > 9 {
				t.Errorf("%d sweeps asked for in %d steps, want at most one every other step", asked, step+1)
			}
			return
		}
	}
	t.Fatalf("overdue and swept, still claimed: %+v", c)
}

// A Working slot that another live member claims, confirmed, is a split
// brain the step never makes but a wrong idea of who is live can: it is
// withdrawn at once (not released: Releasing would keep it claimed and its
// deletions handled here), and not claimed again while the other claims it.
// A Pending claim of the other's does not count.
func TestAWorkingSlotARivalClaimsIsWithdrawn(t *testing.T) {
	five, six := shard.SlotsOf(5), shard.SlotsOf(5, 6)
	c := Claims{Working: six, Target: six}
	v := View{Live: true, Confirmed: true, Target: six, Covers: shard.All(), Published: six, Others: five, Rival: five}
	if c = c.Step(v); c.Working != shard.SlotsOf(6) || c.Claimed().Has(5) {
		t.Fatalf("slot 5 claimed, confirmed, by another live member: %+v, want it withdrawn, 6 still Working", c)
	}
	if c = c.Step(v); c.Claimed().Has(5) {
		t.Fatalf("the other still claims slot 5: %+v, want it not claimed again", c)
	}
	// Pending at the other: not a rival (the other withdraws when it reads
	// our claim).
	c = Claims{Working: six, Target: six}.Step(View{Live: true, Confirmed: true, Target: six, Covers: shard.All(), Published: six, Others: five})
	if c.Working != six {
		t.Fatalf("slot 5 only pending at another member: %+v, want it still Working", c)
	}
	// Nor does a step whose renewal failed keep a rival's slot: its view of
	// the others is at least as new as the list that confirmed our claim
	// (which showed no rival), and dropping a slot never splits the brain.
	// (It kept it until the fence: TestARivalSeenWhileRenewalsFailIsWithdrawn.)
	if c = (Claims{Working: six, Target: six}).Step(View{Live: true, Target: six, Rival: five}); c.Working != shard.SlotsOf(6) {
		t.Fatalf("no list after a failed renewal, slot 5 claimed by a rival: %+v, want it withdrawn, 6 still Working", c)
	}
}
