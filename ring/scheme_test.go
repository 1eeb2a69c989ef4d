package ring

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rawwatch/shard"
)

// A Lease of another scheme (a rolling update that changes the hash, the
// slots or the assignment) is not a member, and while it lives nobody
// claims a free slot: a and c keep what they work, but not what b, dead,
// worked. Once it stops, they take every slot.
func TestALeaseOfAnotherSchemeSharesNoSlot(t *testing.T) {
	s := onServer(t)
	p, ms := s.joined("a", "b", "c")
	a, b, c := ms[0], ms[1], ms[2]
	leases := s.admin.CoordinationV1().Leases(s.ns)
	holder, secs := "z", int32(5)
	other := &metav1.ObjectMeta{Name: "r.z", Labels: map[string]string{Label: "r"},
		Annotations: map[string]string{AnnotationScheme: "other/512/ring", AnnotationSlots: "0-255"}}
	renewOther := func() {
		now := metav1.NewMicroTime(s.clock())
		l, err := leases.Get(s.ctx, other.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			l = &coordinationv1.Lease{ObjectMeta: *other.DeepCopy()}
			l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = &holder, &secs, &now
			_, err = leases.Create(s.ctx, l, metav1.CreateOptions{})
		} else if err == nil {
			l.Spec.RenewTime = &now
			_, err = leases.Update(s.ctx, l, metav1.UpdateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	renewOther()
	before := a.Claims().Working.Union(c.Claims().Working)
	p.kill(b)
	stop := false
	p.each(time.Second, func() {
		if !stop {
			renewOther()
		}
	})
	p.run(4*lease, "a Lease of another scheme renewed, b dead")
	if got := a.Claims().Working.Union(c.Claims().Working); got != before {
		t.Fatalf("while a Lease of another scheme lives, a and c work %d slots; want the %d they worked (none of b's taken, none withdrawn)", got.Len(), before.Len())
	}
	for _, m := range []*Member{a, c} {
		for _, id := range m.Members() {
			if id == "z" {
				t.Fatalf("%s counts the Lease of another scheme a member: %v", m.cfg.Identity, m.Members())
			}
		}
	}
	stop = true
	p.run(3*lease, "the Lease of another scheme no longer renewed")
	if got := a.Claims().Working.Union(c.Claims().Working); got != shard.All() {
		t.Fatalf("the Lease of another scheme dead, a and c work %d slots, want all %d", got.Len(), shard.Slots)
	}
}
