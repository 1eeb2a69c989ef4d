package ring

import (
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	testclock "k8s.io/utils/clock/testing"

	"rawwatch/internal/testkit"
	"rawwatch/shard"
)

// The leaving mark counts only as its holder writes it, with its last
// renewal: one written by anyone else (an operator who read the annotation
// in the docs and wants a replica drained) counts nobody out. a's next
// renewal fails once; b must not take a's slots meanwhile.
func TestALeavingMarkWrittenByHandCountsNobodyOut(t *testing.T) {
	s := onServer(t)
	a, cutA := s.member("a", lease, renew)
	b, _ := s.member("b", lease, renew)
	p := s.play(a, b)
	p.run(12*time.Second, "a and b join")
	divided(t, a, b)
	s.edit(a.leaseName(), func(l *coordinationv1.Lease) { l.Annotations[AnnotationLeaving] = "true" })
	const when = "a's Lease marked leaving by hand, a's renewal failing once"
	step := func(m *Member) {
		s.set(s.clock().Add(renew / 2))
		m.round(s.ctx, klog.Background())
		noSplit(t, when, a, b)
	}
	step(b)
	cutA.Store(true)
	step(a)
	cutA.Store(false)
	step(b)
	p.run(4*lease, "after a's Lease was marked leaving by hand")
	divided(t, a, b)
}

// A clean leave keeps the custody it gave: o lets slot s go to n (swept,
// handed over, named on o's Lease) and leaves before n has confirmed it;
// o's leave moves s from n's share to x's. n must claim s in custody (and
// hand it on to x as usual) before it stops watching s: else the deletions
// it kept for s since o's sweep are dropped, and x, which lists s later,
// never hears of them.
func TestALeaveKeepsTheSlotsItGave(t *testing.T) {
	s := onServer(t)
	var nID, oID, xID string
	slot := -1
	for k := 0; k < 100 && slot < 0; k++ { // a leave moves few slots between the members that stay
		ids := [3]string{fmt.Sprint("n", k), fmt.Sprint("o", k), fmt.Sprint("x", k)}
		before, joined, after := shard.Assign([]string{ids[1], ids[2]}), shard.Assign(ids[:]), shard.Assign([]string{ids[0], ids[2]})
		for i := range shard.Slots {
			if owner(before, i) == ids[1] && owner(joined, i) == ids[0] && owner(after, i) == ids[2] {
				nID, oID, xID, slot = ids[0], ids[1], ids[2], i
				break
			}
		}
	}
	if slot < 0 {
		t.Fatal("no slot goes from o to n when n joins, and from n to x when o leaves")
	}
	// Each cache covers what its member watches at once; every sweep asked
	// for is done at once, at 100, the slots empty.
	sweeping := func(m **Member) func(*Config) {
		return func(c *Config) {
			c.Covers = func() Cover {
				cl := (*m).Claims()
				return Cover{Slots: cl.Watched().Minus(cl.Lingering), Since: 50, Synced: 200}
			}
			c.Swept = func() Sweeps {
				w := Sweeps{Slots: (*m).Claims().Sweep}
				for _, i := range w.Slots.List() {
					w.At[i] = 100
				}
				return w
			}
		}
	}
	clk := testclock.NewFakeClock(epoch) // o's leave waits on it
	var n, o, x *Member
	o, _ = s.member(oID, lease, renew, sweeping(&o), func(c *Config) { c.Clock = clk })
	x, _ = s.member(xID, lease, renew, sweeping(&x))
	n, _ = s.member(nID, lease, renew, sweeping(&n))
	p := s.play(o, x)
	p.run(12*time.Second, "o and x join")
	divided(t, o, x)
	p = s.play(o, x, n)
	for i := 0; !o.Claims().Given.Has(slot); i++ {
		if i == 40 {
			t.Fatalf("n joined %d renew periods ago: o has not let slot %d go to it: %+v", i, slot, o.Claims())
		}
		p.run(renew/2, "n joins")
	}
	left := make(chan struct{})
	go func() { defer close(left); o.leave(klog.Background()) }()
	testkit.Eventually(t, 10*time.Second, func() bool { // its mark written, before the others' next rounds
		l, err := s.admin.CoordinationV1().Leases(s.ns).Get(s.ctx, o.leaseName(), metav1.GetOptions{})
		return err == nil && l.Annotations[AnnotationLeaving] != ""
	}, "o never marked its Lease leaving")
	p = s.play(n, x)
	claimed := false
	for i := 0; ; i++ {
		select {
		case <-left:
		default:
			if clk.HasWaiters() {
				clk.Step(renew)
			}
		}
		p.run(renew/2, "o leaves")
		nc := n.Claims()
		claimed = claimed || nc.Claimed().Has(slot)
		if !claimed && !nc.Watched().Has(slot) {
			t.Fatalf("o left with slot %d given to n, not yet confirmed: n stopped watching it without ever claiming it (%+v); the deletions it kept for it are dropped",
				slot, nc)
		}
		if x.Claims().Working.Has(slot) {
			break
		}
		if i == 80 {
			t.Fatalf("%d renew periods after o left, x does not work slot %d: n %+v, x %+v", i/2, slot, nc, x.Claims())
		}
	}
	<-left
}
