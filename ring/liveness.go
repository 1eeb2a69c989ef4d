package ring

import (
	"slices"
	"sync"
	"time"

	"rawwatch/shard"
)

// # Who is live, and when a member stops
//
// Claims.Step is sound for the views it is given; a split brain comes from a
// wrong idea of who is live. So the rules that decide it are here, pure, on
// the observer's own clock, and the model (model_test.go) drives them
// through pauses, hand edits, copies, hangs, skewed clocks and leaves:
// sight (another member is live while a fresh record of its holder was read
// within the lease duration it wrote), unseen (after a list that may have
// missed a Lease, claim no free slot for a lease duration), fenced (a member
// counts itself out a renew period before the others may) and Admits (the
// gate's own clock). docs/sharding.md, "Membership", gives each rule, its
// bound and the test that holds it.

// The rules, as variables only so that the model's tests can break each on
// purpose and see the model fail (model_test.go). Never changed elsewhere.
var (
	// fenceFirst: a member past its fence fences before it renews, and
	// before a renewal's success extends its lease.
	fenceFirst = true
	// gateClock: the gate admits nothing past the fence deadline.
	gateClock = true
	// vanishedLive: a Lease that vanished unmarked counts as live until a
	// lease duration after it last moved.
	vanishedLive = true
	// byHolder: a Lease is judged by the lease duration its holder wrote,
	// not by the observer's own.
	byHolder = true
	// byRecord: a Lease renews when its holder's record moves, not when
	// its resourceVersion does (anyone's write).
	byRecord = true
	// markBound: a leaving mark counts only with the renewal it was
	// written with (its value is the renewTime).
	markBound = true
	// keepGiven: a member leaving names the slots it gave, on its marked
	// Lease, until their new owners confirm them (or a bound passes).
	keepGiven = true
	// byMove: a move that may hide a renewal keeps the Lease current a
	// lease duration longer, its claims taken as every slot (hides).
	byMove = true
	// markFresh: a leaving mark counts only with a renewal of the bound
	// acquisition that claims nothing, or on a Lease already out: a copy
	// of an old leave, or a mark on a live member's record, counts for
	// nothing, one read at first sight claims every slot a while, and a
	// gift read at first sight is taken once a renewal is read.
	markFresh = true
)

// fenceClock is the clock of a member's own fence. Go's monotonic clock,
// which time.Now's readings carry and every duration the ring measures
// uses, does not count a system suspend on Linux (CLOCK_MONOTONIC; Go kept
// it on purpose, golang/go#24595): a node suspended past its fence would
// resume believing no time passed, its gate open on the slots the others
// took meanwhile. The wall clock counts the suspend, but is stepped (NTP,
// an operator), and a step back then a suspend reads as a step put right.
// So the fence's clock is the monotonic clock plus what the boot clock
// (CLOCK_BOOTTIME: the monotonic clock and the suspends, never stepped)
// ran ahead of it: a suspend counts, a step of the wall clock counts
// nothing. Only the member's own fence uses it (renewed, the deadline,
// the gate): judging the others stays on the monotonic clock, which never
// counts more than passed.
type fenceClock struct {
	now, wall func() time.Time // wall nil: now's readings' own
	boot      func() time.Time // nil, or a zero reading: no suspend counted

	mu     sync.Mutex
	n0, b0 time.Time     // now's and boot's first readings
	ahead  time.Duration // the most boot ran ahead of now since
}

func (c *fenceClock) read() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.now()
	if c.boot == nil {
		return n
	}
	b := c.boot()
	if b.IsZero() {
		return n.Add(c.ahead)
	}
	if c.n0.IsZero() {
		c.n0, c.b0 = n, b
	}
	// The most, so that two readings' jitter never sets the clock back.
	c.ahead = max(c.ahead, b.Sub(c.b0)-n.Sub(c.n0))
	return n.Add(c.ahead)
}

// wallNow reads the wall clock alone: what a Lease's readers take its
// renewTime for.
func (c *fenceClock) wallNow() time.Time {
	if c.wall != nil {
		return c.wall()
	}
	return c.now().Round(0)
}

// fenced tells whether a member whose last successful renewal was sent at
// renewed (zero: none) counts itself out at now.
func fenced(renewed, now time.Time, after time.Duration) bool {
	return renewed.IsZero() || now.Sub(renewed) >= after
}

