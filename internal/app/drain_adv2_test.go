package app

import (
	"context"
	"testing"
	"time"

	"rawwatch/ring"
	"rawwatch/shard"
)

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
