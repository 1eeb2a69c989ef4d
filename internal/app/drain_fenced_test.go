package app

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"rawwatch/ring"
	"rawwatch/shard"
)

// Claims broken (docs/sharding.md, "A clean leave drains"): "every deletion
// heard of and not handled — queued, or failed and waiting for its retry —
// is handed to Deleted ... Steps 1–3 end at most DrainTimeout after the
// signal ... Whatever is still not handled at the bound ... is lost: a log
// line says so ..., and each is reported as a DeletionRouted 'abandoned'".
//
// A replica leaves while its ring is fenced (its Lease API failed for L − R
// around the SIGTERM, or its fence fired during the drain: the ring still
// runs while it drains). Its gate refuses every deletion; gatedReconciler
// then returns nil, so DrainDeletions counts the deletion handled (it goes
// to "held"), and the sweep lists nothing (it sweeps the claimed slots:
// none). The drain returns at once, well
// within DrainTimeout (which could have waited for the ring to come back),
// says it drained, and reports nothing abandoned; at the leave the held
// deletions vanish (leave calls no OnClaims when the claims are already
// empty), and the next owner lists the slot after them. Here: one deletion
// queued, one the watch had not brought (the store has it, a LIST does
// not): neither handled nor reported.
//
// Failure printed:
//
//	drain_adversary_test.go:73: a leave while fenced: handled [], routes
//	[uid-queued held]; want each deletion handled, or reported abandoned
//	when the drain's time is up
//
// Severity: lost deletions, unreported (the loss class "a fenced replica's
// deletions" is documented; the drain's claim and its report are not true).
func TestAdversaryALeaveWhileFencedLosesItsDeletionsUnreported(t *testing.T) {
	// Fixed: a fenced drain sweeps the watched slots (what it finds is
	// held too), waits within DrainTimeout for the ring to claim its slots
	// again (they are replayed and handled then), and reports what is still
	// held at the end as abandoned.
	for _, back := range []bool{false, true} {
		rec := &deleter{}
		var log routeLog
		a := leavingApp([]string{"queued", "swept"}, nil, rec, &log)
		a.watched = shard.All() // the watcher watches every slot already
		// One deletion queued before the signal (its object left the store).
		queued, _ := a.Store.Get("ns/queued")
		d, _ := a.Store.Delete(queued)
		a.Controller.OnDelta(d)
		// The ring fenced itself: OnDeadline moved to the past, then the fence
		// dropped every claim (what Member.fenceIfPast does through OnClaims).
		a.gate.setDeadline(time.Now().Add(-time.Millisecond))
		a.gate.set(ring.Claims{})
		if back { // its Lease API answers again: the ring claims its slots
			time.AfterFunc(100*time.Millisecond, func() {
				a.gate.setDeadline(time.Now().Add(time.Hour))
				a.onClaims(ring.Claims{Working: shard.All(), Target: shard.All()})
			})
		}
		stopped := make(chan struct{})
		close(stopped)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second) // DrainTimeout
		a.drain(ctx, func() {}, stopped)
		cancel()
		rec.mu.Lock()
		handled := slices.Clone(rec.handled)
		rec.mu.Unlock()
		routes := log.routes()
		abandoned := 0
		for _, r := range routes {
			if strings.HasSuffix(r, " abandoned") {
				abandoned++
			}
		}
		switch {
		case back && !(slices.Contains(handled, "uid-queued") && slices.Contains(handled, "uid-swept")):
			// (Each at least once: the second sweep finds the swept one again.)
			t.Errorf("a leave while fenced, the ring back during the drain: handled %v, routes %v; want both deletions handled", handled, routes)
		case !back && len(handled)+abandoned < 2:
			t.Errorf("a leave while fenced: handled %v, routes %v; want each deletion handled, or reported abandoned when the drain's time is up",
				handled, routes)
		}
	}
}

// Claim broken (docs/sharding.md, "The slots at a leave": "A Pending slot,
// or one only watched, had its deletions held for when the replica would
// work it; at the leave they are reported abandoned with the rest (their
// slot's owner handles them only if it heard of them too). A replica that
// leaves while fenced (it claims nothing: its Lease API failed around the
// signal) ... waits, within DrainTimeout, for its ring to claim its slots
// again"; gate.fencedHolding: "the replica claims nothing (its ring fenced
// itself)").
//
// fencedHolding never asks whether the ring fenced itself: Working and
// Releasing empty is enough. A joiner that is stopped while its claims
// are still Pending (a scale-up undone at once, a rollout aborted), its
// lease fresh, holding a deletion its watch brought for a Pending slot,
// is taken for fenced: its drain sweeps every watched slot and then waits
// for the ring to confirm the Pending claims — a handoff of those slots
// from their owners into the replica that is leaving, and back after its
// leave — or, where that does not come (here: no ring), its whole
// DrainTimeout.
//
// Failure printed:
//
//	drain_adv2_test.go:59: a joiner leaving with its claims Pending (not
//	fenced: its lease fresh), one deletion held: the drain waited its whole
//	DrainTimeout (2s) for the ring to confirm slots it is leaving; routes
//	[uid-pending held uid-pending abandoned]; want the held deletion
//	reported abandoned at once
//
// Severity: outage (a slow leave: up to DrainTimeout, or two needless
// handoffs of the joiner's share).
func TestAdversaryALeaveWithPendingClaimsWaitsAsIfFenced(t *testing.T) {
	rec := &deleter{}
	var log routeLog
	a := leavingApp([]string{"pending"}, []string{}, rec, &log)
	a.gate.set(ring.Claims{Pending: shard.All(), Target: shard.All()}) // joining: nothing confirmed yet
	obj, _ := a.Store.Get("ns/pending")
	d, _ := a.Store.Delete(obj)
	if a.gate.admit(d) {
		t.Fatal("a deletion in a Pending slot was let in")
	}
	stopped := make(chan struct{})
	close(stopped)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second) // DrainTimeout
	defer cancel()
	a.drain(ctx, func() {}, stopped)
	if ctx.Err() != nil {
		t.Fatalf("a joiner leaving with its claims Pending (not fenced: its lease fresh), one deletion held: the drain waited its whole DrainTimeout (2s) for the ring to confirm slots it is leaving; routes %v; want the held deletion reported abandoned at once", log.routes())
	}
}
