package chaos

import (
	"strings"
	"testing"
	"time"
)

// A fence excuses a deletion no replica saw when the slot's claimant (or
// the replica that held the deletion while nobody claimed the slot) fenced
// itself within the bound, and no replica that kept the deletion, or had
// the object, worked the slot again after the fence.

// A fence keeps its deletions: the replica holds those it heard of while
// its watcher watches their slot, and handles them when it works the slot
// again. So a fence within the bound is no excuse for a deletion its
// replica kept and then worked the slot again: a claims the slot, hears the
// deletion at 100 s and keeps it, fences itself (5 s after the deletion, or
// 10 s before it, the slot then unclaimed), and claims the slot again from
// 108 s to the end of the run. Lost, as it is without the fence (the
// control).
func TestAFenceDoesNotExcuseADeletionItsReplicaKeptAndWorkedTheSlotAgain(t *testing.T) {
	for _, c := range []struct {
		name  string
		fence time.Duration
	}{{"fenced after the deletion", 105 * time.Second}, {"fenced before the deletion", 90 * time.Second}} {
		s := newScene("a", "b").claims("a", 0, true, false, 10).heard("a").knew("a").
			claims("a", c.fence, false, true, 100).claims("a", 108*time.Second, true, false, 200)
		if v := s.verdict(); len(v.UnseenDeletions) == 0 {
			var why []string
			for _, u := range v.Unclaimed {
				_, w, _ := strings.Cut(u, "; ")
				why = append(why, strings.TrimSuffix(w, ")"))
			}
			t.Errorf("%s, heard and kept it, worked the slot again from 108 s: excused (unclaimed %v), want lost", c.name, why)
		}
	}
	// The control: the same without the fence is lost.
	if v := newScene("a", "b").claims("a", 0, true, false, 10).heard("a").knew("a").verdict(); len(v.UnseenDeletions) != 1 {
		t.Fatalf("the control (no fence) is not lost: %+v", v)
	}
}

// A replica that works the slot again after its fence replays what it held,
// but its queue, behind a backlog (an API server's restart hands every
// replica its whole shard again), may not reach the deletion before the next
// fence holds it again: a second fence within the bound still excuses it; a
// re-claim worked for longer than the bound does not.
func TestAFenceAgainSoonAfterWorkingTheSlotAgainStillExcuses(t *testing.T) {
	run := func(again time.Duration) Verdict {
		return newScene("a", "b").claims("a", 0, true, false, 10).heard("a").knew("a").
			claims("a", 105*time.Second, false, true, 100).claims("a", 108*time.Second, true, false, 200).
			claims("a", 108*time.Second+again, false, true, 300).verdict()
	}
	if v := run(6 * time.Second); len(v.UnseenDeletions) != 0 {
		t.Errorf("fenced again 6 s after working the slot again: lost %v, want excused", v.UnseenDeletions)
	}
	if v := run(40 * time.Second); len(v.UnseenDeletions) != 1 {
		t.Errorf("fenced again 40 s after working the slot again (bound %v): excused, want lost", v.Bound)
	}
}

// The re-claims a replica works between fences add up against the bound:
// after a fence the queue holds what its workers reach, so a backlog one
// re-claim could not get through is gone by the next. a, fenced 5 s after
// the deletion with it held, claims the slot again five times, 20 s each
// (bound 24 s), each ended by a fence: 100 s of work, the deletion replayed
// each time and never handled. Lost, as one re-claim of 25 s is (the
// control).
func TestReClaimsEndedByFencesAddUpAgainstTheBound(t *testing.T) {
	run := func(n int, each time.Duration) Verdict {
		s := newScene("a", "b").claims("a", 0, true, false, 10).heard("a").knew("a").
			claims("a", 105*time.Second, false, true, 100)
		at := 108 * time.Second
		for i := range n {
			s.claims("a", at, true, false, int64(200+2*i)).claims("a", at+each, false, true, int64(201+2*i))
			at += each + 2*time.Second
		}
		return s.verdict()
	}
	if v := run(1, 25*time.Second); len(v.UnseenDeletions) != 1 {
		t.Fatalf("the control, one re-claim of 25 s (over the bound), is not lost: %+v", v)
	}
	if v := run(5, 20*time.Second); len(v.UnseenDeletions) != 1 {
		t.Errorf("a worked the slot again 5 times for 20s each (100s in all, bound %v), the deletion held and replayed each time: excused (unclaimed %v), want lost", v.Bound, v.UnclaimedWhy)
	}
}

