package ring

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rawwatch/openfinding"
	"rawwatch/shard"
)

// Claims of docs/sharding.md's "Membership" played against saved copies,
// hand edits and members' pauses, each as a real cluster produces them.

// A joiner reads, at first sight, a copy of an old gift re-applied over a
// live member's Lease: when c once joined a ring of a and b, b gave c part
// of its share (the copy saved while b named the gift), then c left; a
// sync puts that saved Lease back over the live b, which works its whole
// share again (its requests fail from just after its last renewal: it
// never reads the copy, and works on until its fence, 3.5 s after that
// renewal), and c, a StatefulSet's identity, joins then. The copy is
// unmarked: read at first sight it counts as b's word, and its gift must
// not make c Work a slot b may still admit.
func TestAJoinerReadingACopyOfAnOldGiftSplitsNoBrain(t *testing.T) {
	openfinding.Skip(t)
	now := epoch
	r := newDividedRing(t, &now)
	client, a, b, ctx := r.client, r.a, r.b, r.ctx
	ms := []*Member{a, b}
	step := func(when string) { r.period(when, ms...) }
	// When c joined a ring of a and b, b gave c the slots of its share
	// that became c's, and kept the rest; that state of b's Lease was
	// saved. b now works its share of a ring of a and b again.
	slots := func(ids ...string) (s shard.SlotSet) {
		for _, i := range shard.Assign(ids)[ids[len(ids)-1]] {
			s = s.With(i)
		}
		return s
	}
	share := slots("a", "b").And(slots("a", "b", "c"))
	kept := slots("a", "c", "b")
	leases := client.CoordinationV1().Leases("ns")
	l, err := leases.Get(ctx, b.leaseName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	renewed := metav1.NewMicroTime(epoch.Add(-time.Hour))
	acq := metav1.NewMicroTime(epoch.Add(-2 * time.Hour))
	l.Spec.RenewTime, l.Spec.AcquireTime = &renewed, &acq
	l.Annotations[AnnotationSlots] = kept.String()
	l.Annotations[AnnotationPending] = ""
	l.Annotations[AnnotationGiven] = "c=" + share.String()
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.cut = "b"
	ms = append(ms, handoffMember(t, client, "c", lease, renew, func() time.Time { return now }))
	start := now
	for range 6 {
		step(fmt.Sprintf("%s after b cut off, a copy of its old gift (%d slots to c) applied, c joined", now.Sub(start), share.Len()))
	}
}
