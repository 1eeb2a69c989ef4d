package chaos

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rawwatch/api/v1alpha1"
	"rawwatch/app"
	"rawwatch/shard"
	"rawwatch/store"
)

// A deletion no replica saw dies with a killed replica k only when k alone
// could have handled it, within the bound before its kill: not when k could
// never have handled it alive (it never had the object, or listed the slot
// after the deletion), nor when a live replica heard of it, kept it, and
// worked the slot after the kill.

// The ring forming: nobody claims the slot when the object is deleted at
// 100 s; k, which knew the object, claims the slot first at 103 s and holds
// it to its kill at 110 s, its watch broken all along (it never hears of
// the deletion: its relists keep failing). Nobody else could have handled
// it (the next owner listed after the deletion): it died with k. The
// controls are lost: a live replica claims the slot first; k lets it go to
// a live one before its kill; k heard of it and dropped it; k is killed
// after the bound.
func TestAKilledFirstClaimantOfAFormingRingDiesWithTheDeletion(t *testing.T) {
	start := func() *scene {
		return newScene("k", "b").knew("k").list("k", 90*time.Second, 140)
	}
	excused := start().claims("k", 103*time.Second, true, false, 140).kill("k", 110*time.Second).
		list("b", 118*time.Second, 200).claims("b", 119*time.Second, true, false, 200).verdict()
	if len(excused.UnseenDeletions) != 0 || len(excused.WithKilled) != 1 {
		t.Errorf("k claimed the slot first after the deletion and held it to its kill: lost %v, died with %v; want died with k", excused.UnseenDeletions, excused.WithKilled)
	}
	controls := map[string]*scene{
		"a live replica claimed it first": start().list("b", 101*time.Second, 160).claims("b", 102*time.Second, true, false, 160).
			claims("k", 103*time.Second, true, false, 140).kill("k", 110*time.Second),
		"k let it go to a live replica before its kill": start().claims("k", 103*time.Second, true, false, 140).
			claims("k", 105*time.Second, false, false, 140).list("b", 105*time.Second, 160).claims("b", 106*time.Second, true, false, 160).
			kill("k", 110*time.Second),
		"k heard of it and dropped it": start().heard("k").dropped("k", 104*time.Second).claims("k", 103*time.Second, true, false, 140).
			kill("k", 110*time.Second).list("b", 118*time.Second, 200).claims("b", 119*time.Second, true, false, 200),
		"killed after the bound": start().claims("k", 103*time.Second, true, false, 140).kill("k", 200*time.Second).
			list("b", 208*time.Second, 300).claims("b", 209*time.Second, true, false, 300),
	}
	for name, s := range controls {
		if v := s.verdict(); len(v.UnseenDeletions) != 1 {
			t.Errorf("%s: excused (died with %v, unclaimed %v), want lost", name, v.WithKilled, v.Unclaimed)
		}
	}
}

// A live replica heard of the deletion, kept it, and worked the slot
// after the kill. b watched the slot too (the forming ring's views
// disagree), heard the deletion and held it for when it works the slot;
// k claimed first and died; b claimed the slot at 119 s and works it to
// the end of the run: the gate hands a held deletion to the workers when
// the slot is worked. b should have handled it; its loss is b's.
func TestAKilledFirstClaimantDoesNotHideALiveReplicaThatKeptTheDeletionAndWorkedTheSlot(t *testing.T) {
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
// its deletions), and worked the slot again after k's kill. The fence rule
// finds b (keptAndWorkedAgain); the kill's rule, tried first, must not hide
// it.
func TestAKilledFirstClaimantDoesNotHideAFencedReplicaThatWorkedTheSlotAgain(t *testing.T) {
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
func TestAKilledFirstClaimantThatListedAfterTheDeletionIsNoExcuse(t *testing.T) {
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
func TestAKilledFirstClaimantThatNeverHadTheObjectIsNoExcuse(t *testing.T) {
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
func TestAKilledFirstClaimantThatLeftTheSlotAfterTheDeletionIsNoExcuse(t *testing.T) {
	s := newScene("k", "b").knew("k").list("k", 90*time.Second, 140)
	rec := s.by["k"].rec
	rec.watching = append(rec.watching, listed{at: s.at(101 * time.Second), rv: 140, slots: shard.SlotsOf((s.slot + 1) % shard.Slots)})
	v := s.list("k", 102*time.Second, 160).claims("k", 103*time.Second, true, false, 160).kill("k", 110*time.Second).verdict()
	if len(v.UnseenDeletions) != 1 {
		t.Errorf("k left the slot 1 s after the deletion and came back by a list without the object: died with %v; want lost", v.WithKilled)
	}
}

// As for a first claimant, so for a replica killed claiming the slot at the
// deletion, or holding it while nobody claimed the slot: b heard of it too,
// kept it, and worked the slot from 9 s after the kill on. b should have
// handled it; its loss is b's.
func TestAKillDoesNotHideALiveReplicaThatKeptTheDeletionAndWorkedTheSlot(t *testing.T) {
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

// deletedOnly is a reconciler whose Deleted needs no API server, as
// myresource.Reconciler's does not (it logs).
type deletedOnly struct{}

func (deletedOnly) Reconcile(context.Context, string) error                { return nil }
func (deletedOnly) Deleted(context.Context, store.Delta[app.Object]) error { return nil }

// A killed replica handles nothing after its kill (the run's kill stands in
// for a SIGKILL): a deletion k held 40 s, past the bound, and handed to
// Deleted only by its stop's drain after the kill is lost, not seen.
func TestAKilledReplicasPosthumousDrainDoesNotHideALoss(t *testing.T) {
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

// A deletion whose claimant let the slot go to a live replica is not the
// kill's: a claims the slot when the object is deleted at 100 s and lets it
// go at 102 s (it had to handle the deletion, or sweep it, first); b claims
// it from 103 s on, alive to the end; k merely watched the slot, heard the
// deletion, and is killed at 110 s. Lost, as it is without k's hearing it
// (the control).
func TestAKillDoesNotExcuseADeletionTheClaimantLetGoToALiveReplica(t *testing.T) {
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
