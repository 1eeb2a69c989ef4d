package chaos

import (
	"testing"
	"time"

	"rawwatch/shard"
)

// Adversarial review of 120059e (the killed first claimant of a forming
// ring dies with a deletion made while nobody claimed its slot). The rule
// asks only about k: that it claimed first after the deletion, held the
// claim to its kill, nobody else claimed in between, and it did not drop
// the deletion. It does not ask whether k could have handled the deletion
// had it lived, nor whether another replica held it and worked the slot
// after. Each scene below is lost on the code before 120059e and excused
// by it.

// A live replica heard of the deletion, kept it, and worked the slot
// after the kill. b watched the slot too (the forming ring's views
// disagree), heard the deletion and held it for when it works the slot;
// k claimed first and died; b claimed the slot at 119 s and works it to
// the end of the run: the gate hands a held deletion to the workers when
// the slot is worked. b should have handled it; its loss is b's.
func TestAdversaryAKilledFirstClaimantExcusesADeletionALiveReplicaKeptAndWorked(t *testing.T) {
	v := newScene("k", "b").knew("k").list("k", 90*time.Second, 140).
		knew("b").list("b", 90*time.Second, 140).heard("b").
		claims("k", 103*time.Second, true, false, 140).kill("k", 110*time.Second).
		claims("b", 119*time.Second, true, false, 200).verdict()
	if len(v.UnseenDeletions) != 1 {
		t.Errorf("b heard of it, kept it and worked the slot from 9 s after the kill on: died with %v, lost %d; want lost", v.WithKilled, len(v.UnseenDeletions))
	}
}

// "Nobody claimed" is not "never claimed yet": b worked the slot, fenced
// itself 5 s before the deletion, heard of it and kept it (a fence keeps
// its deletions), and worked the slot again after k's kill. The fence
// rule would find b (keptAndWorkedAgain); the new rule is tried first.
func TestAdversaryAKilledFirstClaimantHidesAFencedReplicaThatWorkedTheSlotAgain(t *testing.T) {
	v := newScene("k", "b").claims("b", 0, true, false, 10).claims("b", 95*time.Second, false, true, 100).
		knew("b").heard("b").knew("k").list("k", 90*time.Second, 140).
		claims("k", 103*time.Second, true, false, 140).kill("k", 110*time.Second).
		claims("b", 119*time.Second, true, false, 200).verdict()
	if len(v.UnseenDeletions) != 1 {
		t.Errorf("b fenced itself 5 s before, kept the deletion and worked the slot again after the kill: died with %v, unclaimed %v; want lost", v.WithKilled, v.Unclaimed)
	}
}

// k could not have handled it alive: it first listed the slot 2 s after
// the deletion (never had the object), while b, which watched the slot
// and had the object, heard of the deletion and dropped it (the slot
// left its watch). The deletion was lost by b's drop, not by k's death.
func TestAdversaryAKilledFirstClaimantThatListedAfterTheDeletionExcusesIt(t *testing.T) {
	v := newScene("k", "b").knew("b").list("b", 90*time.Second, 140).heard("b").dropped("b", 101*time.Second).
		list("k", 102*time.Second, 160).claims("k", 103*time.Second, true, false, 160).kill("k", 110*time.Second).verdict()
	if len(v.UnseenDeletions) != 1 {
		t.Errorf("k listed the slot after the deletion (never had the object), b heard of it and dropped it: died with %v; want lost", v.WithKilled)
	}
}

// k watched the slot at the deletion but never had the object (its watch
// stood at 140, the object was created at 150, after it broke); b had
// it, heard of the deletion and dropped it. Alive, k's relist would not
// have had the object either: it would never have heard of it.
func TestAdversaryAKilledFirstClaimantThatNeverHadTheObjectExcusesIt(t *testing.T) {
	v := newScene("k", "b").list("k", 90*time.Second, 140).
		knew("b").list("b", 90*time.Second, 140).heard("b").dropped("b", 101*time.Second).
		claims("k", 103*time.Second, true, false, 140).kill("k", 110*time.Second).verdict()
	if len(v.UnseenDeletions) != 1 {
		t.Errorf("k never had the object, b heard of it and dropped it: died with %v; want lost", v.WithKilled)
	}
}

// k had the object and watched the slot at the deletion, then left it
// (SetShard: its store drops the slot's objects without a deletion) and
// came back by a list 2 s after the deletion, which did not have it: k
// would never have heard of it, alive or not.
func TestAdversaryAKilledFirstClaimantThatLeftTheSlotAfterTheDeletionExcusesIt(t *testing.T) {
	s := newScene("k", "b").knew("k").list("k", 90*time.Second, 140)
	rec := s.by["k"].rec
	rec.watching = append(rec.watching, listed{at: s.at(101 * time.Second), rv: 140, slots: shard.SlotsOf((s.slot + 1) % shard.Slots)})
	v := s.list("k", 102*time.Second, 160).claims("k", 103*time.Second, true, false, 160).kill("k", 110*time.Second).verdict()
	if len(v.UnseenDeletions) != 1 {
		t.Errorf("k left the slot 1 s after the deletion and came back by a list without the object: died with %v; want lost", v.WithKilled)
	}
}

// The same hole in the older branches of the kill's rule: k claimed the
// slot at the deletion to its death, or heard of it and held it while
// nobody claimed the slot; b heard of it too, kept it, and worked the
// slot from 9 s after the kill on. b should have handled it.
func TestAdversaryAKillExcusesADeletionALiveReplicaKeptAndWorkedAfter(t *testing.T) {
	for name, s := range map[string]*scene{
		"k claimed the slot at the deletion": newScene("k", "b").claims("k", 0, true, false, 10),
		"k heard of it and held it":          newScene("k", "b").knew("k").heard("k").list("k", 90*time.Second, 140),
	} {
		v := s.knew("b").heard("b").list("b", 90*time.Second, 140).kill("k", 110*time.Second).
			claims("b", 119*time.Second, true, false, 200).verdict()
		if len(v.UnseenDeletions) != 1 {
			t.Errorf("%s; b heard of it, kept it and worked the slot after the kill: died with %v; want lost", name, v.WithKilled)
		}
	}
}

// What the rule still excuses: k had the object and watched the slot from
// the deletion to its claim, and b, which heard of it too, dropped it (the
// slot left its watch) or kept it without working the slot again; or
// nobody ever had the object (k's watch broke before its creation, and k
// died before a relist could prove it invisible). c, the next owner,
// lists the slot after the kill.
func TestAKilledFirstClaimantStillDiesWithWhatOnlyItCouldHandle(t *testing.T) {
	start := func() *scene { return newScene("k", "b", "c").list("k", 90*time.Second, 140) }
	for name, s := range map[string]*scene{
		"b heard of it and dropped it":              start().knew("k").knew("b").list("b", 90*time.Second, 140).heard("b").dropped("b", 101*time.Second),
		"b heard of it, kept it, never worked it":   start().knew("k").knew("b").list("b", 90*time.Second, 140).heard("b"),
		"k heard of it too, b dropped it":           start().knew("k").heard("k").knew("b").list("b", 90*time.Second, 140).heard("b").dropped("b", 101*time.Second),
		"nobody had the object, k watched the slot": start(),
	} {
		v := s.claims("k", 103*time.Second, true, false, 140).kill("k", 110*time.Second).
			list("c", 118*time.Second, 200).claims("c", 119*time.Second, true, false, 200).verdict()
		if len(v.WithKilled) != 1 {
			t.Errorf("%s: lost %v; want died with k", name, v.UnseenDeletions)
		}
	}
}