// Admits tells whether a gate that holds c, with the fence deadline until
// (zero: no lease), lets a reconcile (or, with deletion, a deletion's
// handling) of a key in slot start at now: a reconcile only in a Working
// slot, a deletion in a claimed one (Working or Releasing), and neither at
// or past the deadline.
func Admits(c Claims, until, now time.Time, slot int, deletion bool) bool {
	if gateClock && !now.Before(until) {
		return false
	}
	if deletion {
		return c.Working.Union(c.Releasing).Has(slot)
	}
	return c.Working.Has(slot)
}

// sight records one list of the ring's Leases, made at now on the
// observer's clock: listed holds the others' Leases as read, by name; seen
// what the observer knew, past what it keeps of the Leases it forgot;
// prev, when its last list before this one succeeded (zero: none); own,
// the observer's lease duration; blindFor, how long since its last
// successful list on the fence's clock. A Lease renews only by a fresh
// record of its holder; a move that may hide one keeps it current a lease
// duration from this list (docs/sharding.md, "Membership", gives the rules
// and the tests that hold them). unseen: this list may have missed a Lease
// (the first, or one after a blind stretch), so the observer claims no
// free slot for a lease duration (Member.unseenUntil).
func sight(seen, listed map[string]observed, past map[string]forgotten, now, prev time.Time, blindFor, own time.Duration) (unseen bool) {
	// Back after a lease duration or more without a list (paused, or its
	// lists failing): a Lease gone may have come back and gone again
	// meanwhile, re-created, working, deleted, in writes this observer
	// never read. Its gone Leases count as freshly gone. (A re-created
	// Lease claims nothing for a lease duration: renew, errLeaseDeleted; so
	// an observer whose lists are less than that apart reads it.)
	blind := !prev.IsZero() && max(now.Sub(prev), blindFor) >= own
	for name, f := range past {
		if !now.Before(f.until) {
			delete(past, name)
		}
	}
	for name, l := range listed {
		o, ok := seen[name]
		if f, was := past[name]; !ok && was { // forgotten, and back
			o.ledger = f.ledger
			delete(past, name)
		}
		// A record is fresh when its acquisition was never read, or it is
		// above the highest renewTime read in it; a record without acquireTime is
		// not its owner's (every renewal writes one), never fresh.
		fresh := !byRecord && ok && o.rv != l.rv || byRecord && !l.acquired.IsZero() && o.ledger.fresh(l.acquired, l.renewTime)
		// A fresh record is a renewal in the acquisition bound (whose
		// renewals the Lease's annotations are taken from), or in the
		// acquisition of the record listed before it: the first record of
		// a new acquisition is none (a cycle of copies of past processes'
		// Leases, each of its own acquisition, renews nothing), the next
		// ones keep the Lease live. Only once the owner of the bound
		// acquisition can no longer work (boundUntil: its lease ran out
		// from its last renewal read, or from a move that may hide one)
		// does the new one become bound: copies of a past process's life
		// and leave set over a live member neither count it out nor have
		// their claims believed. Its owner starts a new acquisition only
		// after its Lease stood still a lease duration, or was deleted.
		renewal := fresh && ok && (!byRecord || o.bound.Equal(l.acquired) || o.acquired.Equal(l.acquired))
		rebound := renewal && byRecord && !o.bound.Equal(l.acquired) && !now.Before(o.boundUntil)
		l.at, l.renewals, l.hidden, l.bound, l.boundUntil = now, o.renewals, o.hidden, o.bound, o.boundUntil
		// Never less than the observer's own, nor than it judged the
		// Lease by before: a duration shortened by hand, read with a
		// renewal whose write was missed, or at first sight, cannot
		// count a live member out early.
		l.lease = max(l.lease, own, o.lease)
		if !byHolder {
			l.lease = own
		}
		// A leaving mark counts with a renewal of the acquisition bound
		// before that claims nothing (the holder's leave: it dropped its
		// claims first; not a mark valued as the collector's, which a
		// renewal claiming nothing, just after a fence or in its first
		// lease duration, may carry by an operator's hand), on a Lease already out at the observer's list
		// before (a collector's: it waited three lease durations; out
		// only by now is no proof, the observer's lists may have failed
		// while its owner renewed), and as long as the record it counted
		// with stands; not at first sight, nor on a copy of an old leave
		// re-applied over a live member, nor on a mark written on a live
		// member's record, read or not: its owner works on until it
		// reads it.
		first := !ok && len(o.ledger) == 0
		l.marked = l.leaving
		l.leaving = l.leaving && (!markBound || !markFresh || ok && !o.current(prev) ||
			ok && o.record == l.record && o.leaving ||
			renewal && !l.collected && o.bound.Equal(l.acquired) && l.claims.Empty() && l.holds.Empty())
		switch {
		case first:
			// Never seen: counts as just renewed (no renewTime, written by
			// another machine's clock, is compared with ours).
		case renewal:
			l.renewals++
		case fresh && !ok: // forgotten, and back in a new acquisition: its holder's
		case !ok: // forgotten, and back as a copy: no renewal at all
			l.at, l.lease = time.Time{}, o.lease
		default:
			l.at, l.lease = o.at, o.lease
			if hides(&o, &l, prev) {
				l.hidden = now
				if prev.Before(o.boundUntil) {
					l.boundUntil = later(l.boundUntil, now.Add(l.lease))
				}
			}
		}
		if first || rebound || fresh && !ok {
			l.bound = l.acquired
		}
		if first || fresh && !ok || renewal && l.bound.Equal(l.acquired) {
			l.boundUntil = later(l.boundUntil, now.Add(l.lease))
		}
		// Its annotations are its owner's word only as its renewals wrote
		// them: after any other move, a renewal it may hide may have
		// claimed more (and confirmed it), so until its next renewal it
		// counts as claiming every slot, none confirmed. So does a Lease
		// marked leaving at first sight (a copy of an old leave over a
		// live member, perhaps) for its lease duration: the slots it
		// names given are nobody's to take.
		moved := o.rv != l.rv || o.record != l.record
		l.doubt = ok && byRecord && byMove && !(renewal && o.bound.Equal(l.acquired)) && (moved || o.doubt) ||
			first && l.marked && markBound && markFresh
		// Unmarked at first sight, it may be a copy of an old gift over a
		// live member too: until a renewal of it is read, the slots it
		// names given to this member are watched but nobody's to claim
		// (peers).
		l.unproven = markFresh && (first || ok && o.unproven && !(renewal && o.bound.Equal(l.acquired)))
		if l.doubt {
			l.claims, l.pending = shard.All(), shard.All()
		}
		l.ledger = o.ledger.read(l.acquired, l.renewTime, fresh || first, now, now.Add(-rememberFor*own))
		seen[name] = l
	}
	forget := func(name string, o observed) {
		delete(seen, name)
		past[name] = forgotten{ledger: o.ledger, until: now.Add(rememberFor * own)}
	}
	for name, o := range seen {
		if _, ok := listed[name]; ok {
			continue
		}
		// Gone. Left cleanly (seen marked leaving): forget it. Else,
		// deleted by hand: its owner may not know, and works on until its
		// fence. It may have renewed just before the delete, in a write
		// we never read: so it stands, as last seen, for its lease
		// duration from the list that first found it gone (its owner's
		// deadline is at most that list's instant plus its fenceAfter).
		if o.leaving || !vanishedLive {
			forget(name, o)
			continue
		}
		if !o.gone || blind {
			o.at, o.gone = now, true
			o.boundUntil = later(o.boundUntil, now.Add(o.lease))
		}
		// What it claimed since we last read it, we cannot know: it
		// counts as claiming every slot, none of them confirmed (nobody
		// claims a free slot meanwhile; nobody withdraws one it works).
		o.claims, o.pending = shard.All(), shard.All()
		if !o.current(now) {
			forget(name, o)
			continue
		}
		seen[name] = o
	}
	return prev.IsZero() || blind
}

