package ring

import (
	"context"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"rawwatch/shard"
)

// The members change twice within one handoff: o lets slot s go to n, on
// the word of n's cover; but m has joined meanwhile, and s left n's target
// before n claimed it. n must not drop s with the deletions it kept: it
// keeps watching s (Lingering) until o has renewed twice since n withdrew
// its cover, and o names n on its Lease (Given), so n claims s in custody
// (into Releasing: it hands it on to m as usual). (Without these, the short
// sharded chaos run lost a deletion this way about one run in six.)
func TestASlotGivenOnAWithdrawnCoverIsNotLost(t *testing.T) {
	client := versionedClient()
	now := epoch
	clock := func() time.Time { return now }
	s := firstSlot(t, "no slot moves from n to m", func(i int) bool { return owns("n", i, "n", "o") && owns("m", i, "m", "n", "o") }) // n's slot with n and o, m's once m joins
	ms := map[string]*Member{}
	join := func(id string) *Member {
		var m *Member
		m, err := New(Config{Client: client, Namespace: "ns", Ring: "r", Identity: id,
			LeaseDuration: 10 * time.Second, RenewPeriod: time.Second, Now: clock,
			OnClaims: func(Claims) {}, Busy: func() (_, _ shard.SlotSet) { return },
			// The cache covers what it watches, at once; what only
			// lingers is not published.
			Covers: func() Cover {
				c := m.Claims()
				return Cover{Slots: c.Watched().Minus(c.Lingering), Since: 50, Synced: 200}
			},
			// Every sweep asked for is done at once, at 100, the slots empty.
			Swept: func() Sweeps {
				w := Sweeps{Slots: m.Claims().Sweep}
				w.At[s] = 100
				return w
			}})
		if err != nil {
			t.Fatal(err)
		}
		ms[id] = m
		return m
	}
	ctx := context.Background()
	tick := func(m *Member, look bool) {
		now = now.Add(100 * time.Millisecond)
		renewErr := renewed(m, ctx)
		m.lookOK = false
		if look {
			m.lookOK = m.look(ctx) == nil
			if m.lookOK {
				m.looks++
			}
		}
		m.confirmed = renewErr == nil && m.lookOK
		m.update(klog.Background())
	}
	o := join("o")
	for range 105 { // a lease duration claiming no free slot (unseenUntil), a claim, its confirmation
		tick(o, true)
	}
	if o.Claims().Working != shard.All() {
		t.Fatalf("o alone works %v, want every slot", o.Claims().Working)
	}
	n := join("n")
	for range 3 { // two lists for a target, a renewal to publish its cover
		tick(n, true)
	}
	for range 2 { // o sees n: s Releasing, covered by n: a sweep asked for
		tick(o, true)
	}
	if c := o.Claims(); !c.Releasing.Has(s) || !c.Sweep.Has(s) {
		t.Fatalf("o, after n joined: %+v, want slot %d Releasing and a sweep asked", c, s)
	}
	m := join("m")
	for range 3 {
		tick(m, true)
	}
	// n sees m: s leaves its target. It keeps watching s.
	for range 3 {
		tick(n, true)
		if c := n.Claims(); c.Target.Has(s) || !c.Watched().Has(s) || !c.Lingering.Has(s) {
			t.Fatalf("n, after m joined: %+v; want slot %d out of its target, lingering", c, s)
		}
	}
	// o steps on its last list, made before m joined (answered late: its
	// view still without m, and with n's cover of s as it last read it),
	// and lets s go to n.
	now = now.Add(100 * time.Millisecond)
	if err := renewed(o, ctx); err != nil {
		t.Fatal(err)
	}
	o.lookOK, o.confirmed = true, false
	o.update(klog.Background())
	if c := o.Claims(); c.Claimed().Has(s) || !c.Given.Has(s) || o.givenTo[s] != "n" {
		t.Fatalf("o, on n's old cover: %+v (given to %q); want slot %d let go, given to n", c, o.givenTo[s], s)
	}
	// n reads o's Lease: s is given to it. It claims it, in custody, into
	// Releasing; it never stops watching it.
	for i := 0; !n.Claims().Releasing.Has(s); i++ {
		if i == 6 {
			t.Fatalf("n: %+v; want slot %d claimed, Releasing", n.Claims(), s)
		}
		tick(o, true) // its next renewal names n
		tick(n, true)
		if !n.Claims().Watched().Has(s) {
			t.Fatalf("n stopped watching slot %d: %+v", s, n.Claims())
		}
	}
	// o sees n's claim confirmed: no longer given.
	for i := 0; o.Claims().Given.Has(s); i++ {
		if i == 4 {
			t.Fatalf("o: %+v; want slot %d no longer given once n confirmed it", o.Claims(), s)
		}
		tick(n, true) // its renewal shows the claim confirmed
		tick(o, true)
	}
}

// owns says whether a ring of the members ids gives slot i to id.
func owns(id string, i int, ids ...string) bool {
	return owner(shard.Assign(ids), i) == id
}

// firstSlot is the first slot for which is holds; the test fails with why if none does.
func firstSlot(t *testing.T, why string, is func(i int) bool) int {
	t.Helper()
	for i := range shard.Slots {
		if is(i) {
			return i
		}
	}
	t.Fatal(why)
	return -1
}

func owner(assign map[string][]int, slot int) string {
	for id, slots := range assign {
		for _, i := range slots {
			if i == slot {
				return id
			}
		}
	}
	return ""
}
