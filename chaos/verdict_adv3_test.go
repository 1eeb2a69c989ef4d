package chaos

import (
	"testing"
	"time"

	"rawwatch/internal/app"
	"rawwatch/ring"
	"rawwatch/shard"
	"rawwatch/sharding"
	"rawwatch/store"
	"rawwatch/watcher"
)

// From the review of 1d55fe6 (a deletion in a slot nobody claimed is a
// relist gap when it lies inside a gap of every watch of the slot).
//
// A replica's watch of a slot ends at a SetShard (the ring moved its
// target: onClaims calls Watcher.SetShard, which drops the slot's objects,
// narrows Covered at once and relists the new shard), not at its next
// list. The recorder marked a watch only by its lists, so from the SetShard
// until the relist was in, watchedAt still said the replica watched the
// slot it left, and the relist's gap covered it: an object of the slot
// created and deleted in that window, nobody claiming the slot and nobody
// watching it, was excused as a relist gap ("relist gap 1, lost 0; want
// lost"). The recorder now marks reshards too. Driven through
// recorder.Observe with the events a replica reports, in their order.
func TestAWatcherThatLeftTheSlotNoLongerCountsAsItsWatcher(t *testing.T) {
	run := func(leaves bool) Verdict {
		s := newScene("a", "b")
		rec := s.by["a"].rec
		rec.store = store.New[app.Object]()
		other := (s.slot + 1) % shard.Slots
		cover := shard.SlotsOf(s.slot, other)
		rec.coverage = func() shard.SlotSet { return cover }
		tick := func() { time.Sleep(2 * time.Millisecond) } // lists are stamped time.Now()
		rec.Observe(watcher.Replaced{RV: "120"})            // a lists both slots
		tick()
		if leaves {
			// The ring gives a another target: its onClaims calls
			// SetShard; the watcher cuts its stream, drops the slot
			// (Covered shrinks at once) and relists.
			rec.Observe(ring.ClaimsChanged{Claims: ring.Claims{Target: shard.SlotsOf(other)}})
			cover = shard.SlotsOf(other) // (before it reports Resharded)
			rec.Observe(sharding.Resharded{Share: 1.0 / shard.Slots})
		}
		tick()
		d := s.d
		d.At = time.Now() // created at 150, after a's position (120)
		s.d, s.j.deleted = d, []deletion{d}
		tick()
		rec.Observe(watcher.Replaced{RV: "200"}) // the relist is in
		return s.verdict()
	}
	if v := run(false); v.Invisible != 1 {
		t.Fatalf("the control, a kept the slot (its relist at 200 listed it and had no such object): not a relist gap: %+v", v)
	}
	if v := run(true); len(v.UnseenDeletions) != 1 {
		t.Errorf("a left the slot (SetShard) at its relist's start, the object lived and died before that relist was in, nobody else watched the slot: relist gap %d, lost %d; want lost (as nobody watching)", v.Invisible, len(v.UnseenDeletions))
	}
}
