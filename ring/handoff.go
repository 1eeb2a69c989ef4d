package ring

import (
	"math"

	"rawwatch/shard"
)

// # The handoff
//
// A member reconciles a slot only while it claims it on its Lease, and
// claims it in two steps: written (Pending), then confirmed by a list that
// shows no other live member claiming it (Working). A slot it no longer
// targets goes to Releasing and is let go only once nothing of it is in
// flight, the new owner covers it, a sweep made after the new owner's list
// handled what the old owner's watch missed, and the new owner's cache
// holds what that sweep listed: so no deletion falls between the two. The
// old owner names the new one (Given) until it confirms; the named member
// claims it whatever its target (Custody); a member holding deletions of a
// slot it does not work keeps watching it and claims it first (Holding).
// docs/sharding.md, "The handoff", draws the states and gives the tests.

// Claims is where a member stands in the handoff: which slots it reconciles,
// and which it claims on its Lease without reconciling them.
type Claims struct {
	// Working: this member reconciles the keys of these slots.
	Working shard.SlotSet
	// Pending: claimed on the Lease, not yet confirmed by a list that
	// followed the claim's write.
	Pending shard.SlotSet
	// Releasing: no longer reconciled here, still claimed, until no
	// reconcile of theirs is in flight.
	Releasing shard.SlotSet
	// Target is the member's share by the membership it sees.
	Target shard.SlotSet
	// Sweep: the Releasing slots to sweep now (their new owner covers
	// them, or they are overdue); each stays Releasing until View.Swept
	// says it was swept since it was asked for.
	Sweep shard.SlotSet
	// Given: slots let go, whose new owner the member names on its Lease
	// (AnnotationGiven) until that owner has confirmed them; nobody else
	// claims them meanwhile, this member included.
	Given shard.SlotSet
	// Custody: slots another live member gave this one and it has not
	// confirmed yet: it claims them whatever its target (into Releasing,
	// if they are no longer its target: then it hands them on as usual).
	Custody shard.SlotSet
	// Lingering: slots it no longer covers for itself, still watched (and
	// their deletions kept) until every live member claiming them has
	// renewed twice since its Lease stopped saying it covers them: until
	// none can give it them on the word of a cover it withdrew.
	Lingering shard.SlotSet
	// Holding: slots it does not claim whose deletions it holds (heard of
	// while it did not claim them: withdrawn, fenced, or not its yet),
	// that no other live member works as its share or Releases since (one
	// that claims them only to hand them on may have listed them after),
	// for HandoffTimeout at most uncovered. It watches them, names them on
	// its Lease (AnnotationHolds: the others leave them to it when they
	// are free) and claims them as it claims custody, into Releasing if
	// they are not its target: it handles what it held, then hands them on.
	Holding shard.SlotSet
}

// Claimed is what the member's Lease must say it claims.
func (c Claims) Claimed() shard.SlotSet { return c.Working.Union(c.Pending).Union(c.Releasing) }

// Watched is what the member's watcher must list and watch: its claims, its
// target (it fills its cache with a slot before it can work on it), its
// custody, what lingers and what it holds deletions of.
func (c Claims) Watched() shard.SlotSet {
	return c.Claimed().Union(c.Target).Union(c.Custody).Union(c.Lingering).Union(c.Holding)
}

// View is what a member knows at one step of the handoff.
type View struct {
	// Live: its own renewals succeed (it is a member). A member that is
	// not drops every claim: it is fenced.
	Live bool
	// Target is its share by the live membership.
	Target shard.SlotSet
	// Confirmed: in this step a renewal wrote Published on its Lease, and a
	// list of the ring's Leases made after that write succeeded; Others is
	// that list's.
	Confirmed bool
	Published shard.SlotSet
	// Others: the slots claimed on the Leases of the other live members,
	// and those they gave to a member other than this one. Rival: of
	// those, the ones another live member claims confirmed (not Pending:
	// it Works or Releases them).
	Others, Rival shard.SlotSet
	// Doubted: of Others, the slots only Leases in doubt claim (moved
	// since their last renewal read: taken as claiming every slot).
	Doubted shard.SlotSet
	// Custody: the slots live members gave this one (AnnotationGiven).
	// Accepted: of the Given slots, those whose named owner confirmed them
	// (claims them, not Pending), is no longer live, or is nobody.
	Custody, Accepted shard.SlotSet
	// Holding: the slots whose deletions this member holds and that no
	// other live member works (see Claims.Holding).
	Holding shard.SlotSet
	// Busy: the slots with a reconcile in flight or a deletion not yet
	// handled (queued, however long the queue, or being handled); Failing:
	// those with a deletion whose handling failed, waiting for a retry.
	// Both sampled after the previous step's Working took effect, and
	// after Swept.
	Busy, Failing shard.SlotSet
	// Covers: the slots this member's cache covers (it claims no other:
	// a slot it works, it has listed). Covered: the slots that the live
	// member they go to covers (AnnotationCovers), and went to in the
	// previous step too.
	Covers shard.SlotSet
	// Overdue: the slots Releasing for longer than Config.HandoffTimeout.
	Covered, Overdue shard.SlotSet
	// Swept: of the slots the previous Claims' Sweep named, those swept
	// since it named them. Handed: of those, the ones the new owner's cache
	// holds everything of that the sweep listed; Stale: the ones whose new
	// owner relisted after the sweep (see HandedOver).
	Swept, Handed, Stale shard.SlotSet
}

