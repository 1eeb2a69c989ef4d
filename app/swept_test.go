package app

import (
	"testing"

	"rawwatch/observe"
	"rawwatch/ring"
	"rawwatch/shard"
	"rawwatch/store"
)

// A slot is let go once the new owner's cache has reached every object the
// sweep listed (ring.HandedOver, on Sweeps.Newest). Between the sweep and
// the let-go the old owner's watch may bring an object created after the
// sweep: the new owner must have reached it too (its watch may have broken
// right after the sweep, and relist after that object's deletion: then
// nobody would hear of it). So the newest a slot reports is the newest of
// the sweep and of what the old owner's store held of the slot at the
// ring's previous step.
func TestASweptSlotWaitsForWhatTheWatchBroughtSince(t *testing.T) {
	s := store.New[Object]()
	g := newGate(s, observe.Nop)
	d := tombstoneIn(t, 7) // an object of slot 7
	g.set(ring.Claims{Releasing: shard.SlotsOf(7), Sweep: shard.SlotsOf(7)})
	var newest [shard.Slots]uint64
	newest[7] = 100
	g.toSweep() // the sweep begins
	g.sweptNow(shard.SlotsOf(7), 120, &newest)
	obj := d.Object.DeepCopy()
	obj.ResourceVersion = "150" // created after the sweep's list, brought by the watch
	s.Upsert(obj)
	// The ring's next step reads the store as it was at the step before;
	// the step after, as it is now.
	if got := g.sweptSlots().Newest[7]; got != 100 {
		t.Errorf("slot 7 swept at 120 with its newest object at 100: newest %d at the first step, want 100", got)
	}
	if got := g.sweptSlots().Newest[7]; got != 150 {
		t.Errorf("slot 7 swept at 120 with its newest object at 100, then an object at 150 in the store: newest %d at the next step, want 150", got)
	}
}
