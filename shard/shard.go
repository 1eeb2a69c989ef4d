// Package shard splits the objects of one resource among the replicas of a
// controller by a hash of their UID, so that each replica lists, watches,
// caches and reconciles only its part.
//
// kube-apiserver 1.36+ can do the split on the server (KEP-5866, alpha gate
// ShardedListAndWatch): LIST and WATCH take a shard selector
//
//	shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')
//
// and return only the objects whose 64-bit FNV-1a hash of the UID falls in
// [start, end); ranges are joined with "||". A replica that asks for its
// ranges receives and decodes only its share of the stream: the bandwidth
// and CPU are divided too, not only the reconciles. A server without the
// gate drops the parameter silently, so a client must check what it gets and,
// when an object falls outside its ranges, filter on its side with the same
// hash (Set.Contains).
//
// The hash space is cut into a fixed number of slots (Slots, 256). Which
// member owns which slot follows from the membership alone, by rendezvous
// hashing (Assign): every replica that sees the same members computes the
// same owners, and adding or removing one of N members moves about 1/N of
// the slots, the others staying where they were.
package shard

import (
	"fmt"
	"hash/fnv"
	"math/bits"
	"slices"
	"strings"
)

// Slots is how many equal parts the hash space is cut into: enough that N
// members get shares within a few percent of 1/N for N up to tens.
const Slots = 256

// Scheme names the way objects are divided: the hash (Hash), the number of
// slots (Slots) and how slots go to members (Assign). Two replicas divide
// alike only if their Schemes are equal; a change of any of the three must
// change it (TestTheSchemeNamesTheHashTheSlotsAndTheAssignment holds
// fingerprints of all three).
const Scheme = "fnv1a64/256/rendezvous-bounded"

// Hash is the 64-bit FNV-1a hash of an object's UID: the value the server's
// shardRange(object.metadata.uid, …) compares.
func Hash(uid string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(uid))
	return h.Sum64()
}

// A Range is the part [Start, End) of the hash space; End 0 stands for 2^64,
// the end of the space (which a uint64 cannot hold).
type Range struct{ Start, End uint64 }

// Contains tells whether h falls in r.
func (r Range) Contains(h uint64) bool {
	return h >= r.Start && (r.End == 0 || h < r.End)
}

// String is r as the server's selector expression.
func (r Range) String() string {
	end := fmt.Sprintf("0x%016x", r.End)
	if r.End == 0 {
		end = "0x10000000000000000"
	}
	return fmt.Sprintf("shardRange(object.metadata.uid, '0x%016x', '%s')", r.Start, end)
}

// Fraction is the share of the hash space r covers.
func (r Range) Fraction() float64 {
	if r.End == 0 {
		return (float64(^r.Start) + 1) / (1 << 64) // 2^64 - Start
	}
	return float64(r.End-r.Start) / (1 << 64)
}

// slotRange is slot i of Slots as a Range.
func slotRange(i int) Range {
	width := uint64(1) << (64 - bits.Len(uint(Slots-1)))
	return Range{Start: uint64(i) * width, End: uint64(i+1) * width} // the last End wraps to 0
}

// A Set is a union of ranges: what one member owns.
type Set []Range

// Of returns the slots (each in [0, Slots)) as a Set, adjacent slots merged.
func Of(slots []int) Set {
	s := slices.Clone(slots)
	slices.Sort(s)
	s = slices.Compact(s)
	var set Set
	for _, i := range s {
		r := slotRange(i)
		if n := len(set); n > 0 && set[n-1].End == r.Start && set[n-1].End != 0 {
			set[n-1].End = r.End
			continue
		}
		set = append(set, r)
	}
	return set
}

// Contains tells whether the object with this UID belongs to the set.
func (s Set) Contains(uid string) bool {
	h := Hash(uid)
	for _, r := range s {
		if r.Contains(h) {
			return true
		}
	}
	return false
}

// Selector is the set as the server's shardSelector parameter ("" for the
// empty set, which the caller must not send: it would mean "everything").
func (s Set) Selector() string {
	parts := make([]string, len(s))
	for i, r := range s {
		parts[i] = r.String()
	}
	return strings.Join(parts, " || ")
}

// Fraction is the share of the hash space the set covers.
func (s Set) Fraction() float64 {
	var f float64
	for _, r := range s {
		f += r.Fraction()
	}
	return f
}

// Assign gives each of the Slots slots to one of members, by rendezvous
// hashing with bounded loads: slot i goes to the member with the highest
// score(member, i) that does not already hold its fair share (Slots/N,
// rounded up), the slots taken in order. The result depends only on the set
// of members, not their order; every member holds Slots/N slots, give or
// take one; when a member joins or leaves, about 1/N of the slots move.
// Members must be distinct; none gives nil.
func Assign(members []string) map[string][]int {
	if len(members) == 0 {
		return nil
	}
	members = slices.Clone(members)
	slices.Sort(members)
	limit := (Slots + len(members) - 1) / len(members)
	owners := make(map[string][]int, len(members))
	order := slices.Clone(members)
	for i := range Slots {
		slices.SortStableFunc(order, func(a, b string) int { // by score, highest first
			sa, sb := score(a, i), score(b, i)
			switch {
			case sa > sb:
				return -1
			case sa < sb:
				return 1
			}
			return strings.Compare(a, b)
		})
		for _, m := range order {
			if len(owners[m]) < limit {
				owners[m] = append(owners[m], i)
				break
			}
		}
	}
	return owners
}

// score is member's claim on slot i: FNV-1a alone mixes similar names
// ("rawwatch-1", "rawwatch-2") poorly, so the result goes through
// MurmurHash3's finalizer, which spreads every input bit over every output bit.
func score(member string, slot int) uint64 {
	x := Hash(member) ^ (uint64(slot)+1)*0x9e3779b97f4a7c15
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}
