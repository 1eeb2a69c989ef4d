package chaos

import (
	"testing"
	"time"
)

// Adversarial review of d8a0ae0 (a relist or handoff gap is refused only
// when a replica had the object while it claimed its slot:
// recorder.custody).

// hadAt: replica name's store held the object at offset at, as its
// recorder is told (Replaced and EventReceived call had).
func (s *scene) hadAt(name string, at time.Duration) *scene {
	s.by[name].rec.had(s.d.incarnation, s.at(at))
	return s
}

// custody measured the replica's hold on the object from the first time
// its store had it to the first time its watch left the slot, and no
// further; but a watch that leaves a slot may come back to it (the ring's
// target flaps: SetShard away, SetShard back), and its relist brings the
// object back into the store. recorder.known keeps only the first time, so
// the second stretch was invisible to custody.
//
// b is a joiner watching the slot as its target: it lists at 90 s (rv 140)
// and hears the object created (rv 150) at 95 s; its target flaps away at
// 96 s (the reshard drops the object from its store) and back at 97 s (its
// relist, rv 160, brings the object again). The deletion at 100 s reaches
// it, and its gate holds it (b watches, does not claim). a, the claimant,
// was in a watch gap over the whole life of the object (100 → 200); it
// lets the slot go at 102 s, and b claims it at 103 s: the gate replays the
// held deletion to b's workers. b had the object, and its deletion, while
// it claimed the slot: the deletion was b's to handle, and unseen it is a
// loss, as when b never left the slot (the existing control "a watcher
// had the object, then claimed the slot").
func TestAdversaryAWatchThatCameBackToTheSlotStillHadTheObject(t *testing.T) {
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
		t.Errorf("b's watch came back to the slot at 97 s with the object, b held its deletion (heard, not dropped) and claimed the slot at 103 s (its gate replays it): relist gap %d, handoff gap %d, lost %d; want lost",
			v.Invisible, v.HandoffGap, len(v.UnseenDeletions))
	}
}
