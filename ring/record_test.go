package ring

import (
	"maps"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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

// replay re-applies a saved copy of a Lease, as a GitOps tool or kubectl
// apply of a saved object does: the spec and the annotations it holds
// over whatever the Lease says now.
func (s *server) replay(saved *coordinationv1.Lease) {
	s.t.Helper()
	s.edit(saved.Name, func(l *coordinationv1.Lease) {
		l.Spec = *saved.Spec.DeepCopy()
		l.Annotations = maps.Clone(saved.Annotations)
	})
}

// saved is a copy of the Lease name as it is now.
func (s *server) saved(name string) *coordinationv1.Lease {
	s.t.Helper()
	l, err := s.admin.CoordinationV1().Leases(s.ns).Get(s.ctx, name, metav1.GetOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	return l
}

// A copy of a Lease saved earlier and written back by another writer moves
// its holder's record, backwards: that is no renewal. b dies; two copies
// of its Lease saved while it lived are re-applied in turn every second
// (a sync flapping between two saved revisions); a must count b out when
// its lease runs out and take its slots.
func TestACopyReappliedByAnotherWriterIsNoRenewal(t *testing.T) {
	s := onServer(t)
	p, ms := s.joined("a", "b")
	a, b := ms[0], ms[1]
	divided(t, a, b)
	first := s.saved(b.leaseName())
	p.run(2*renew, "a and b work")
	second := s.saved(b.leaseName())
	p.kill(b)
	replays := 0
	p.each(time.Second, func() {
		replays++
		s.replay([]*coordinationv1.Lease{first, second}[replays%2])
	})
	p.run(4*lease, "b dead, two saved copies of its Lease re-applied in turn every second")
	if a.Claims().Working != shard.All() {
		t.Fatalf("b dead for %s, saved copies of its Lease re-applied every second (%d writes): a works %d slots, want all %d",
			4*lease, replays, a.Claims().Working.Len(), shard.Slots)
	}
}

// A live member whose Lease is set back to a copy of itself saved earlier,
// every second (a sync re-applying a saved object): the copies may
// overwrite its renewals before the others read them, so it counts itself
// out (its own Lease renewed by another writer), the others count its
// first set-back as a renewal and none after, and no two members ever
// admit one slot (play checks it at every step). Once the copies stop,
// its Lease stands still, it takes it back, and the two divide the slots.
func TestALeaseSetBackToEarlierCopiesSplitsNoBrain(t *testing.T) {
	s := onServer(t)
	p, ms := s.joined("a", "b")
	a, b := ms[0], ms[1]
	divided(t, a, b)
	saved := s.saved(b.leaseName())
	p.run(3*renew, "a and b work")
	replay := p.each(time.Second, func() { s.replay(saved) })
	p.run(4*lease, "b's Lease set back to a copy saved earlier, every second")
	replay.every = 1 << 62
	p.run(6*lease, "the copies stopped")
	divided(t, a, b)
}

// A lease duration written by hand is believed only up to a bound of the
// observer's own (leaseBelief): one Lease whose leaseDurationSeconds says
// a day, with a renewTime moved on so that it reads as its holder's write,
// must not make the ring wait a day for its member when it dies (nor make
// every wait on the longest duration a day long).
func TestAHugeLeaseDurationWrittenByHandIsBounded(t *testing.T) {
	s := onServer(t)
	p, ms := s.joined("a", "b")
	a, b := ms[0], ms[1]
	divided(t, a, b)
	s.edit(b.leaseName(), func(l *coordinationv1.Lease) {
		day, later := int32(86400), metav1.NewMicroTime(s.clock().Add(time.Millisecond))
		l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = &day, &later
	})
	p.run(2*renew, "b's Lease says a lease duration of a day")
	p.kill(b)
	p.run(6*lease, "b dead, its Lease saying a lease duration of a day")
	if a.Claims().Working != shard.All() {
		t.Fatalf("b dead for %s, its Lease saying by hand a lease duration of a day: a works %d slots, want all %d (a waits on %s)",
			6*lease, a.Claims().Working.Len(), shard.Slots, a.longest)
	}
}
