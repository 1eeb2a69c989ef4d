package ring

import (
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rawwatch/shard"
)

// A renewal is judged within its acquisition (ledger): a record of an
// acquisition never read is one. What an observer keeps of the
// acquisitions it read is bounded by age (rememberFor), not by count, and a write by
// anyone else is no renewal: neither a cycle of saved copies of states
// the Lease really had, nor a hand's edit, may keep a dead member live.

// b's Lease was saved once under each of 17 past processes of b (17
// restarts, each its own acquisition); b's last process dies, and a sync
// re-applies the 17 saved copies in turn, one every renew period, for
// ever. Every copy is a state the Lease really had: a must count b out
// within about two lease durations of its last renewal read.
func TestCopiesOfSeventeenPastAcquisitionsCycledRenewNothing(t *testing.T) {
	now := epoch
	a := copiesObserver(t, &now)
	bRenews(a, &now, 3)
	died := now
	var copies []coordinationv1.Lease
	for k := range 17 { // process k acquired b's Lease hours before, renewed it a minute later
		acquired := epoch.Add(-time.Duration(17-k) * time.Hour)
		l := leaseOfB(acquired.Add(time.Minute))
		at := metav1.NewMicroTime(acquired)
		l.Spec.AcquireTime = &at
		copies = append(copies, l)
	}
	var liveAt []time.Duration
	for i := 0; now.Sub(died) < 20*lease; i++ {
		now = now.Add(renew)
		live(a, now, copies[i%len(copies)])
		if now.Sub(died) > 2*written(lease)+renew && slices.Contains(a.Members(), "b") {
			liveAt = append(liveAt, now.Sub(died))
		}
	}
	if len(liveAt) > 0 {
		t.Fatalf("b (lease %s) dead: its %d saved copies, one per past acquisition, cycled every %s, keep it live in %d of a's lists past two lease durations, the last %s after it died (claims every slot: %v)",
			written(lease), len(copies), renew, len(liveAt), liveAt[len(liveAt)-1], a.seen["r.b"].claims == shard.All())
	}
}

// b dies; a counts it out; long after, an operator clears acquireTime on
// b's Lease by hand (kubectl edit, or a manifest without it applied).
// A write by anyone else is no renewal: b must stay out.
func TestAnAcquireTimeClearedByHandRenewsNothing(t *testing.T) {
	now := epoch
	a := copiesObserver(t, &now)
	stamps := bRenews(a, &now, 3)
	died := now
	last := leaseOfB(stamps[len(stamps)-1])
	for now.Sub(died) < 10*lease {
		now = now.Add(renew)
		live(a, now, last)
	}
	if slices.Contains(a.Members(), "b") {
		t.Fatalf("b dead for %s still counted live (%v)", now.Sub(died), a.Members())
	}
	cleared := leaseOfB(stamps[len(stamps)-1])
	cleared.Spec.AcquireTime = nil
	cleared.ResourceVersion = "2"
	now = now.Add(renew)
	live(a, now, cleared)
	if slices.Contains(a.Members(), "b") {
		o := a.seen["r.b"]
		t.Fatalf("b dead for %s and counted out; its acquireTime cleared by hand, no renewTime changed: a counts b live again (%v), claiming every slot %v, none confirmed %v",
			now.Sub(died), a.Members(), o.claims == shard.All(), o.pending == shard.All())
	}
}
