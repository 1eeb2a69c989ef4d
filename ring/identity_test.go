package ring

import (
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"rawwatch/shard"
)

// A Lease is the member its name says, whatever holder it names: b's
// Lease, its holderIdentity set to "a" by hand, is still b's. b writes
// its holder back; c never takes it for a second Lease of a and so never
// counts the live a out.
func TestALeaseIsTheMemberItsNameSays(t *testing.T) {
	s := onServer(t)
	p, ms := s.joined("a", "b", "c")
	a, b, c := ms[0], ms[1], ms[2]
	s.edit(b.leaseName(), func(l *coordinationv1.Lease) { holder := "a"; l.Spec.HolderIdentity = &holder })
	p.run(4*lease, "b's Lease names a as its holder")
	all := a.Claims().Working.Len() + b.Claims().Working.Len() + c.Claims().Working.Len()
	if b.Claims().Working.Empty() || all != shard.Slots || !slices.Equal(c.Members(), []string{"a", "b", "c"}) {
		t.Fatalf("%s after b's Lease was given holder a by hand: a, b and c work %d, %d and %d slots, c sees %v; want the three sharing all %d",
			4*lease, a.Claims().Working.Len(), b.Claims().Working.Len(), c.Claims().Working.Len(), c.Members(), shard.Slots)
	}
}

// A stale copy of a live member's Lease, under another name, hides
// nobody: b must not count a out when the copy stops moving.
func TestACopyOfALeaseHidesNoMember(t *testing.T) {
	s := onServer(t)
	p, ms := s.joined("a", "b")
	a, b := ms[0], ms[1]
	l, err := s.admin.CoordinationV1().Leases(s.ns).Get(s.ctx, a.leaseName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.ObjectMeta = metav1.ObjectMeta{Name: "r-zz-copy", Labels: l.Labels, Annotations: l.Annotations}
	if _, err := s.admin.CoordinationV1().Leases(s.ns).Create(s.ctx, l, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p.run(4*lease, "a copy of a's Lease, named r-zz-copy, stands still")
	divided(t, a, b)
}

// A Lease whose holderIdentity was cleared by hand is still its owner's:
// the owner's next renewal writes it back, and it works on.
func TestAHolderClearedByHandIsWrittenBack(t *testing.T) {
	s := onServer(t)
	p, ms := s.joined("a", "b")
	a, b := ms[0], ms[1]
	s.edit(a.leaseName(), func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = nil })
	p.run(4*lease, "a's holderIdentity cleared by hand")
	l, err := s.admin.CoordinationV1().Leases(s.ns).Get(s.ctx, a.leaseName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := l.Spec.HolderIdentity; h == nil || *h != "a" || a.Claims().Working.Empty() {
		t.Fatalf("%s after a's holderIdentity was cleared by hand: a works %d slots, its Lease's holder is %v; want a working, holder a",
			4*lease, a.Claims().Working.Len(), h)
	}
	divided(t, a, b)
}

// A ring's name is a DNS label (no dot) and a member's Lease is named
// <ring>.<identity>, so that no two rings' members share a Lease (ring r
// with identity x-y, and ring r-x with identity y, once did).
func TestNoTwoRingsShareALeaseName(t *testing.T) {
	cfg := func(ring, id string) Config {
		return Config{Client: fake.NewSimpleClientset(), Namespace: "ns", Ring: ring, Identity: id}
	}
	names := map[string]string{}
	for _, c := range [][2]string{{"r", "x-y"}, {"r-x", "y"}, {"r", "x.y"}, {"rawwatch", "pod-1a2b3c4d"}} {
		m, err := New(cfg(c[0], c[1]))
		if err != nil {
			t.Fatalf("ring %q, identity %q: %v", c[0], c[1], err)
		}
		if other, ok := names[m.leaseName()]; ok {
			t.Fatalf("ring %q, identity %q: Lease %s, as %s's", c[0], c[1], m.leaseName(), other)
		}
		names[m.leaseName()] = c[0] + "/" + c[1]
		if got := identityOf(c[0], m.leaseName()); got != c[1] {
			t.Errorf("Lease %s of ring %s read as identity %q, want %q", m.leaseName(), c[0], got, c[1])
		}
	}
	for _, c := range [][2]string{{"r.x", "y"}, {"R", "y"}, {"r", "Y"}, {"r", "y_z"}} {
		if _, err := New(cfg(c[0], c[1])); err == nil {
			t.Errorf("ring %q, identity %q: accepted, want an error", c[0], c[1])
		}
	}
}

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
	acquired := metav1.NewMicroTime(s.clock()) // every version writes one; without it no record renews
	other := &metav1.ObjectMeta{Name: "r.z", Labels: map[string]string{Label: "r"},
		Annotations: map[string]string{AnnotationScheme: "other/512/ring", AnnotationSlots: "0-255"}}
	renewOther := func() {
		now := metav1.NewMicroTime(s.clock())
		l, err := leases.Get(s.ctx, other.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			l = &coordinationv1.Lease{ObjectMeta: *other.DeepCopy()}
			l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.AcquireTime, l.Spec.RenewTime = &holder, &secs, &acquired, &now
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
