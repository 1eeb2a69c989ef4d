package chaos

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rawwatch/api/v1alpha1"
	"rawwatch/internal/app"
	"rawwatch/store"
)

// deletedOnly is a reconciler whose Deleted needs no API server, as
// reconcile.MyResourceReconciler's does not (it logs).
type deletedOnly struct{}

func (deletedOnly) Reconcile(context.Context, string) error                { return nil }
func (deletedOnly) Deleted(context.Context, store.Delta[app.Object]) error { return nil }

// Claim (verdict.go, facts; docs/sharding.md's table, "killed"): a deletion
// the killed replica held is excused only if it was made at most the bound
// (24 s here) before the kill; one held longer "should have been handled by
// then: its loss is not the kill's", and fails the run.
//
// It does not hold. replica.kill() sets r.to, then calls r.stop(), which
// cancels the app's context: app.drain (internal/app/sharding.go) then hands
// every queued deletion to Deleted, which needs no API server (the dead
// transport does not stop it), and the recorder marks it seenDeleted, with no
// time. facts() counts seenDeleted from every replica, the killed one
// included, whenever it was set: a deletion k sat on for 40 s (past the
// bound: the control "killed, claiming the slot, 40 s after the deletion" in
// TestEveryExcuseHasAControl is "lost") and "handled" by k only after its
// SIGKILL stand-in is counted seen. A real SIGKILL handles nothing; the loss
// is hidden (and, within the bound, the killed replica's deletions are
// counted "seen" instead of "killed").
//
// Fails with:
//
//	a deletion k held 40 s and handled only after its kill (by the stop's drain) is not lost: Verdict{UnseenDeletions:[] ... WithKilled:[] ...}
func TestAdversaryAKilledReplicasPosthumousDrainHidesALoss(t *testing.T) {
	s := newScene("a", "k").claims("k", 0, true, false, 10).kill("k", 140*time.Second)
	k := s.by["k"]
	k.rec.who = "k"
	k.rec.wrap(deletedOnly{})
	// After the kill (r.to is set), the stop's drain hands k's queued
	// deletion to Deleted, as app.drain does.
	obj := &v1alpha1.MyResource{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "obj", UID: s.d.UID}}
	if err := k.rec.Deleted(context.Background(), store.Delta[app.Object]{Type: store.Deleted, Key: s.d.Key, Object: obj}); err != nil {
		t.Fatal(err)
	}
	if v := s.verdict(); len(v.UnseenDeletions) == 0 {
		t.Errorf("a deletion k held 40 s and handled only after its kill (by the stop's drain) is not lost: %+v", v)
	}
}