// hides tells whether a Lease listed as l, last seen as o and not renewed
// since, may hide a renewal: it moved (anyone's write), and the previous
// list, at prev, found it current by its last renewal. A renewal its owner
// counts on is sent before its fence, within a lease duration of the one
// before, which this observer read at o.at or later; a copy re-applied
// over it before this list shows only as a move. (A move read later hides
// nothing the owner still counts on.)
func hides(o, l *observed, prev time.Time) bool {
	moved := o.rv != l.rv || o.record != l.record
	return byRecord && byMove && moved && !prev.IsZero() && prev.Sub(o.at) < o.lease
}

// forgotten is what an observer keeps of a Lease it forgot (it left, was
// collected, or vanished a lease duration ago): its ledger, so that a copy
// re-created (a GitOps sync puts back what it finds missing) is no
// renewal; until, when it forgets that too.
type forgotten struct {
	ledger ledger
	until  time.Time
}

// rememberFor is how many of its own lease durations an observer keeps a
// forgotten Lease's ledger, and an acquisition it has not read since.
const rememberFor = 240

// An acquisition is one holding of a Lease by one process, named by the
// acquireTime it wrote when it created, adopted or took back the Lease
// (stamp: unique), with the highest renewTime read in it, and when it was
// last read. A process's renewTimes only grow (stamp), whatever its wall
// clock does; another process writes another acquisition, so no two
// processes' clocks are compared either.
type acquisition struct {
	acquired time.Time
	renewed  time.Time // the highest renewTime read
	read     time.Time // on the observer's clock
}

