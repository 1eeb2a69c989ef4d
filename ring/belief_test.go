package ring

import (
	"slices"
	"testing"
	"time"

	"rawwatch/openfinding"
)

// A member believes the lease duration written on another's Lease up to
// four times its own (leaseBelief; docs/sharding.md: "never more than four
// times it"). a's lease duration is 1.1 s; b's Lease says 8 s; b dies: a
// counts it out within 4 × 1.1 s of its last renewal (and a list).
func TestALeaseDurationIsBelievedUpToFourTimesTheObserversOwn(t *testing.T) {
	openfinding.Skip(t)
	const own, period = 1100 * time.Millisecond, 300 * time.Millisecond
	now := epoch
	a := handoffMember(t, versionedClient(), "a", own, period, func() time.Time { return now })
	b := "b"
	l := ringLease("b", &b, now, map[string]string{AnnotationSlots: "", AnnotationPending: ""})
	eight := int32(8)
	l.Spec.LeaseDurationSeconds = &eight
	live(a, now, l)
	died := now
	for now.Sub(died) < leaseBelief*own+period {
		now = now.Add(period)
		live(a, now, l)
	}
	if slices.Contains(a.Members(), "b") {
		t.Fatalf("a (lease duration %s) still counts b live %s after b's last renewal, b's Lease saying %d s: believed %s, more than %d × %s",
			own, now.Sub(died), eight, a.seen["r.b"].lease, leaseBelief, own)
	}
}