// Claim (verdict.go, facts: "owner claimed the slot ... when it was
// deleted"; docs/sharding.md: the fence rule excuses a deletion when "its
// claimant fenced itself"): the verdict judges by the slot's claimant.
//
// When two replicas' records both claim the slot at the deletion (a Working
// at the old owner's Releasing, or two members' clocks recording one handoff
// a moment apart), facts() keeps whichever comes last in j.replicas: the
// verdict depends on the order of the slice. Here a claims the slot from 0 s
// on and never lets it go (a live claimant that should have handled the
// deletion at 100 s); b claims it from 90 s and fences itself at 105 s.
// With replicas [a b] the deletion is excused as "fenced" on b's word,
// though a claimed the slot throughout; with [b a] the same records are a
// loss.
//
// Fails with:
//
//	replicas [a b]: excused as fenced 1 (lost 0), replicas [b a]: lost 1; one set of records, two verdicts, and a live claimant throughout should make it lost
func TestAdversaryTheVerdictDependsOnTheOrderOfTheReplicas(t *testing.T) {
	build := func(names ...string) Verdict {
		s := newScene(names...).claims("a", 0, true, false, 10).
			claims("b", 90*time.Second, true, false, 140).claims("b", 105*time.Second, false, true, 150)
		return s.verdict()
	}
	ab, ba := build("a", "b"), build("b", "a")
	if len(ab.UnseenDeletions) != len(ba.UnseenDeletions) || len(ab.UnseenDeletions) == 0 {
		t.Errorf("replicas [a b]: excused as fenced %d (lost %d), replicas [b a]: lost %d; one set of records, two verdicts, and a live claimant throughout should make it lost",
			ab.UnclaimedWhy["fenced"], len(ab.UnseenDeletions), len(ba.UnseenDeletions))
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

// Claim (verdict.go, diedWith: the killed replica "heard of the deletion and
// held it, not dropped, while no live replica claimed the slot (nobody did,
// or the claimant had let it go, to it, before the kill)"; the table:
// "killed ... or heard of the deletion and held it (not dropped) while no
// live replica claimed the slot").
//
// handedOn checks only that the claimant at the deletion let the slot go
// before the kill — not to whom, nor that nobody live claimed it after. Here
// a claims the slot when the object is deleted at 100 s, lets it go at 102 s
// (a handoff: a had to handle the deletion, or sweep it, before letting go),
// and b claims it from 103 s on, alive to the end; k merely watched the
// slot, heard the deletion, and is killed at 110 s. The verdict blames the
// kill; the loss is a's, a replica that let a deletion go (the table's
// "one a replica let go of" fails the run). Without k's hearing it, the same
// records are "lost".
//
// Fails with:
//
//	a let the slot go to b (live) after the deletion: excused as died with k ([ns/obj (uid uid-1, deleted 10s before k was killed)]), want lost
func TestAdversaryAKillExcusesADeletionTheClaimantLetGoToALiveReplica(t *testing.T) {
	s := newScene("a", "b", "k").claims("a", 0, true, false, 10).knew("a").
		claims("a", 102*time.Second, false, false, 160).list("b", 102*time.Second, 160).
		claims("b", 103*time.Second, true, false, 160).
		heard("k").kill("k", 110*time.Second)
	if v := s.verdict(); len(v.UnseenDeletions) == 0 {
		t.Errorf("a let the slot go to b (live) after the deletion: excused as died with k (%v), want lost", v.WithKilled)
	}
	control := newScene("a", "b", "k").claims("a", 0, true, false, 10).knew("a").
		claims("a", 102*time.Second, false, false, 160).list("b", 102*time.Second, 160).
		claims("b", 103*time.Second, true, false, 160).kill("k", 110*time.Second)
	if v := control.verdict(); len(v.UnseenDeletions) != 1 {
		t.Fatalf("the control (k never heard of it) is not lost: %+v", v)
	}
}

// Claim (docs/sharding.md's table, "handoff gap": excused when "nobody ever
// had the object; its claimant let the slot go with its watch before the
// object's creation; the next claimant's list of the slot, made after the
// creation, did not have it" — "the old owner's watch never reached it, the
// new owner listed after it was gone").
//
// The rule asks for a claimant at the deletion. A deletion made in the
// window between the old owner's let-go and the new owner's claim (nobody
// claims a slot there: Pending is not counted, and the new owner confirms a
// renew period or two later) is of the same kind, with less reason to be
// anyone's: a let the slot go at 99 s with its watch at 140, the object was
// created at 150 and deleted at 100 s, b's list of the slot at 100.5 s
// (resourceVersion 160) did not have it, b claimed at 101 s. No replica
// could have seen it; the verdict fails the run ("let go", no rule applies).
// The same records with the deletion at 98.5 s, while a still claimed, are
// excused as a handoff gap. (It happens when a lets go at its
// HandoffTimeout, before b covers the slot: ring.Config.HandoffTimeout says
// "a deletion made between that sweep and the new owner's list is then
// seen by neither".) A false failure.
//
// Fails with:
//
//	deleted at 98.5 s (a still claimed): handoff gap 1, lost 0; deleted at 100 s (between a's let-go and b's claim): handoff gap 0, lost 1
func TestAdversaryAHandoffGapBetweenTheLetGoAndTheClaimFails(t *testing.T) {
	run := func(at time.Duration) Verdict {
		s := newScene("a", "b").claims("a", 0, true, false, 10).
			claims("a", 99*time.Second, false, false, 140).
			list("b", 100500*time.Millisecond, 160).claims("b", 101*time.Second, true, false, 160)
		s.d.At = s.at(at)
		s.j.deleted = []deletion{s.d}
		return s.verdict()
	}
	before, between := run(98500*time.Millisecond), run(100*time.Second)
	if before.HandoffGap != 1 || len(between.UnseenDeletions) != 0 {
		t.Errorf("deleted at 98.5 s (a still claimed): handoff gap %d, lost %d; deleted at 100 s (between a's let-go and b's claim): handoff gap %d, lost %d",
			before.HandoffGap, len(before.UnseenDeletions), between.HandoffGap, len(between.UnseenDeletions))
	}
}

// Claim (docs/sharding.md's table, "handoff gap": "the old owner's watch
// never reached it, the new owner listed after it was gone"; verdict.go,
// newOwnerListedAfter: "the replica that next claimed the slot after f's
// claimant let it go").
//
// The next claimant is looked for among the other replicas only, however
// late; the old owner claiming the slot again, its watch going on past the
// creation, does not count. Here a claims the slot at the deletion (100 s),
// lets it go at 101 s with its watch at 140, claims it again at 102 s, and
// follows it without a gap (none recorded) until it lets it go at 499.5 s
// with its watch at 1000; b lists the slot at 499 s and claims it at 500 s.
// a's watch passed the object's creation (150) while a claimed the slot: it
// brought the object, or a's watcher lost it — a never had it, a real loss.
// The verdict excuses it as a handoff gap, on b's list 400 s later. (Without
// a's second claim — b listing at 102 s and claiming at 103 s — the gap is
// real, and excused as the control in TestEveryExcuseHasAControl is.)
//
// Fails with:
//
//	a claimed the slot again and watched it past the creation: handoff gap 1, lost 0; want lost
func TestAdversaryAHandoffGapIgnoresTheOldOwnerClaimingAgain(t *testing.T) {
	v := newScene("a", "b").claims("a", 0, true, false, 10).claims("a", 101*time.Second, false, false, 140).
		claims("a", 102*time.Second, true, false, 140).claims("a", 499500*time.Millisecond, false, false, 1000).
		list("b", 499*time.Second, 900).claims("b", 500*time.Second, true, false, 900).verdict()
	if len(v.UnseenDeletions) == 0 {
		t.Errorf("a claimed the slot again and watched it past the creation: handoff gap %d, lost %d; want lost", v.HandoffGap, len(v.UnseenDeletions))
	}
}
