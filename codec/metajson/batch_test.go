package metajson

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unsafe"
)

// readStrings reads an array of strings into dst (as long) with StringTo.
func readStrings(d *Decoder, dst []string) error {
	i := 0
	return d.Elements(func() error {
		i++
		return d.StringTo(&dst[i-1])
	})
}

// contiguous tells whether the non-empty strings of ss follow one another in
// memory, parts of one block.
func contiguous(ss ...string) bool {
	var next *byte
	for _, s := range ss {
		if s == "" {
			continue
		}
		p := unsafe.StringData(s)
		if next != nil && p != next {
			return false
		}
		next = (*byte)(unsafe.Add(unsafe.Pointer(p), len(s)))
	}
	return true
}

// Batch makes the plain strings StringTo reads in one block, the others
// (escaped, invalid UTF-8, beyond its fixed room) one by one, all equal to
// what encoding/json makes of them; Batch inside Batch is the outer's.
func TestBatchMakesOneBlock(t *testing.T) {
	for _, n := range []int{1, 5, 8, 9, 12} {
		var elems []string
		for i := range n {
			elems = append(elems, fmt.Sprintf(`"string %d, longer than a tiny allocation"`, i)) // about 40 bytes: made apart, two would not abut
		}
		elems[0] = `""`
		if n > 5 {
			elems[3] = `"esc\naped"`
			elems[4] = `"bad ` + "\xff" + `"`
		}
		data := []byte("[" + strings.Join(elems, ",") + "]")
		var want []string
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatal(err)
		}
		for _, nested := range []bool{false, true} {
			got := make([]string, n)
			d := NewDecoder(data, Options{})
			read := func() error { return readStrings(d, got) }
			if nested {
				read = func() error { return d.Batch(func() error { return readStrings(d, got) }) }
			}
			if err := d.Whole(func() error { return d.Batch(read) }); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("%s: got %q, want %q", data, got, want)
			}
			var plain []string // the first len(d.later) plain strings
			for i, s := range got {
				if len(plain) < len(d.later) && !(n > 5 && (i == 3 || i == 4)) {
					plain = append(plain, s)
				}
			}
			if !contiguous(plain...) {
				t.Errorf("%s (nested %v): the plain strings %q are not one block", data, nested, plain)
			}
			if d.n != 0 || d.later != [len(d.later)]laterString{} || d.batching {
				t.Errorf("%s: the decoder keeps %d strings to make: %+v", data, d.n, d.later)
			}
		}
	}
}

// A read that fails (the object declined) assigns none of its strings, and
// leaves none for the next Batch of the same Decoder.
func TestBatchDeclineAssignsNothing(t *testing.T) {
	d := NewDecoder([]byte(`["a","b",1]`), Options{})
	got := make([]string, 3)
	if err := d.Batch(func() error { return readStrings(d, got) }); err == nil {
		t.Fatal("a number read as a string")
	}
	if got[0] != "" || got[1] != "" {
		t.Fatalf("a declined read assigned %q", got)
	}
	if d.n != 0 || d.later != [len(d.later)]laterString{} || d.batching {
		t.Fatalf("the decoder keeps %d strings to make: %+v", d.n, d.later)
	}
	d.Reset([]byte(`["c"]`), Options{})
	next := make([]string, 1)
	if err := d.Batch(func() error { return readStrings(d, next) }); err != nil {
		t.Fatal(err)
	}
	if next[0] != "c" || got[0] != "" || got[1] != "" {
		t.Fatalf("after a decline, the next object got %q and the declined one %q", next, got)
	}
}
