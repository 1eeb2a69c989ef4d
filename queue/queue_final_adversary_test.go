package queue

import (
	"testing"
)

// From the final review of the two lanes (3cab7f6 and after): the stale
// entries AddFirst leaves in order go only when order has no live entry at a
// Get. A key Add queued that waits while deletions keep coming (each key
// first updated, Add, then deleted, AddFirst: the usual life of an object)
// keeps every stale entry made behind it: with two keys, order holds one
// entry per deletion, not per key, for as long as the key waits (AddFirst's
// doc lets it wait behind every AddFirst key added meanwhile).
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

// From the final review: Done twice for one Get (a worker's bug, or a
// deferred Done plus an explicit one) while the key was re-added queues it
// twice: Len counts it twice, and the second Get finds no live entry in
// order and indexes past its end. client-go's Done has the same hole (it
// pushes whatever is dirty); this queue's inOrder turns it into a panic
// inside Get under the lock, which kills every worker.
func TestDoneTwiceDoesNotQueueTheKeyTwice(t *testing.T) {
	q := New(nil)
	q.Add("a")
	k, _ := q.Get()
	q.Add(k) // changed while processed
	q.Done(k)
	q.Done(k) // the second Done
	if q.Len() != 1 {
		t.Fatalf("Done twice after a re-add: Len %d, want 1 (one dirty key, a); a second Get would panic "+
			"(inOrder %d counts entries that are not there)", q.Len(), q.inOrder)
	}
}
