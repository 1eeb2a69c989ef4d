package chaos

import (
	"context"
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
