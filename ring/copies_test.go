package ring

import (
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Saved copies of a dead member's Lease re-applied for ever (a sync
// flapping between revisions) keep it live at most a lease duration
// longer, however many distinct copies there are: an observer keeps the
// highest renewTime it read in each acquisition of the Lease, and a copy
// at or below it is no renewal (ledger.fresh).

// b renewed 17 times, each read by a; then b dies, and its two oldest
// copies are re-applied in turn every renew period. a must count b out.
func TestTwoOldCopiesReappliedInTurnRenewNothing(t *testing.T) {
	now := epoch
	a := copiesObserver(t, &now)
	stamps := bRenews(a, &now, 17)
	died := now
	for i := 0; now.Sub(died) < 4*lease; i++ { // the two oldest copies, in turn
		now = now.Add(renew)
		live(a, now, leaseOfB(stamps[i%2]))
	}
	if slices.Contains(a.Members(), "b") {
		t.Fatalf("b dead for %s, its two oldest saved copies (of %d renewals read) re-applied in turn every %s: a still counts b live (%v); ledger %v",
			now.Sub(died), len(stamps), renew, a.Members(), a.seen["r.b"].ledger)
	}
}

// b renewed 17 times, each read by a; then b dies, and the 17 saved
// copies are re-applied in order, one every renew period, for ever. Once
// b's lease and one more have run out, a must never count b live again.
func TestSeventeenCopiesCycledRenewNothing(t *testing.T) {
	now := epoch
	a := copiesObserver(t, &now)
	stamps := bRenews(a, &now, 17)
	died := now
	for i := 0; now.Sub(died) < 20*lease; i++ {
		now = now.Add(renew)
		live(a, now, leaseOfB(stamps[i%len(stamps)]))
		if now.Sub(died) > 2*written(lease)+renew && slices.Contains(a.Members(), "b") {
			t.Fatalf("b dead for %s, its %d saved copies re-applied in order every %s (%d so far): a counts b live again (%v)",
				now.Sub(died), len(stamps), renew, i+1, a.Members())
		}
	}
}

// An observer that never read a dead member's renewals (it restarted, or
// joined since) reads its Lease first at its newest copy; then the sync
// re-applies the 16 copies it saved, oldest first, every renew period.
// Each is older than the first renewTime the observer kept: no renewal.
// The observer must count b out within two lease durations of first
// reading it (first sight counts as a renewal, and a copy keeps it live
// at most one lease duration longer).
func TestCopiesOlderThanTheFirstSightRenewNothing(t *testing.T) {
	now := epoch
	var stamps []time.Time
	for range 16 { // b's renewals, saved by the sync
		now = now.Add(renew)
		stamps = append(stamps, now)
	}
	now = now.Add(lease) // b is dead; a (re)starts
	a := copiesObserver(t, &now)
	first := now
	live(a, now, leaseOfB(stamps[len(stamps)-1]))
	for i := 0; now.Sub(first) < 4*lease; i++ {
		now = now.Add(renew)
		live(a, now, leaseOfB(stamps[i%len(stamps)]))
		if now.Sub(first) > 2*lease && slices.Contains(a.Members(), "b") {
			t.Fatalf("b dead; a read its Lease first %s ago, then copies older than that one re-applied every %s (%d so far): a still counts b live (%v)",
				now.Sub(first), renew, i+1, a.Members())
		}
	}
}

// A dead member's Lease, collected, then re-created from a saved copy (a
// GitOps sync puts back what it finds missing), is the same Lease with a
// renewTime the observer has seen: no renewal. (Else the dead member comes
// back for a lease duration after every collection, for ever, its share
// of the slots handed to it and never worked meanwhile.)
func TestACollectedLeaseRecreatedFromACopyRenewsNothing(t *testing.T) {
	now := epoch
	a := copiesObserver(t, &now)
	now = now.Add(renew)
	died := now
	saved := leaseOfB(died) // b's last renewal, saved by the sync
	live(a, now, saved)
	for now.Sub(died) < collectAfter*lease { // b dead: its Lease stands still
		now = now.Add(renew)
		live(a, now, saved)
	}
	if slices.Contains(a.Members(), "b") {
		t.Fatalf("b dead for %s: a still counts it live (%v)", now.Sub(died), a.Members())
	}
	marked := leaseOfB(died)
	marked.Annotations[AnnotationLeaving] = markCollected(died)
	now = now.Add(renew)
	live(a, now, marked) // the collector's mark
	now = now.Add(renew)
	live(a, now) // deleted
	now = now.Add(renew)
	live(a, now, saved) // re-created from the saved copy
	if slices.Contains(a.Members(), "b") {
		t.Fatalf("b dead for %s, its Lease collected, then re-created from a copy of its last renewal: a counts b live again (%v)",
			now.Sub(died), a.Members())
	}
}

// A saved copy re-applied that also carries another leaseDurationSeconds
// (saved before a rolling update shortened the lease duration, or edited)
// is no write of the holder's: its duration counts from the holder's next
// renewal only, and a dead member stays live at most one of its own lease
// durations longer for it.
func TestACopysLeaseDurationCountsForNothing(t *testing.T) {
	now := epoch
	a := copiesObserver(t, &now)
	now = now.Add(renew)
	old := leaseOfB(now) // saved, then edited: 4 × a's lease duration
	long := int32(4 * written(lease) / time.Second)
	old.Spec.LeaseDurationSeconds = &long
	now = now.Add(renew)
	live(a, now, leaseOfB(now))
	died := now
	now = now.Add(renew)
	live(a, now, old) // the copy, once, over b's last renewal
	for now.Sub(died) < 2*written(lease)+renew {
		now = now.Add(renew)
		live(a, now, old)
	}
	if slices.Contains(a.Members(), "b") {
		t.Fatalf("b (lease duration %s) dead for %s; a copy of its Lease saying %d s re-applied once: a still counts b live (%v)",
			written(lease), now.Sub(died), long, a.Members())
	}
}

// copiesObserver is member a, on the clock *now.
func copiesObserver(t *testing.T, now *time.Time) *Member {
	return handoffMember(t, versionedClient(), "a", lease, renew, func() time.Time { return *now })
}

// leaseOfB is member b's Lease renewed at renewTime, claiming no slots:
// one process of b's, which acquired it at epoch.
func leaseOfB(renewTime time.Time) coordinationv1.Lease {
	b := "b"
	l := ringLease("b", &b, renewTime, map[string]string{AnnotationSlots: "", AnnotationPending: ""})
	acquired := metav1.NewMicroTime(epoch)
	l.Spec.AcquireTime = &acquired
	return l
}

// bRenews has b renew n times, a renew period apart from *now, each
// renewal read by a; it returns the renewTimes.
func bRenews(a *Member, now *time.Time, n int) []time.Time {
	var stamps []time.Time
	for range n {
		*now = now.Add(renew)
		stamps = append(stamps, *now)
		live(a, *now, leaseOfB(*now))
	}
	return stamps
}
