package chaos

import (
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
