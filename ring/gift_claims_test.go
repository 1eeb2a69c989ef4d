package ring

import (
	"context"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rawwatch/openfinding"
	"rawwatch/shard"
)

// Claims of docs/sharding.md's custody rules (a slot given by name) played
// against saved copies, failing renewals and hands that write labels.

// a drains and gives slot s to c; a copy of a's Lease is saved while it
// names that gift (a backup, a GitOps export), and a leaves. Later n joins,
// s is n's share, and c hands s to n, which works it. Then the copy is
// applied under another name (r.a-copy, as the chaos run's r0-copy), and
// n's renewals fail for a few renew periods (an API server hiccup) while a
// label is written on n's Lease: n's Lease is in doubt, and n works s
// until its fence. The copy's gift is no giver's current word: c must not
// claim s on it while n may still admit reconciles of s.
func TestAGiftOnACopyUnderAnotherNameSplitsNoBrain(t *testing.T) {
	openfinding.Skip(t)
	r := newDrainRing(t, "n", "a", "c") // n steps first: c lists after n's last renewal
	r.dead["n"] = true                  // not started yet
	r.settle(30, "a and c join", "a", "c")
	a, n := r.ms["a"], r.ms["n"]
	s := -1
	for i := range shard.Slots {
		if a.Claims().Working.Has(i) && owner(shard.Assign([]string{"c", "n"}), i) == "n" {
			s = i
			break
		}
	}
	if s < 0 {
		t.Fatal("no slot of a's goes to n once a left")
	}
	ctx := context.Background()
	leases := a.cfg.Client.CoordinationV1().Leases("ns")
	a.Drain()
	var saved *coordinationv1.Lease // a's Lease while it names s given to c
	for i := 1; saved == nil; i++ {
		r.round("a drains")
		if a.Claims().Given.Has(s) {
			l, err := leases.Get(ctx, "r.a", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if l.Annotations[AnnotationGiven] == "" {
				continue // named from its next renewal
			}
			saved = l
			t.Logf("a's Lease saved naming %s", l.Annotations[AnnotationGiven])
		}
		if i == drainBound {
			t.Fatalf("a never named slot %d given: %s", s, r.claims())
		}
	}
	r.drained(drainBound, "a drains", "a")
	r.leave("a")
	delete(r.dead, "n")
	for i := 1; !n.Claims().Working.Has(s); i++ {
		r.round("n joins")
		if i == 30 {
			t.Fatalf("n does not work slot %d 30 renew periods after it joined: %s", s, r.claims())
		}
	}
	for range 3 {
		r.round("n works slot s")
	}
	// The copy applied; a label on n's Lease after n's last renewal that
	// goes through; n's renewals fail from then on (n fences 9 s later).
	saved.ObjectMeta = metav1.ObjectMeta{Name: "r.a-copy", Namespace: "ns", Labels: saved.Labels, Annotations: saved.Annotations}
	if _, err := leases.Create(ctx, saved, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	l, err := leases.Get(ctx, "r.n", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.Labels["touched"] = "1"
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.failing["n"] = true
	for i := range 6 { // within n's fence: n still works s
		r.round("a copy of a's Lease names s given to c; n's Lease in doubt, n renewing in vain")
		if !n.Claims().Working.Has(s) {
			t.Logf("n no longer works slot %d after %d renew periods: %+v", s, i+1, n.Claims())
			break
		}
	}
}
