package ring

import (
	"strings"
	"testing"
	"time"
)

// A rolling update that changes --sharding-lease-duration (within the
// factor of four docs/sharding.md calls safe): the new members n1..n3
// write newLease, the old ones 10 s. Each drain must still end within
// drainBound renew periods, no slot admitted by two members at once.
func rollingUpdateWithLease(t *testing.T, newLease time.Duration) {
	for _, order := range [][]string{
		{"a", "b", "c", "n1", "n2", "n3"},
		{"n1", "n2", "n3", "a", "b", "c"},
		{"n3", "c", "n1", "b", "n2", "a"},
	} {
		t.Run(strings.Join(order, ","), func(t *testing.T) { rollingUpdateOrdered(t, newLease, order) })
	}
}

func rollingUpdateOrdered(t *testing.T, newLease time.Duration, order []string) {
	r := newDrainRing(t, order...)
	r.deleting = true
	for _, id := range []string{"n1", "n2", "n3"} {
		m := r.ms[id]
		m.cfg.LeaseDuration, m.cfg.HandoffTimeout, m.longest = newLease, 4*newLease, newLease
		r.dead[id] = true // not started yet
	}
	r.settle(30, "a, b and c join", "a", "b", "c")
	delete(r.dead, "n1")
	r.round("n1 joins")
	r.round("n1 joins")
	for i, old := range []string{"a", "b", "c"} {
		if i < 2 {
			delete(r.dead, []string{"n2", "n3"}[i])
		}
		r.ms[old].Drain()
		took := r.drained(drainBound, old+" drains, a new member joining", old)
		t.Logf("%s drained in %d renew periods", old, took)
		r.leave(old)
	}
	took := r.settle(60, "after the update", "n1", "n2", "n3")
	t.Logf("n1, n2 and n3 work every slot %d renew periods after c left", took)
}

func TestARollingUpdateToALongerLeaseDrainsEachMemberInTime(t *testing.T) {
	rollingUpdateWithLease(t, 30*time.Second)
}

func TestARollingUpdateToAShorterLeaseDrainsEachMemberInTime(t *testing.T) {
	rollingUpdateWithLease(t, 3*time.Second)
}
