package ring

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"rawwatch/shard"
)

// A label is no renewal, and no member's claims: an operator's tool that
// labels a live member's Lease every renew period (a policy engine, a
// GitOps sync stamping its own label) must not keep the ring from
// working every slot.

// a (renew period half a second) and b (a second) divide the slots; from
// then on a labeller writes a label on b's Lease after each of a's
// rounds, so a reads a move of b's Lease between b's renewals. The ring
// must go on working every slot, each by one member.
func TestALabelWrittenEveryPeriodKeepsTheRingWorking(t *testing.T) {
	now := epoch
	client := versionedClient()
	clock := func() time.Time { return now }
	half := renew / 2
	a := handoffMember(t, client, "a", lease, half, clock)
	b := handoffMember(t, client, "b", lease, renew, clock)
	ctx := klog.NewContext(context.Background(), klog.Background())
	leases := client.CoordinationV1().Leases("ns")
	labelling, n := false, 0
	tick := func(i int) {
		a.round(ctx, klog.Background())
		if labelling {
			n++
			l, err := leases.Get(ctx, b.leaseName(), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			l.Labels["policy.example.com/checked"] = fmt.Sprint(n)
			if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if i%2 == 0 {
			b.round(ctx, klog.Background())
		}
		noSplit(t, fmt.Sprintf("%s in, labelling %v", now.Sub(epoch), labelling), a, b)
		now = now.Add(half)
	}
	i := 0
	for ; i < 60; i++ {
		tick(i)
	}
	divided(t, a, b)
	labelling = true
	start := now
	worked, ticks := 0, 0
	for ; now.Sub(start) < 60*time.Second; i++ {
		tick(i)
		if now.Sub(start) < 20*time.Second {
			continue
		}
		ticks++
		if a.Claims().Working.Union(b.Claims().Working) == shard.All() {
			worked++
		}
	}
	if worked < ticks {
		t.Fatalf("b's Lease labelled after each of a's rounds (every %s; b renews every %s): from 20 s to 60 s in, every slot was worked in %d of %d ticks; now a works %d slots, b %d; a sees b as %+v",
			half, renew, worked, ticks, a.Claims().Working.Len(), b.Claims().Working.Len(), a.seen["r.b"].doubt)
	}
}

// a and b (renew period a second) divide the slots; a labeller writes a
// label on b's Lease every half second; then c (renew period half a
// second) joins. The ring must hand c its share, every slot worked: each
// move c reads between b's renewals puts b in doubt, claiming every slot,
// none confirmed, on every other list of c's; c's claims, withdrawn on
// those, would never confirm.
func TestAMemberJoinsBesideALabelledLease(t *testing.T) {
	now := epoch
	client := versionedClient()
	clock := func() time.Time { return now }
	half := renew / 2
	a := handoffMember(t, client, "a", lease, renew, clock)
	b := handoffMember(t, client, "b", lease, renew, clock)
	c := handoffMember(t, client, "c", lease, half, clock)
	ctx := klog.NewContext(context.Background(), klog.Background())
	leases := client.CoordinationV1().Leases("ns")
	n, joined := 0, false
	tick := func(i int) {
		if joined {
			c.round(ctx, klog.Background())
		}
		n++
		if l, err := leases.Get(ctx, b.leaseName(), metav1.GetOptions{}); err == nil {
			l.Labels["policy.example.com/checked"] = fmt.Sprint(n)
			if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if i%2 == 0 {
			a.round(ctx, klog.Background())
			b.round(ctx, klog.Background())
		}
		noSplit(t, fmt.Sprintf("%s in", now.Sub(epoch)), a, b, c)
		now = now.Add(half)
	}
	i := 0
	for ; i < 60; i++ {
		tick(i)
	}
	divided(t, a, b)
	joined = true
	start := now
	for ; now.Sub(start) < 90*time.Second; i++ {
		tick(i)
	}
	wa, wb, wc := a.Claims().Working, b.Claims().Working, c.Claims().Working
	if wc.Empty() || wa.Union(wb).Union(wc) != shard.All() {
		t.Fatalf("c joined beside b's Lease labelled every %s: 90 s later a works %d slots, b %d, c %d (of %d); c sees b's Lease in doubt: %v",
			half, wa.Len(), wb.Len(), wc.Len(), shard.Slots, c.seen["r.b"].doubt)
	}
}
