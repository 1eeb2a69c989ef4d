package shard

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

func TestHashIsFNV1a64(t *testing.T) {
	// Reference values of 64-bit FNV-1a.
	for in, want := range map[string]uint64{"": 0xcbf29ce484222325, "a": 0xaf63dc4c8601ec8c, "foobar": 0x85944171f73967e8} {
		if got := Hash(in); got != want {
			t.Errorf("Hash(%q) = %#x, want %#x", in, got, want)
		}
	}
}

func TestSelectorSyntax(t *testing.T) {
	half := Of(seq(0, Slots/2))
	if got, want := half.Selector(), "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"; got != want {
		t.Errorf("first half: %s, want %s", got, want)
	}
	other := Of(seq(Slots/2, Slots))
	if got, want := other.Selector(), "shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')"; got != want {
		t.Errorf("second half: %s, want %s", got, want)
	}
	two := Of([]int{0, 2})
	if got := two.Selector(); strings.Count(got, " || ") != 1 || !strings.Contains(got, "'0x0100000000000000'") {
		t.Errorf("slots 0 and 2: %s", got)
	}
	if all := Of(seq(0, Slots)); len(all) != 1 || all[0] != (Range{0, 0}) || all.Fraction() != 1 {
		t.Errorf("every slot: %v (fraction %v), want the whole space", all, all.Fraction())
	}
}

// The slots tile the space: every hash falls in exactly one slot.
func TestSlotsTileTheSpace(t *testing.T) {
	var total float64
	for i := range Slots {
		r := slotRange(i)
		total += r.Fraction()
		if i > 0 && slotRange(i-1).End != r.Start {
			t.Fatalf("slot %d starts at %#x, slot %d ends at %#x", i, r.Start, i-1, slotRange(i-1).End)
		}
	}
	if total != 1 {
		t.Errorf("the slots cover %v of the space", total)
	}
	for _, h := range []uint64{0, 1, 1<<56 - 1, 1 << 56, 1 << 63, math.MaxUint64} {
		n := 0
		for i := range Slots {
			if slotRange(i).Contains(h) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%#x falls in %d slots", h, n)
		}
	}
}

func TestAssignIsDeterministicBalancedAndStable(t *testing.T) {
	members := func(n int) []string {
		var m []string
		for i := range n {
			m = append(m, fmt.Sprintf("rawwatch-%d", i))
		}
		return m
	}
	a := Assign([]string{"b", "a", "c"})
	b := Assign([]string{"c", "b", "a"})
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatal("the assignment depends on the members' order")
	}
	for n := 1; n <= 8; n++ {
		owners := Assign(members(n))
		total := 0
		for m, slots := range owners {
			total += len(slots)
			if share, fair := float64(len(slots)), float64(Slots)/float64(n); share < fair*0.6 || share > fair*1.4 {
				t.Errorf("%d members: %s owns %d slots, a fair share is %.0f", n, m, len(slots), fair)
			}
		}
		if total != Slots {
			t.Errorf("%d members own %d slots, want %d", n, total, Slots)
		}
		// One more member: about 1/(n+1) of the slots move, most of them
		// to the newcomer (bounded loads move a few between the others).
		next := Assign(members(n + 1))
		owner := func(o map[string][]int) map[int]string {
			by := map[int]string{}
			for m, slots := range o {
				for _, s := range slots {
					by[s] = m
				}
			}
			return by
		}
		before, after := owner(owners), owner(next)
		moved := 0
		for s := range Slots {
			if before[s] != after[s] {
				moved++
			}
		}
		if fair := float64(Slots) / float64(n+1); float64(moved) > fair*1.5 {
			t.Errorf("%d→%d members: %d slots moved, about %.0f expected", n, n+1, moved, fair)
		}
	}
	if Assign(nil) != nil {
		t.Error("no members own something")
	}
}