// A ledger is what an observer read of one Lease's records: its
// acquisitions, in the order first read. It forgets an acquisition by age
// alone (not read for rememberFor lease durations), never by count: a
// cycle of saved copies, however many acquisitions it names, finds each
// one kept. So it holds at most one acquisition per list of that span
// (240 × lease duration / renew period: 1,800 at the defaults), and a
// Lease whose acquisitions do not change holds one.
type ledger []acquisition

func (g ledger) find(acquired time.Time) int {
	return slices.IndexFunc(g, func(a acquisition) bool { return a.acquired.Equal(acquired) })
}

// fresh tells whether a record of acquisition acquired renewed at r is
// new: of an acquisition never read, or of a known one above the highest
// renewTime read in it. Its owner's renewals only grow, so each is above
// every one before; a saved copy re-applied carries one at or below the
// highest read, even a copy of a renewal the observer never read; so do
// copies cycled, and a Lease re-created from a copy. A forged renewTime
// above the owner's, once read, makes its renewals stale.
func (g ledger) fresh(acquired, r time.Time) bool {
	if r.IsZero() {
		return false
	}
	i := g.find(acquired)
	return i < 0 || r.After(g[i].renewed)
}

// read is g after a list at now read a record of acquisition acquired
// renewed at r, noted if fresh, with the acquisitions not read since
// keepFrom dropped: a fresh copy, since observed values share it.
func (g ledger) read(acquired, r time.Time, fresh bool, now, keepFrom time.Time) ledger {
	g = slices.DeleteFunc(slices.Clone(g), func(a acquisition) bool { return a.read.Before(keepFrom) })
	i := g.find(acquired)
	switch {
	case i >= 0:
	case !fresh || acquired.IsZero():
		return g
	default:
		g = append(g, acquisition{acquired: acquired})
		i = len(g) - 1
	}
	a := &g[i]
	a.read = now
	if fresh {
		a.renewed = later(a.renewed, r)
	}
	return g
}

// leaseBelief bounds what a member believes of the lease duration written
// on another's Lease: at most this many times its own, as written. A
// duration written by hand (a day) would otherwise hold every wait that
// counts a dead member out, or waits on the longest duration, that long.
// So the lease durations of a ring's members (--sharding-lease-duration,
// which a rolling update may change) must be within this factor of one
// another: a member of a longer one is counted out before its own fence.
const leaseBelief = 4

// believed is the longest lease duration a member of lease duration own
// believes of another: leaseBelief times its own, as configured (not as
// written, rounded up to a second: 4 × 1.1 s is 4.4 s, not 8 s).
func believed(own time.Duration) time.Duration { return leaseBelief * own }

// current tells whether the lease of a Lease last seen as o runs at
// judged, on its holder's lease duration: from its last renewal read, or
// from a later move that may hide one (hides).
func (o observed) current(judged time.Time) bool { return judged.Sub(o.last()) < o.lease }

// last is when o was last read renewed, or moved as if it hid a renewal.
func (o observed) last() time.Time { return later(o.at, o.hidden) }

// member tells whether a Lease last seen as o is a live member's at
// judged: its lease runs, it is of our scheme, and not marked leaving.
func (o observed) member(judged time.Time) bool {
	return !o.leaving && !o.foreign && o.current(judged)
}

// assignSlots is shard.Assign; the model memoizes it (the members of its
// schedules are few, and Assign is most of a schedule's cost).
var assignSlots = shard.Assign
