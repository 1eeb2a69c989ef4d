package ring

import (
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"rawwatch/shard"
)

// A gift (AnnotationGiven) read from, or made to, a Lease whose
// holderIdentity was cleared by hand: the Lease is still the member its
// name says, whose own writes its annotations are, and whose next renewal
// writes its holder back. Custody must hold across that moment.

// ringLease is the Lease of member id of ring "r" as its holder wrote it
// at stamp (holder nil: cleared by hand since), with annotations ann.
func ringLease(id string, holder *string, stamp time.Time, ann map[string]string) coordinationv1.Lease {
	secs := int32(written(lease) / time.Second)
	t := metav1.NewMicroTime(stamp)
	a := map[string]string{AnnotationScheme: shard.Scheme}
	for k, v := range ann {
		a[k] = v
	}
	return coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "r." + id, Namespace: "ns", Labels: map[string]string{Label: "r"}, Annotations: a, ResourceVersion: "1"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: holder, LeaseDurationSeconds: &secs, AcquireTime: &t, RenewTime: &t},
	}
}

// live makes m a live member at now that has listed twice, as if its
// renewals and lists had succeeded; then it lists items and steps.
func live(m *Member, now time.Time, items ...coordinationv1.Lease) {
	m.setRenewed(m.Now())
	m.looks = 2
	own := ringLease(m.cfg.Identity, &m.cfg.Identity, now, nil)
	m.listed(klog.Background(), append(items, own), now)
	m.lookOK = true
	m.update(klog.Background())
}

// The giver a names slot 5 given to b; b's Lease, its holder cleared by
// hand, does not claim it yet: a must not take the gift for accepted (b
// is live, writes its holder back at its next renewal, and claims it).
func TestAGiftToALeaseWhoseHolderWasClearedStands(t *testing.T) {
	now := epoch
	a := handoffMember(t, versionedClient(), "a", lease, renew, func() time.Time { return now })
	a.claims.Given = shard.SlotsOf(5)
	a.givenTo[5], a.givenAt[5] = "b", now
	b := "b"
	live(a, now, ringLease("b", &b, now, map[string]string{AnnotationSlots: "", AnnotationPending: ""}))
	now = now.Add(renew)
	live(a, now, ringLease("b", nil, now.Add(-renew/2), map[string]string{AnnotationSlots: "", AnnotationPending: ""}))
	if !a.Claims().Given.Has(5) {
		t.Fatalf("b's holder cleared by hand, b not claiming slot 5 yet: a dropped the gift of slot 5 to b (%+v); b may never take it, its deletions kept for it lost", a.Claims())
	}
}

// The receiver b was given a slot by a, one that goes to c by the
// membership; a's Lease, its holder cleared by hand, still names the gift:
// b keeps it in custody, and so watches it.
func TestAGiftFromALeaseWhoseHolderWasClearedIsKept(t *testing.T) {
	now := epoch
	b := handoffMember(t, versionedClient(), "b", lease, renew, func() time.Time { return now })
	slot := shard.Assign([]string{"b", "c"})["c"][0]
	gift := map[string]string{AnnotationSlots: "", AnnotationPending: "", AnnotationGiven: fmt.Sprint("b=", slot)}
	claimsNothing := map[string]string{AnnotationSlots: "", AnnotationPending: ""}
	a, c := "a", "c"
	live(b, now, ringLease("a", &a, now, gift), ringLease("c", &c, now, claimsNothing))
	if !b.Claims().Custody.Has(slot) {
		t.Fatalf("a gives b slot %d: b's custody %v, want it", slot, b.Claims().Custody)
	}
	now = now.Add(renew)
	live(b, now, ringLease("a", nil, now.Add(-renew/2), gift), ringLease("c", &c, now, claimsNothing))
	if cl := b.Claims(); !cl.Watched().Has(slot) {
		t.Fatalf("a's holder cleared by hand, its Lease still giving b slot %d (c's by the membership): b no longer watches it (%+v); the deletions it kept for it are dropped", slot, cl)
	}
}
