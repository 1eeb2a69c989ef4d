package ring

import (
	"slices"
	"testing"
	"time"

	"rawwatch/internal/openfinding"
)

// Saved copies of a dead member's Lease re-applied for ever (a sync
// flapping between revisions) keep it live at most a lease duration
// longer, however many distinct copies there are: an observer keeps the
// last keptRenewTimes renewTimes it saw on the Lease, and a copy older
// than all of them is no renewal.

// b renewed 17 times, each read by a; then b dies, and its two oldest
// copies are re-applied in turn every renew period. a must count b out.
func TestCopiesOlderThanTheRenewTimesKeptRenewNothing(t *testing.T) {
	openfinding.Skip(t)
	now := epoch
	a := handoffMember(t, versionedClient(), "a", lease, renew, func() time.Time { return now })
	b := "b"
	claimsNothing := map[string]string{AnnotationSlots: "", AnnotationPending: ""}
	var stamps []time.Time
	for range keptRenewTimes + 1 { // b lives: a fresh renewTime each list
		now = now.Add(renew)
		stamps = append(stamps, now)
		live(a, now, ringLease("b", &b, now, claimsNothing))
	}
	died := now
	for i := 0; now.Sub(died) < 4*lease; i++ { // the two oldest copies, in turn
		now = now.Add(renew)
		live(a, now, ringLease("b", &b, stamps[i%2], claimsNothing))
	}
	if slices.Contains(a.Members(), "b") {
		t.Fatalf("b dead for %s, its two oldest saved copies (of %d renewals read) re-applied in turn every %s: a still counts b live (%v); kept renewTimes %v",
			now.Sub(died), len(stamps), renew, a.Members(), a.seen["r.b"].renewTimes)
	}
}
