package ring

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"
)

// A Lease set back to the very state an observer last read hides the
// renewal it overwrote: the observer sees no move at all, and counts its
// owner from the renewal it read, while the owner's fence runs from the
// renewal overwritten. No copy may make two members work one slot.
//
// a and b divide the slots. a renews (b reads it at once; someone saves
// that Lease), a pauses 3.4 s (within its fence, 3.5 s), renews again, and the
// saved copy is re-applied over that renewal before b lists; then a is cut
// off from the server (its renewals fail, so it never reads the copy).
// a's gate stays open until 3.5 s after the renewal b never read; b counts
// a out 5 s after the one it read, 1.9 s earlier, and must not Work a's
// slots while a may still admit them.
func TestACopyOfTheStateLastReadSplitsNoBrain(t *testing.T) {
	now := epoch
	client, a, b := pair(t, &now, "a", "b")
	ctx := klog.NewContext(context.Background(), klog.Background())
	cut := false // a's requests fail while set
	acting := ""
	client.PrependReactor("*", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if cut && acting == "a" {
			return true, nil, apierrors.NewInternalError(errors.New("cut off"))
		}
		return false, nil, nil
	})
	roundOf := func(m *Member) {
		acting = m.cfg.Identity
		m.round(ctx, klog.Background())
		acting = ""
	}
	step := func(when string, ms ...*Member) { // each rounds, 10 ms apart
		for _, m := range ms {
			roundOf(m)
			noSplit(t, when, a, b)
			now = now.Add(10 * time.Millisecond)
		}
	}
	for range 20 {
		step("a and b join", a, b)
		now = now.Add(renew - 20*time.Millisecond)
	}
	divided(t, a, b)
	leases := client.CoordinationV1().Leases("ns")
	step("a renews, b reads it", a, b)
	read := now
	saved, err := leases.Get(ctx, a.leaseName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 { // a paused; b lists on
		now = now.Add(renew - 10*time.Millisecond)
		step("a paused", b)
	}
	now = now.Add(370 * time.Millisecond) // a resumes 3.4 s after its renewal b read
	step("a resumes and renews", a)
	l, err := leases.Get(ctx, a.leaseName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.Spec, l.Annotations = *saved.Spec.DeepCopy(), maps.Clone(saved.Annotations)
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	cut = true
	for range 6 {
		now = now.Add(renew - 20*time.Millisecond)
		step(fmt.Sprintf("%s after the renewal of a that b read, a's Lease set back to it, a cut off", now.Sub(read)), b, a)
	}
}

// A saved copy of a clean leave (a replica of a stable identity that left
// once, its marked Lease saved by a backup or a sync) re-applied over its
// live Lease bears its holder's leaving mark, bound to the copy's own
// renewTime: the others count the member out at once, while it works on
// until it reads the copy. No copy may make two members work one slot.
//
// a and b divide the slots; b's Lease is set back to a copy of the mark b
// wrote when it left before; b's requests fail from then on (it never
// reads the copy, and fences itself 3.5 s after its last renewal).
func TestACopyOfALeavingMarkSplitsNoBrain(t *testing.T) {
	now := epoch
	r := newDividedRing(t, &now)
	client, a, b, ctx := r.client, r.a, r.b, r.ctx
	step := func(when string) { r.period(when, a, b) }
	left := metav1.NewMicroTime(epoch.Add(-time.Hour)) // b's clean leave, an hour before
	leases := client.CoordinationV1().Leases("ns")
	l, err := leases.Get(ctx, b.leaseName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.Spec.RenewTime, l.Spec.AcquireTime = &left, &left
	l.Annotations[AnnotationLeaving] = mark(left.Time)
	l.Annotations[AnnotationSlots], l.Annotations[AnnotationPending], l.Annotations[AnnotationGiven] = "", "", ""
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.cut = "b"
	start := now
	for range 5 {
		step(fmt.Sprintf("%s after b's Lease was set back to a copy of its old leaving mark, b cut off", now.Sub(start)))
	}
}
