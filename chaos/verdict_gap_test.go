package chaos

import (
	"testing"
	"time"

	"rawwatch/app"
	"rawwatch/ring"
	"rawwatch/shard"
	"rawwatch/sharding"
	"rawwatch/store"
	"rawwatch/watcher"
)

// A relist gap excuses a deletion no replica could have seen: the object
// lived inside a gap of every watch that should have seen it. It does not
// when a replica had the object while it claimed the slot, or was given
// the slot (recorder.custody).

// hadAt: replica name's store held the object at offset at, as its
// recorder is told (Replaced and EventReceived call had).
func (s *scene) hadAt(name string, at time.Duration) *scene {
	s.by[name].rec.had(s.d.incarnation, s.at(at))
	return s
}

// One controller (no sharding): a relist gap excuses a deletion of an
// object it never had, created inside the gap; one created outside it is
// lost.
func TestOneControllersRelistGapExcusesOnlyWhatWasCreatedInsideIt(t *testing.T) {
	for _, c := range []struct {
		gap  [2]int64
		want int
	}{{[2]int64{100, 200}, 0}, {[2]int64{160, 200}, 1}} {
		s := newScene("only").gap("only", c.gap[0], c.gap[1])
		s.j.sharded = false
		if v := s.verdict(); len(v.UnseenDeletions) != c.want || v.Invisible != 1-c.want {
			t.Errorf("gap %v: %d lost, %d in a relist gap; want %d lost", c.gap, len(v.UnseenDeletions), v.Invisible, c.want)
		}
	}
}

// A replica holds the object for custody over every stretch its store had
// it, not only the first: a watch that leaves a slot may come back to it
// (the ring's target flaps: SetShard away, SetShard back), and its relist
// brings the object back into the store.
//
// b is a joiner watching the slot as its target: it lists at 90 s (rv 140)
// and hears the object created (rv 150) at 95 s; its target flaps away at
// 96 s (the reshard drops the object from its store) and back at 97 s (its
// relist, rv 160, brings the object again). The deletion at 100 s reaches
// it, and its gate holds it (b watches, does not claim). a, the claimant,
// was in a watch gap over the whole life of the object (100 → 200); it
// lets the slot go at 102 s, and b claims it at 103 s: the gate replays the
// held deletion to b's workers. b had the object, and its deletion, while
// it claimed the slot: unseen, it is a loss, as when b never left the slot
// (the control "a watcher had the object, then claimed the slot" of
// TestEveryExcuseHasAControl).
func TestAWatchThatCameBackToTheSlotStillHadTheObject(t *testing.T) {
	scene := func(back bool) *scene {
		s := newScene("a", "b").claims("a", 0, true, false, 10).gap("a", 100, 200).
			list("b", 90*time.Second, 140).hadAt("b", 95*time.Second).unwatch("b", 96*time.Second)
		if back {
			s.list("b", 97*time.Second, 160).hadAt("b", 97*time.Second).heard("b")
		}
		return s.claims("a", 102*time.Second, false, false, 200).
			list("b", 102500*time.Millisecond, 210).claims("b", 103*time.Second, true, false, 210)
	}
	// The control: b's watch left the slot and did not come back before
	// the deletion (its list at 102.5 s is after it): b owed it nobody, a's
	// gap hid it.
	if v := scene(false).verdict(); v.Invisible != 1 {
		t.Fatalf("control: b had the object only while it watched the slot, its watch left it, it claimed the slot after the deletion: want relist gap, got %+v", v)
	}
	if v := scene(true).verdict(); len(v.UnseenDeletions) != 1 {
		t.Errorf("b's watch came back to the slot at 97 s with the object, b held its deletion (heard, not dropped) and claimed the slot at 103 s (its gate replays it): relist gap %d, lost %d; want lost",
			v.Invisible, len(v.UnseenDeletions))
	}
}

