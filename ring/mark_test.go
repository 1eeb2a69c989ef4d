package ring

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rawwatch/shard"
)

// A leaving mark written by anyone but the holder (an operator who
// annotates a live member's Lease as the collector would, with its
// renewTime) must not make two members work one slot: the holder does
// not read its own mark, and works on until its fence. b is cut off from
// the server just after the mark (its renewals fail): it fences itself
// 3.5 s after its last renewal, and a must not Work b's slots before.
func TestALeavingMarkWrittenOnALiveMemberSplitsNoBrain(t *testing.T) {
	now := epoch
	r := newDividedRing(t, &now)
	client, a, b, ctx := r.client, r.a, r.b, r.ctx
	step := func(when string) { r.period(when, a, b) }
	leases := client.CoordinationV1().Leases("ns")
	l, err := leases.Get(ctx, b.leaseName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.Annotations[AnnotationLeaving] = markCollected(l.Spec.RenewTime.Time) // as the collector writes it
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.cut = "b"
	start := now
	for range 10 {
		step(fmt.Sprintf("%s after an operator marked b's live Lease leaving, b cut off", now.Sub(start)))
	}
}

// Saved copies of a past process's Lease (b's identity, an earlier
// acquisition this observer never read): four from its life, one of its
// clean leave, re-applied in that order over the live b's Lease (a backup
// restored, a sync stepping through revisions: the later ones renewals of
// the acquisition the first one showed). Both are states the Lease
// really had: neither may count b out while it may still work. b is cut
// off just after its last renewal (it never reads the copies) and works
// on until its fence, 3.5 s after that renewal.
func TestCopiesOfAPastProcessesLeaveSplitNoBrain(t *testing.T) {
	now := epoch
	r := newDividedRing(t, &now)
	client, a, b, ctx := r.client, r.a, r.b, r.ctx
	step := func(when string) { r.period(when, a, b) }
	leases := client.CoordinationV1().Leases("ns")
	past := epoch.Add(-2 * time.Hour) // the earlier process acquired b's Lease then
	apply := func(renewed time.Time, leaving bool) {
		l, err := leases.Get(ctx, b.leaseName(), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		acq, r := metav1.NewMicroTime(past), metav1.NewMicroTime(renewed)
		l.Spec.AcquireTime, l.Spec.RenewTime = &acq, &r
		l.Annotations[AnnotationSlots], l.Annotations[AnnotationPending], l.Annotations[AnnotationGiven] = "", "", ""
		delete(l.Annotations, AnnotationLeaving)
		if leaving {
			l.Annotations[AnnotationLeaving] = mark(renewed)
		}
		if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	r.cut = "b"
	start := now
	for k := range 4 {
		apply(past.Add(time.Duration(k+1)*time.Minute), false) // copies from the earlier process's life
		step(fmt.Sprintf("%s after b cut off, a copy of an earlier process's Lease applied", now.Sub(start)))
	}
	apply(past.Add(time.Hour), true) // then a copy of its clean leave
	for range 5 {
		step(fmt.Sprintf("%s after b cut off, copies of an earlier process's life and leave applied in turn", now.Sub(start)))
	}
}

// A joiner reads, at first sight, a copy of an old clean leave re-applied
// over a live member's Lease: b once left a ring of b and c, giving its
// share to c; a sync puts that saved Lease back over the live b (cut off
// just after its last renewal: it never reads the copy, and works on
// until its fence, 3.5 s after that renewal), and c, a StatefulSet's
// identity scaled down and up, joins then. A mark counts at first sight;
// the gift it names must not make c Work a slot b may still admit.
func TestAJoinerReadingACopyOfAnOldLeaveSplitsNoBrain(t *testing.T) {
	now := epoch
	r := newDividedRing(t, &now)
	client, a, b, ctx := r.client, r.a, r.b, r.ctx
	ms := []*Member{a, b}
	step := func(when string) { r.period(when, ms...) }
	var share shard.SlotSet // b's share in a ring of b and c, which it gave c when it left
	for _, s := range shard.Assign([]string{"b", "c"})["b"] {
		share = share.With(s)
	}
	leases := client.CoordinationV1().Leases("ns")
	l, err := leases.Get(ctx, b.leaseName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	left := metav1.NewMicroTime(epoch.Add(-time.Hour))
	acq := metav1.NewMicroTime(epoch.Add(-2 * time.Hour))
	l.Spec.RenewTime, l.Spec.AcquireTime = &left, &acq
	l.Annotations[AnnotationLeaving] = mark(left.Time)
	l.Annotations[AnnotationSlots], l.Annotations[AnnotationPending] = "", ""
	l.Annotations[AnnotationGiven] = "c=" + share.String()
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.cut = "b"
	ms = append(ms, handoffMember(t, client, "c", lease, renew, func() time.Time { return now }))
	start := now
	for range 6 {
		step(fmt.Sprintf("%s after b cut off, a copy of its old leave (gave %d slots to c) applied, c joined", now.Sub(start), share.Len()))
	}
}
