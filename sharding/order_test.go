package sharding

import (
	"fmt"
	"strings"
	"testing"

	"rawwatch/queue"
)

// ordered is a queue whose Order is DeletionsFirst, and the keys with a
// deletion as a controller records them: deleted marks one and adds it (a
// watcher's deletion), get hands out a key and clears its mark (its worker
// takes its deletions). Single-threaded.
type ordered struct {
	*queue.Queue
	o   *DeletionsFirst
	del map[string]bool
}

func newOrdered() *ordered {
	q := &ordered{del: map[string]bool{}}
	q.o = NewDeletionsFirst(func(key string) bool { return q.del[key] })
	q.Queue = queue.NewOrdered(nil, q.o)
	return q
}

func (q *ordered) deleted(key string) {
	q.del[key] = true
	q.Add(key)
}

func (q *ordered) get() (string, bool) {
	key, shutdown := q.Get()
	delete(q.del, key)
	return key, shutdown
}

// The cost of a deletion under a backlog of n keys queued by Add, for a key
// waiting in the middle of it (moved: its entry among the others goes stale, in
// constant time) and for a new key: the same whatever the backlog, so a
// mass deletion behind a backlog is linear on the watcher's goroutine.
func BenchmarkDeletionFirst(b *testing.B) {
	for _, n := range []int{100, 10_000} {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("ns/changed-%d", i)
		}
		for _, moved := range []bool{true, false} {
			b.Run(fmt.Sprintf("backlog=%d/moved=%v", n, moved), func(b *testing.B) {
				q := newOrdered()
				for _, k := range keys {
					q.Add(k)
				}
				b.ResetTimer()
				for i := range b.N {
					key := fmt.Sprint("ns/new-", i)
					if moved {
						key = keys[n/2+i%(n/2)]
					}
					q.deleted(key)
					b.StopTimer()
					// Put the backlog back as it was: the key leaves first
					// and rejoins the order at its back.
					got, _ := q.get()
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

// A key being processed when its deletion comes comes back first after
// Done, before a key Add queued after that deletion (DeletionsFirst's doc
// counts these in its bound).
func TestAKeyDeletedWhileProcessedComesBackFirst(t *testing.T) {
	q := newOrdered()
	q.Add("busy")
	busy, _ := q.get()
	q.deleted(busy) // its deletion, while a worker has it
	q.Add("k")      // k waits from now on
	q.Done(busy)
	var got []string
	for q.Len() > 0 {
		key, _ := q.get()
		got = append(got, key)
		q.Done(key)
	}
	if strings.Join(got, ",") != "busy,k" {
		t.Errorf("handed out %s; want busy (added first while processed), then k", strings.Join(got, ","))
	}
}

// A deletion of every key of a long backlog, the newest first (each moved:
// its entry among the others goes stale), hands them out in that order, and
// nothing twice: the stale entries are skipped.
func TestADeletionOfEveryQueuedKey(t *testing.T) {
	const n = 16_000
	q := newOrdered()
	for i := range n {
		q.Add(fmt.Sprintf("ns/obj-%d", i))
	}
	for i := range n {
		q.deleted(fmt.Sprintf("ns/obj-%d", n-1-i))
	}
	if q.Len() != n {
		t.Fatalf("Len %d, want %d", q.Len(), n)
	}
	for i := range n {
		got, _ := q.get()
		if want := fmt.Sprintf("ns/obj-%d", n-1-i); got != want {
			t.Fatalf("key %d handed out: %s, want %s", i, got, want)
		}
		q.Done(got)
	}
	if q.Len() != 0 || len(q.o.others.keys) != 0 {
		t.Fatalf("after the last key: Len %d, %d entries left among the others (stale ones must go when it drains)", q.Len(), len(q.o.others.keys))
	}
}

// The stale entries the deletions leave among the others are bounded by the
// keys, not by the adds: a key Add queued that waits while deletions keep
// coming (each key first updated, then deleted: the usual life of an
// object) does not keep one stale entry per deletion behind it.
func TestStaleEntriesAreBoundedByKeysNotByAdds(t *testing.T) {
	q := newOrdered()
	q.Add("waiting")
	const rounds = 1000
	for range rounds {
		q.Add("obj")     // an update
		q.deleted("obj") // then its deletion: obj's entry in order goes stale
		got, _ := q.get()
		if got != "obj" {
			t.Fatalf("Get = %q, want obj (added first)", got)
		}
		q.Done(got)
	}
	if q.Len() != 1 {
		t.Fatalf("Len %d, want 1 (waiting)", q.Len())
	}
	// Two keys were ever dirty; a bound by keys would be a few entries.
	if n := len(q.o.others.keys); n > 2*burstKeys {
		t.Fatalf("after %d update-then-delete rounds of one key, with one other key waiting: order holds %d entries "+
			"(cap %d) for 1 live key: stale entries grow with the number of deletions, not the keys", rounds, n, cap(q.o.others.buf))
	}
}

// A deletion puts its key before every key Add queued, behind the
// deletions before it; a key already waiting moves; a key being processed
// comes back first after Done; a change of a key waiting first leaves it
// there.
func TestDeletionsGoBeforeTheKeysAddQueued(t *testing.T) {
	q := newOrdered()
	for _, k := range []string{"a", "b", "c", "d"} {
		q.Add(k)
	}
	busy, _ := q.get() // "a"
	q.deleted("x")
	q.deleted("c") // waiting: moves
	q.deleted(busy)
	q.Done(busy)
	q.Add("x") // already first: stays
	var got []string
	for q.Len() > 0 {
		k, _ := q.get()
		got = append(got, k)
		q.Done(k)
	}
	if want := "x,c,a,b,d"; strings.Join(got, ",") != want {
		t.Errorf("keys handed out %s, want %s", strings.Join(got, ","), want)
	}
}

// Snapshot shows the keys in the order Get hands them out: the deletions
// first, the moved keys' stale entries skipped.
func TestSnapshotShowsTheDeletionsFirst(t *testing.T) {
	q := newOrdered()
	for _, k := range []string{"a", "b", "c"} {
		q.Add(k)
	}
	q.deleted("b")
	if s := q.Snapshot(10); strings.Join(s.Ready, ",") != "b,a,c" || s.ReadyLen != 3 {
		t.Errorf("ready %v (%d), want b,a,c of 3", s.Ready, s.ReadyLen)
	}
}