// A slot let go is given, by name, to a member that covers it (ring: "the
// new owner"), and that member keeps its deletions and claims the slot
// whatever its target (Claims.Custody). So the replica a slot was given to
// owes the deletions it held, though it has not claimed the slot yet: the
// old owner lets the slot go to k, the only replica that watched it then,
// which had the object (and holds, or will hold, its deletion); k's target
// moves on and it drops the deletion with the slot; b, which listed the
// slot only after the deletion, claims it. Lost.
//
// Two forms: the deletion after the let-go (the old owner's watch was
// behind the creation), and before it (the object lived in a gap of the
// old owner's watch: a relist gap). The control: another replica, c,
// covered the slot at the let-go without ever having the object (its own
// watch's gap, or its list after the deletion): the slot may have gone to
// c, and k (watching by a view of the ring that c's arrival had not
// reached yet) owed it nobody: a relist gap excuses it. After the let-go,
// no gap excuses it: a handoff has no window.
func TestTheReplicaGivenTheSlotOwesTheDeletionItHeld(t *testing.T) {
	// k watches the slot from 90 s (rv 140) and hears the object created
	// (rv 150) at 95 s.
	k := func(s *scene) *scene { return s.list("k", 90*time.Second, 140).hadAt("k", 95*time.Second) }
	handoff := func(c bool) *scene {
		// a lets the slot go at 98 s, its watch at 140; the deletion at
		// 100 s reaches k (held); k drops it at 104 s; b lists at 103 s
		// (rv 170) and claims at 105 s.
		s := k(newScene("a", "b", "k", "c").claims("a", 0, true, false, 10).claims("a", 98*time.Second, false, false, 140)).
			heard("k").unwatch("k", 104*time.Second).dropped("k", 104*time.Second)
		if c {
			s.list("c", 97*time.Second, 145).gap("c", 145, 170)
		}
		return s.list("b", 103*time.Second, 170).claims("b", 105*time.Second, true, false, 170)
	}
	relist := func(c bool) *scene {
		// a, in a watch gap from 100 to 200 over the object's life, lets
		// the slot go at 102 s; k holds the deletion, drops it at 104 s;
		// b lists at 105 s (rv 210) and claims at 106 s.
		s := k(newScene("a", "b", "k", "c").claims("a", 0, true, false, 10).gap("a", 100, 200).claims("a", 102*time.Second, false, false, 200)).
			heard("k").unwatch("k", 104*time.Second).dropped("k", 104*time.Second)
		if c {
			s.list("c", 101*time.Second, 205)
		}
		return s.list("b", 105*time.Second, 210).claims("b", 106*time.Second, true, false, 210)
	}
	for _, c := range []struct {
		name  string
		scene *scene
		want  string
	}{
		// And when k, or a, died or fenced itself soon after the let-go,
		// what k did is the kill's or the fence's (a killed k never
		// claims; a fence ends the custody: k's, or a's Lease's naming k):
		// not this rule's.
		{"control: k killed 3 s after the let-go", relist(false).kill("k", 105*time.Second), "relist gap"},
		{"control: k fenced itself 1 s after the let-go, then dropped it", k(newScene("a", "b", "k").claims("a", 0, true, false, 10).
			gap("a", 100, 200).claims("a", 102*time.Second, false, false, 200)).heard("k").claims("k", 103*time.Second, false, true, 140).
			unwatch("k", 110*time.Second).dropped("k", 110*time.Second).list("b", 111*time.Second, 210).claims("b", 112*time.Second, true, false, 210), "relist gap"},
		{"control: a killed 2 s after its let-go", relist(false).kill("a", 104*time.Second), "relist gap"},
		{"c covered the slot too at the let-go, and never had the object (deleted after the let-go)", handoff(true), "lost"},
		{"control: c covered the slot too at the let-go, and never had the object (relist)", relist(true), "relist gap"},
		{"a let the slot go at 98 s when only k covered it; k had the object, held its deletion from 100 s and dropped it at 104 s", handoff(false), "lost"},
		{"a let the slot go at 102 s when only k covered it; k had the object, held its deletion and dropped it at 104 s", relist(false), "lost"},
	} {
		if got := excused(c.scene.verdict()); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

// The next claimant after a let-go may be the old owner itself: a claims
// the slot at the deletion (100 s), lets it go at 101 s with its watch at
// 140, claims it again at 102 s, and follows it without a gap until it lets
// it go at 499.5 s with its watch at 1000; b lists the slot at 499 s and
// claims it at 500 s. a's watch passed the object's creation (150) while a
// claimed the slot: it brought the object, or a's watcher lost it. Lost.
func TestAnOldOwnerThatClaimedAgainPastTheCreationOwesTheDeletion(t *testing.T) {
	v := newScene("a", "b").claims("a", 0, true, false, 10).claims("a", 101*time.Second, false, false, 140).
		claims("a", 102*time.Second, true, false, 140).claims("a", 499500*time.Millisecond, false, false, 1000).
		list("b", 499*time.Second, 900).claims("b", 500*time.Second, true, false, 900).verdict()
	if len(v.UnseenDeletions) == 0 {
		t.Errorf("a claimed the slot again and watched it past the creation: lost %d; want lost", len(v.UnseenDeletions))
	}
}

// A replica's watch of a slot ends at a SetShard (the ring moved its
// target: onClaims calls Watcher.SetShard, which drops the slot's objects,
// narrows Covered at once and relists the new shard), not at its next
// list. An object of the slot created and deleted between that SetShard
// and the relist's end, nobody claiming the slot and nobody else watching
// it, is lost, not a relist gap of that watch. Driven through
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
