package ring

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"rawwatch/shard"
)

// A member is judged by the lease duration it wrote on its Lease, not by
// the observer's own: a rolling update that changes
// --sharding-lease-duration runs members of both. a (lease 9 s: it fences
// 8 s after its last renewal) is cut off from the server; b (lease 4.5 s)
// must not take a's slots before a's own lease has run out.
func TestAMemberIsJudgedByTheLeaseDurationItWrote(t *testing.T) {
	s := onServer(t)
	a, cutA := s.member("a", 9*time.Second, time.Second)
	b, _ := s.member("b", 4500*time.Millisecond, time.Second)
	p := s.play(a, b)
	p.run(16*time.Second, "a (lease 9 s) and b (lease 4.5 s) join")
	divided(t, a, b)
	cutA.Store(true)
	p.run(16*time.Second, "a, lease 9 s, cut off from the server; b, lease 4.5 s, judging it")
	if b.Claims().Working != shard.All() {
		t.Fatalf("16 s after a (lease 9 s) was cut off, b works %d slots, want all %d", b.Claims().Working.Len(), shard.Slots)
	}
}

// Only the holder's own record says that it renewed (holder, renewTime,
// transitions, as client-go's leader election reads a Lease): a write by
// anyone else (a label from a GitOps tool or a policy engine, an
// annotation by hand) moves the Lease's resourceVersion but renews
// nothing. b dies; its Lease is labelled by another writer every second;
// a must count b out when b's lease runs out and take its slots.
func TestAWriteByAnyoneElseIsNoRenewal(t *testing.T) {
	s := onServer(t)
	p, ms := s.joined("a", "b")
	a, b := ms[0], ms[1]
	divided(t, a, b)
	p.kill(b)
	touches := 0
	p.each(time.Second, func() {
		touches++
		s.edit(b.leaseName(), func(l *coordinationv1.Lease) {
			l.Labels["example.com/touched"] = time.Duration(touches * int(time.Second)).String()
		})
	})
	p.run(4*lease, "b dead, its Lease labelled by another writer every second")
	if a.Claims().Working != shard.All() {
		t.Fatalf("b dead for %s, its Lease labelled by another writer every second (%d writes): a works %d slots, want all %d",
			4*lease, touches, a.Claims().Working.Len(), shard.Slots)
	}
}
