package shard

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// SlotSet is a set of slots (each in [0, Slots)): what a member owns, claims
// or hands over. The zero value is empty; it is a value, compared with ==.
type SlotSet [Slots / 64]uint64

// SlotsOf returns the given slots as a set.
func SlotsOf(slots ...int) SlotSet {
	var s SlotSet
	for _, i := range slots {
		s = s.With(i)
	}
	return s
}

// Has tells whether slot i is in s.
func (s SlotSet) Has(i int) bool { return s[i/64]&(1<<(i%64)) != 0 }

// With returns s with slot i.
func (s SlotSet) With(i int) SlotSet { s[i/64] |= 1 << (i % 64); return s }

// Union, Minus and And are s ∪ o, s \ o and s ∩ o.
func (s SlotSet) Union(o SlotSet) SlotSet {
	for i := range s {
		s[i] |= o[i]
	}
	return s
}

func (s SlotSet) Minus(o SlotSet) SlotSet {
	for i := range s {
		s[i] &^= o[i]
	}
	return s
}

func (s SlotSet) And(o SlotSet) SlotSet {
	for i := range s {
		s[i] &= o[i]
	}
	return s
}

// Len is how many slots s holds.
func (s SlotSet) Len() int {
	n := 0
	for _, w := range s {
		n += bits.OnesCount64(w)
	}
	return n
}

// Empty tells whether s holds no slot.
func (s SlotSet) Empty() bool { return s == SlotSet{} }

// List is the slots in s, in order.
func (s SlotSet) List() []int {
	var l []int
	for i := range Slots {
		if s.Has(i) {
			l = append(l, i)
		}
	}
	return l
}

// Set is s as ranges of the hash space.
func (s SlotSet) Set() Set { return Of(s.List()) }

// SlotOf tells which slot the object with this UID falls in.
func SlotOf(uid string) int { return int(Hash(uid) >> (64 - bits.Len(uint(Slots-1)))) }

// String is s in the compact form a Lease annotation carries: runs of
// adjacent slots as "first-last", joined by commas ("0-3,7,9-12"; "" for
// the empty set). ParseSlotSet reads it back.
func (s SlotSet) String() string {
	var b strings.Builder
	for i := 0; i < Slots; i++ {
		if !s.Has(i) {
			continue
		}
		j := i
		for j+1 < Slots && s.Has(j+1) {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(i))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(j))
		}
		i = j
	}
	return b.String()
}

// ParseSlotSet reads what String writes.
func ParseSlotSet(text string) (SlotSet, error) {
	var s SlotSet
	if text == "" {
		return s, nil
	}
	for part := range strings.SplitSeq(text, ",") {
		first, last, isRun := strings.Cut(part, "-")
		a, err := parseSlot(first)
		if err != nil {
			return SlotSet{}, fmt.Errorf("slots %q: %w", text, err)
		}
		b := a
		if isRun {
			if b, err = parseSlot(last); err != nil {
				return SlotSet{}, fmt.Errorf("slots %q: %w", text, err)
			}
		}
		if b < a {
			return SlotSet{}, fmt.Errorf("slots %q: run %q goes backwards", text, part)
		}
		for i := a; i <= b; i++ {
			s = s.With(i)
		}
	}
	return s, nil
}

func parseSlot(text string) (int, error) {
	i, err := strconv.Atoi(text)
	if err != nil || i < 0 || i >= Slots {
		return 0, fmt.Errorf("%q is not a slot in [0, %d)", text, Slots)
	}
	return i, nil
}

// Slots is the slots that lie wholly in s: the inverse of SlotSet.Set.
func (s Set) Slots() SlotSet {
	var out SlotSet
	for i := range Slots {
		slot := slotRange(i)
		for _, r := range s {
			if r.Contains(slot.Start) && (r.End == 0 || slot.End != 0 && slot.End <= r.End) {
				out = out.With(i)
				break
			}
		}
	}
	return out
}

// All is every slot.
func All() SlotSet {
	var s SlotSet
	for i := range s {
		s[i] = ^uint64(0)
	}
	return s
}
