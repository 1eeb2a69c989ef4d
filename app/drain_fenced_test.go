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

// A replica may leave while its ring is fenced (its Lease API failed around
// the SIGTERM, or its fence fired during the drain), its gate refusing every
// deletion. Its drain still sweeps the watched slots, waits within
// DrainTimeout for the ring to claim its slots again (the held deletions are
// replayed and handled then), and reports what is still held at the end as
// abandoned: each deletion, the one queued and the one the watch had not
// brought, is handled or reported (docs/sharding.md, "A clean leave
// drains").
func TestALeaveWhileFencedHandlesOrReportsEveryDeletion(t *testing.T) {
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
		a.drain(ctx, ctx, func() {}, stopped)
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

// A joiner stopped while its claims are still Pending (a scale-up undone at
// once), its lease fresh, is not fenced: its drain reports the deletion it
// held for a Pending slot abandoned at once, and does not wait its
// DrainTimeout for the ring to confirm slots it is leaving.
func TestALeaveWithPendingClaimsIsNotTakenForFenced(t *testing.T) {
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
	a.drain(ctx, ctx, func() {}, stopped)
	if ctx.Err() != nil {
		t.Fatalf("a joiner leaving with its claims Pending (not fenced: its lease fresh), one deletion held: the drain waited its whole DrainTimeout (2s) for the ring to confirm slots it is leaving; routes %v; want the held deletion reported abandoned at once", log.routes())
	}
}
