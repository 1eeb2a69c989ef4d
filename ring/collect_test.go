package ring

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rawwatch/shard"
)

// The Lease of a member that died is deleted by the live ones, not before
// it has stood still for collectAfter of its lease durations, and within
// CollectWithin of its last renewal, though another writer labels it every
// second; the survivors then list only each other's.
func TestADeadMembersLeaseIsCollectedInTime(t *testing.T) {
	s := onServer(t)
	p, ms := s.joined("a", "b", "c")
	a, b, c := ms[0], ms[1], ms[2]
	last := b.renewed
	p.kill(b)
	leases := s.admin.CoordinationV1().Leases(s.ns)
	gone := func() bool {
		_, err := leases.Get(s.ctx, b.leaseName(), metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}
	p.each(time.Second, func() { // (gone, or a conflict with the collector's write: the next second tries again)
		_ = s.tryEdit(b.leaseName(), func(l *coordinationv1.Lease) { l.Labels["example.com/touched"] = "yes" })
	})
	for !gone() {
		if since := s.clock().Sub(last); since > CollectWithin(lease, renew) {
			t.Fatalf("b died %s ago: its Lease is still there (bound %s)", since, CollectWithin(lease, renew))
		}
		p.run(renew/2, "b dead, its Lease labelled every second")
	}
	took := s.clock().Sub(last)
	if took < collectAfter*lease {
		t.Fatalf("b's Lease was deleted %s after its last renewal: before it stood still for %d lease durations", took, collectAfter)
	}
	t.Logf("b's Lease deleted %s after its last renewal (bound %s)", took, CollectWithin(lease, renew))
	p.run(2*lease, "b's Lease deleted")
	if all := a.Claims().Working.Union(c.Claims().Working); all != shard.All() {
		t.Fatalf("after b's Lease was collected, a and c work %d slots, want all %d", all.Len(), shard.Slots)
	}
}