// HandedOver tells whether a slot swept at resourceVersion at, whose newest
// object then was at newest, may be let go to a member whose cache covers
// as cover says (stale: the member relisted after the sweep, which must be
// made again). Every object the sweep listed is then in the member's
// cache, or was deleted after the sweep while the member watched it
// (and heard of it): its watch has been unbroken since a list made at or
// before the sweep's, and has reached every listed object's last change.
// An object deleted later, the member hears of from its cache (a DELETED
// event, or a relist that finds it gone). Unknown positions (0, or not a
// number: math.MaxUint64) never hand a slot over.
func HandedOver(slot int, cover Cover, at, newest uint64) (handed, stale bool) {
	unknown := func(rv uint64) bool { return rv == 0 || rv == math.MaxUint64 }
	if !cover.Slots.Has(slot) || unknown(at) || unknown(cover.Since) || unknown(cover.Synced) {
		return false, false
	}
	if cover.Since > at {
		return false, true
	}
	return newest <= cover.Synced, false
}

// Step is the next Claims; it reads no clock and does no I/O.
func (c Claims) Step(v View) Claims {
	if !v.Live {
		return Claims{}
	}
	next := Claims{Target: v.Target} // Lingering: the member's (not a step's)
	// Slots still ours stay Working; a slot that was being released and is
	// ours again was claimed all along, so nobody can have taken it.
	next.Working = c.Working.Union(c.Releasing).And(v.Target)
	// A slot released in an earlier step stays claimed while a reconcile
	// or a deletion of it is in flight, and until it was swept after its
	// new owner covered it; one released now waits for the next step.
	// (The cover that made the sweep count must hold still: a new owner
	// that dropped the slot may have dropped deletions with it.)
	// A deletion that keeps failing holds its slot only until it is
	// overdue: else one bad object would stall the handoff, and with it
	// every key of its slot, for good.
	// (A slot that is ours again is not let go, nor given.)
	done := c.Sweep.And(v.Swept).And(v.Handed.Union(v.Overdue)).Minus(v.Busy).Minus(v.Failing.Minus(v.Overdue)).Minus(v.Target)
	next.Releasing = c.Releasing.Minus(v.Target).Minus(done).Union(c.Working.Minus(v.Target))
	// A stale sweep is dropped for a step, and so asked for again.
	next.Sweep = next.Releasing.And(v.Covered.Union(v.Overdue)).Minus(v.Stale.Minus(v.Overdue))
	// A slot let go is given, by name, until its new owner confirms it; a
	// given slot counts as the new owner's claim.
	next.Given = c.Given.Minus(v.Accepted).Union(done)
	others := v.Others.Union(next.Given)
	wanted := v.Target.Union(v.Custody).Union(v.Holding)
	// A Working slot that another live member claims confirmed: a split
	// brain the rules above never make, but a wrong idea of who is live
	// can. Withdrawn at once, not released (Releasing would keep it
	// claimed, its deletions handled here): the gate admits nothing more
	// of it and cancels what is in flight. The other does the same when it
	// reads our Lease; then the slot is claimed afresh, by the rules above.
	// (Whether or not our own renewal went through: dropping a slot never
	// makes a split brain, and a failing renewal must not keep one going
	// until the fence.)
	next.Working = next.Working.Minus(v.Rival)
	if !v.Confirmed { // nothing new is known of the others
		next.Pending = c.Pending.And(wanted)
		next.Custody = v.Custody.Minus(next.Working).Minus(next.Releasing)
		next.Holding = v.Holding.Minus(next.Claimed())
		return next
	}
	// Claims this step's renewal wrote, and no other live member claims:
	// confirmed, into Working (its target) or Releasing (custody, or held
	// deletions, only).
	// Published claims another member also holds are withdrawn.
	confirmed := c.Pending.And(v.Published).Minus(others)
	next.Working = next.Working.Union(confirmed.And(v.Target))
	next.Releasing = next.Releasing.Union(confirmed.And(v.Custody.Union(v.Holding)).Minus(v.Target))
	// Except those only a Lease in doubt claims: they stay Pending (the
	// next list that reads its renewal says whether it claims them), else
	// a Lease moved between every other pair of its renewals (a label)
	// would keep a joiner from ever confirming one.
	doubted := c.Pending.And(v.Published).And(v.Doubted).Minus(confirmed).Minus(next.Given)
	next.Pending = c.Pending.Minus(v.Published).Union(doubted).And(wanted)
	// What we should own, or were given, and nobody claims: claim it (the
	// next renewal writes it, the list after that confirms it).
	free := wanted.Minus(next.Claimed()).Minus(others).And(v.Covers)
	next.Pending = next.Pending.Union(free)
	next.Custody = v.Custody.Minus(next.Working).Minus(next.Releasing)
	next.Holding = v.Holding.Minus(next.Claimed())
	return next
}
