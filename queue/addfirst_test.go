package queue

import (
	"fmt"
	"strings"
	"testing"
)

// The cost of AddFirst under a backlog of n keys queued by Add, for a key
// waiting in the middle of it (moved: its entry in order goes stale, in
// constant time) and for a new key: the same whatever the backlog, so a
// mass deletion behind a backlog is linear on the watcher's goroutine.
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
// AddFirst's doc counts these in its bound).
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

// The stale entries AddFirst leaves in order are bounded by the keys, not
// by the adds: a key Add queued that waits while deletions keep coming
// (each key first updated, Add, then deleted, AddFirst: the usual life of
// an object) does not keep one stale entry per deletion behind it.
func TestStaleEntriesAreBoundedByKeysNotByAdds(t *testing.T) {
	q := New(nil)
	q.Add("waiting")
	const rounds = 1000
	for range rounds {
		q.Add("obj")      // an update
		q.AddFirst("obj") // then its deletion: obj's entry in order goes stale
		got, _ := q.Get()
		if got != "obj" {
			t.Fatalf("Get = %q, want obj (added first)", got)
		}
		q.Done(got)
	}
	if q.Len() != 1 {
		t.Fatalf("Len %d, want 1 (waiting)", q.Len())
	}
	// Two keys were ever dirty; a bound by keys would be a few entries.
	if n := len(q.order.keys); n > 2*burstKeys {
		t.Fatalf("after %d update-then-delete rounds of one key, with one other key waiting: order holds %d entries "+
			"(cap %d) for 1 live key: stale entries grow with the number of AddFirst calls, not the keys", rounds, n, cap(q.order.buf))
	}
}