func TestContains(t *testing.T) {
	owners := Assign([]string{"x", "y", "z"})
	for i := range 1000 {
		uid := fmt.Sprintf("6f1c2a3e-0000-4000-8000-%012d", i)
		n := 0
		for _, slots := range owners {
			if Of(slots).Contains(uid) {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("uid %s belongs to %d members", uid, n)
		}
	}
}

func seq(from, to int) []int {
	var s []int
	for i := from; i < to; i++ {
		s = append(s, i)
	}
	return s
}

// How many slots move when members come and go, for the docs.
func TestMoves(t *testing.T) {
	for _, c := range [][2]int{{1, 2}, {2, 3}, {3, 4}, {4, 2}, {4, 3}, {8, 9}} {
		from, to := c[0], c[1]
		names := func(n int) []string {
			var m []string
			for i := range n {
				m = append(m, fmt.Sprintf("rawwatch-%d", i))
			}
			return m
		}
		a, b := Assign(names(from)), Assign(names(to))
		ownerA, ownerB := map[int]string{}, map[int]string{}
		for m, s := range a {
			for _, i := range s {
				ownerA[i] = m
			}
		}
		for m, s := range b {
			for _, i := range s {
				ownerB[i] = m
			}
		}
		moved := 0
		for i := range Slots {
			if ownerA[i] != ownerB[i] {
				moved++
			}
		}
		// The least that must move: what the members that left held, or
		// what the members that came must get.
		least := float64(Slots) * math.Abs(1-float64(min(from, to))/float64(max(from, to)))
		t.Logf("%d→%d members: %d of %d slots moved (%.0f%%; the least possible %.0f)", from, to, moved, Slots, 100*float64(moved)/Slots, least)
		if float64(moved) > 1.5*least+2 {
			t.Errorf("%d→%d members: %d slots moved, the least possible is %.0f", from, to, moved, least)
		}
	}
}

func TestSlotSetText(t *testing.T) {
	for _, c := range []struct {
		slots []int
		text  string
	}{{nil, ""}, {[]int{7}, "7"}, {[]int{0, 1, 2, 3, 7, 9, 10, 11, 12}, "0-3,7,9-12"}, {seq(0, Slots), "0-255"}, {[]int{255, 0}, "0,255"}} {
		s := SlotsOf(c.slots...)
		if got := s.String(); got != c.text {
			t.Errorf("%v: %q, want %q", c.slots, got, c.text)
		}
		back, err := ParseSlotSet(c.text)
		if err != nil || back != s {
			t.Errorf("ParseSlotSet(%q) = %v, %v; want %v", c.text, back.List(), err, c.slots)
		}
		if s.Set().Slots() != s {
			t.Errorf("%v: Set().Slots() is %v", c.slots, s.Set().Slots())
		}
		if s.Len() != len(s.List()) || s.Empty() != (len(c.slots) == 0) {
			t.Errorf("%v: Len %d, Empty %v", c.slots, s.Len(), s.Empty())
		}
	}
	for _, bad := range []string{"x", "3-1", "256", "-1", "1,,2", "0-256"} {
		if _, err := ParseSlotSet(bad); err == nil {
			t.Errorf("ParseSlotSet(%q) accepted", bad)
		}
	}
	// A range that covers part of a slot does not give the slot.
	if got := (Set{{Start: slotRange(3).Start, End: slotRange(5).Start + 1}}).Slots(); got != SlotsOf(3, 4) {
		t.Errorf("a range one past slot 4's end: slots %v, want 3-4", got)
	}
	a, b := SlotsOf(1, 2, 3), SlotsOf(3, 4)
	if a.Union(b) != SlotsOf(1, 2, 3, 4) || a.Minus(b) != SlotsOf(1, 2) || a.And(b) != SlotsOf(3) {
		t.Errorf("set algebra: %v %v %v", a.Union(b), a.Minus(b), a.And(b))
	}
}

// SlotOf is the slot whose range holds the UID's hash: the selector the
// server applies and the slot a member claims agree.
func TestSlotOfAgreesWithTheRanges(t *testing.T) {
	for i := range 2000 {
		uid := fmt.Sprintf("7c9e6679-7425-40de-944b-e07fc1f9%04d", i)
		slot := SlotOf(uid)
		if !slotRange(slot).Contains(Hash(uid)) || !SlotsOf(slot).Set().Contains(uid) {
			t.Fatalf("%s: slot %d does not hold its hash %#x", uid, slot, Hash(uid))
		}
	}
}

// The Scheme the ring's Leases carry must change with the hash, the
// number of slots or the assignment: replicas of two schemes would divide
// the objects differently, and refuse each other (package ring). So the
// fingerprints of all three are pinned here, by scheme: a change of any
// fails this test until Scheme is changed with it.
func TestTheSchemeNamesTheHashTheSlotsAndTheAssignment(t *testing.T) {
	fingerprint := func() string {
		var b strings.Builder
		for i := range 64 {
			fmt.Fprintf(&b, "%d,", SlotOf(fmt.Sprintf("uid-%d", i)))
		}
		for _, members := range [][]string{{"a"}, {"a", "b"}, {"a", "b", "c"}, {"r1", "r2", "r3", "r4", "r5"}} {
			a := Assign(members)
			for _, m := range members {
				fmt.Fprintf(&b, "%s=%v;", m, a[m])
			}
		}
		return fmt.Sprintf("%d/%#x", Slots, Hash(b.String()))
	}
	pinned := map[string]string{
		"fnv1a64/256/rendezvous-bounded": "256/0xae78b285900f6bbc",
	}
	want, ok := pinned[Scheme]
	if !ok {
		t.Fatalf("Scheme %q has no pinned fingerprint: pin %q for it", Scheme, fingerprint())
	}
	if got := fingerprint(); got != want {
		t.Fatalf("the hash, the slots or the assignment changed (fingerprint %s, pinned %s for %q): change Scheme, and pin the new fingerprint under it",
			got, want, Scheme)
	}
}
