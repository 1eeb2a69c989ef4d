package chaos

import (
	"strings"
	"testing"
	"time"
)

// Second adversarial review of this session's verdict changes (6a3ea46c's
// handoff gap and 6a95647's fence excuse). Each test fails on the current
// code; RAWWATCH_OPEN_FINDINGS=1 runs it.

// Claim broken (docs/sharding.md's table, "fenced": "no replica that heard
// of it and kept it worked the slot again after the fence ... — a claim
// again that a fence or a kill ended within the bound does not count: a
// queue behind a backlog may not reach the replayed deletion first"; commit
// 6a95647: "a re-claim worked longer than the bound is still a loss").
//
// Each re-claim is judged alone. a, fenced 5 s after the deletion with it
// held, claims the slot again five times, 20 s each (bound 24 s), each
// ended by a fence: it works the slot 100 s in all, the deletion replayed
// to its queue five times, never handled — excused as "fenced", 158 s
// after the deletion. One re-claim of 25 s is a loss. (After a fence the
// queue holds what its workers reach, so a backlog that a re-claim of 20 s
// could not get through is gone by the next: the excuse's reason does not
// add up over re-claims, yet the excuse does.)
//
// Failure printed:
//
//	verdict_adv2_test.go:52: a worked the slot again 5 times for 20s each
//	(100s in all, bound 24s), the deletion held and replayed each time:
//	excused (unclaimed map[fenced:1]), want lost
//
// Severity: wrong verdict (a loss excused).
func TestAdversaryManyShortReClaimsAddUpPastTheBoundAndStillExcuse(t *testing.T) {
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

// Claim broken (verdict.go, keptAndWorkedAgain: "a replica that heard of
// deletion d, kept it (did not drop it), and claimed its slot again after
// fence ... so that one should have been handled; the fence is no
// excuse"; the table: "no replica that heard of it and kept it worked the
// slot again after the fence").
//
// "Kept" is read as "never dropped, at any time": a drop after the
// replica worked the slot again clears it. a, fenced 5 s after the
// deletion with it held, claims the slot again at 108 s and works it 62 s
// (bound 24 s): the deletion is replayed to its queue and not handled. At
// 170 s a is fenced again, and its held deletion is dropped at 175 s (the
// slot left its watch). The verdict: "fenced" — the excuse for a replica
// that dropped the deletion with its slot at the fence, not 62 s of work
// later. Without the drop, the same records are lost.
//
// Failure printed:
//
//	verdict_adv2_test.go:89: a worked the slot again 62s (bound 24s) with the
//	deletion replayed, and dropped it only after: excused (unclaimed
//	map[fenced:1]), want lost
//
// Severity: wrong verdict (a loss excused).
func TestAdversaryADropAfterWorkingTheSlotAgainRestoresTheFenceExcuse(t *testing.T) {
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

// Claim (docs/sharding.md, "A fence keeps its deletions": a replica that
// fences itself keeps the deletions it had heard of, "held while its watcher
// watches their slot, and handled when it works the slot again. After an
// outage of the API server longer than the fence ... the ring comes back as
// it was, and nothing is lost"; the verdict's table: "fenced" excuses a
// deletion whose claimant fenced itself within the bound).
//
// The fence rules never ask whether the fenced replica heard the deletion,
// kept it, and worked the slot again: a fence within the bound excuses the
// loss whatever came after. Here a claims the slot, hears the deletion at
// 100 s (not dropped), fences itself (at 105 s after the deletion; or at
// 90 s, before it, the slot then unclaimed), and claims the slot again at
// 108 s until the end of the run: it held the deletion and worked the slot,
// and never handled it — the regression the doc's 120 deletions lost at a
// fence were (fixed by keeping them). The verdict counts it "fenced", the
// run passes. Without the fence, the same records are "lost".
//
// Fails with:
//
//	fenced after the deletion, heard and kept it, worked the slot again from 108 s: excused (unclaimed [a claimed the slot, and fenced itself 5s later]), want lost
//	fenced before the deletion, heard and kept it, worked the slot again from 108 s: excused (unclaimed [a, its owner, fenced itself 10s before]), want lost
func TestAdversaryAFenceExcusesADeletionItsReplicaKeptAndNeverHandled(t *testing.T) {
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
// fence holds it again: a second fence within the bound still excuses it (a
// short sharded chaos run failed on that: 20 deletions "held; replayed;
// held", each re-claim fenced 6 s later); a re-claim worked for longer than
// the bound does not.
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
