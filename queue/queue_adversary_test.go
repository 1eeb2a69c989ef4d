package queue

import (
	"fmt"
	"strings"
	"testing"
)

// From the review of AddFirst.

// The cost of AddFirst under a backlog of n keys queued by Add, for a key
// waiting in the middle of it (moved: its entry in order goes stale, in
// constant time) and for a new key. (The review of its first version, which
// found the key in order and cut it out, measured 45.6 µs a move in a
// 10,000-key backlog and 1.4 µs in a 100-key one: a mass deletion behind a
// backlog was quadratic on the watcher's goroutine.)
func BenchmarkAddFirst(b *testing.B) {
	for _, n := range []int{100, 10_000} {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("ns/changed-%d", i)
		}
		for _, moved := range []bool{true, false} {
			b.Run(fmt.Sprintf("backlog=%d/moved=%v", n, moved), func(b *testing.B) {
				q := New(nil)
				for _, k := range keys {
					q.Add(k)
				}
				b.ResetTimer()
				for i := range b.N {
					key := fmt.Sprint("ns/new-", i)
					if moved {
						key = keys[n/2+i%(n/2)]
					}
					q.AddFirst(key)
					b.StopTimer()
					// Put the backlog back as it was: the key leaves first
					// and rejoins the order at its back.
					got, _ := q.Get()
					q.Done(got)
					if moved {
						q.Add(got)
					}
					b.StartTimer()
				}
			})
		}
	}
}

// A key being processed when AddFirst is called comes back first after
// Done, before a key Add queued after that AddFirst (what a deletion needs;
// AddFirst's doc says so: the review found its first bound off by these).
func TestAKeyAddedFirstWhileProcessedComesBackFirst(t *testing.T) {
	q := New(nil)
	q.Add("busy")
	busy, _ := q.Get()
	q.AddFirst(busy) // its deletion, while a worker has it
	q.Add("k")       // k waits from now on
	q.Done(busy)
	var got []string
	for q.Len() > 0 {
		key, _ := q.Get()
		got = append(got, key)
		q.Done(key)
	}
	if strings.Join(got, ",") != "busy,k" {
		t.Errorf("handed out %s; want busy (added first while processed), then k", strings.Join(got, ","))
	}
}

// AddFirst of every key of a long backlog, the newest first (each moved:
// its entry in order goes stale), hands them out in that order, and nothing
// twice: the stale entries are skipped.
func TestAddFirstOfEveryQueuedKey(t *testing.T) {
	const n = 16_000
	q := New(nil)
	for i := range n {
		q.Add(fmt.Sprintf("ns/obj-%d", i))
	}
	for i := range n {
		q.AddFirst(fmt.Sprintf("ns/obj-%d", n-1-i))
	}
	if q.Len() != n {
		t.Fatalf("Len %d, want %d", q.Len(), n)
	}
	for i := range n {
		got, _ := q.Get()
		if want := fmt.Sprintf("ns/obj-%d", n-1-i); got != want {
			t.Fatalf("key %d handed out: %s, want %s", i, got, want)
		}
		q.Done(got)
	}
	if q.Len() != 0 || len(q.order.keys) != 0 {
		t.Fatalf("after the last key: Len %d, %d entries left in order (stale ones must go when it drains)", q.Len(), len(q.order.keys))
	}
}