// "Kept" is judged while the replica works the slot again: a drop after
// that is no excuse. a, fenced 5 s after the deletion with it held, works
// the slot again from 108 s for 62 s (bound 24 s), the deletion replayed
// and not handled; fenced again at 170 s, it drops the deletion at 175 s
// (the slot left its watch). Lost, as it is without the drop (the control).
func TestADropAfterWorkingTheSlotAgainDoesNotRestoreTheFenceExcuse(t *testing.T) {
	scene := func() *scene {
		return newScene("a", "b").claims("a", 0, true, false, 10).heard("a").knew("a").
			claims("a", 105*time.Second, false, true, 100).claims("a", 108*time.Second, true, false, 200).
			claims("a", 170*time.Second, false, true, 300)
	}
	if v := scene().verdict(); len(v.UnseenDeletions) != 1 {
		t.Fatalf("the control (no drop) is not lost: %+v", v)
	}
	if v := scene().dropped("a", 175*time.Second).verdict(); len(v.UnseenDeletions) != 1 {
		t.Errorf("a worked the slot again 62s (bound %v) with the deletion replayed, and dropped it only after: excused (unclaimed %v), want lost", v.Bound, v.UnclaimedWhy)
	}
}

// The ring forming: nobody claimed the slot at the deletion; b, watching
// it, claimed it first at 103 s and fenced itself at 110 s. The fence
// excuses the deletion only if nobody could handle it after: not when a
// replica that had the object (its store held it: its watch, or the relist
// of a takeover, reports it gone) works the slot again after that fence,
// without a fence or a kill ending it, heard of the deletion or not.
func TestFormingRingFenceIsNoExcuseWhenAHolderWorksTheSlotAfter(t *testing.T) {
	for _, c := range []struct {
		name  string
		scene *scene
		want  string
	}{
		// b had the object, fenced, then claimed the slot again at 115 s
		// and worked it to the end of the run: its watch (or its relist)
		// never reported the deletion.
		{"its first claimant had it, fenced, and worked the slot again", newScene("a", "b").list("b", 90*time.Second, 140).knewAt("b", 95*time.Second).
			claims("b", 103*time.Second, true, false, 140).claims("b", 110*time.Second, false, true, 140).claims("b", 115*time.Second, true, false, 200), "lost"},
		// a, which had the object as b did, claimed the slot right after b's fence
		// and worked it to the end of the run.
		{"another that had it claimed the slot right after the fence", newScene("a", "b").list("b", 90*time.Second, 140).list("a", 90*time.Second, 140).knewAt("a", 95*time.Second).knewAt("b", 95*time.Second).
			claims("b", 103*time.Second, true, false, 140).claims("b", 110*time.Second, false, true, 140).claims("a", 111*time.Second, true, false, 200), "lost"},
		// Control: the same, a never had the object (its takeover list came
		// after the deletion): the fence is the excuse.
		{"another that never had it claimed the slot after the fence", newScene("a", "b").list("b", 90*time.Second, 140).
			claims("b", 103*time.Second, true, false, 140).claims("b", 110*time.Second, false, true, 140).list("a", 111*time.Second, 200).claims("a", 111*time.Second, true, false, 200), "fenced"},
	} {
		if got := excused(c.scene.verdict()); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}
