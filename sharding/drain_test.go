package sharding_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"rawwatch/internal/testkit"
	"rawwatch/queue"
	"rawwatch/sharding"
	"rawwatch/store"
)

// A clean leave drains: the deletions still queued when Run stopped (Run
// shuts its queue down and drops them), and one recorded while the drain
// runs, are handed to Deleted; the keys are not reconciled (updates are the
// next owner's).
func TestDrainHandlesWhatRunLeftQueued(t *testing.T) {
	b := testkit.NewBlockingDeleter()
	c := newController(b, nil)
	for _, name := range []string{"a", "b", "c"} {
		c.OnDelta(deleted(name))
	}
	c.OnDelta(changed("d"))
	stop := run(c, 1)
	<-b.Entered // one worker holds the first deletion; the rest wait in the queue
	go func() { b.Release <- struct{}{} }()
	stop()
	if got := b.HandledUIDs(); len(got) != 1 {
		t.Fatalf("Run handled %v before it returned, want the one in flight", got)
	}
	reconciled := b.Reconciled() // the key in flight, after its deletion

	drained := make(chan []store.Delta[object])
	go func() { drained <- sharding.Drain(context.Background(), c, 2) }()
	<-b.Entered // the drain holds a second deletion: a new one arrives meanwhile
	c.OnDelta(deleted("e"))
	go func() {
		for range b.Entered {
		}
	}()
	close(b.Release)
	if left := <-drained; len(left) != 0 {
		t.Fatalf("the drain left %d deletions", len(left))
	}
	if got, want := slices.Sorted(slices.Values(b.HandledUIDs())), []string{"uid-a", "uid-b", "uid-c", "uid-e"}; !slices.Equal(got, want) {
		t.Fatalf("deletions handled: %v, want %v", got, want)
	}
	if got := b.Reconciled(); !slices.Equal(got, reconciled) {
		t.Errorf("the drain reconciled %v: updates are the next owner's", got[len(reconciled):])
	}
	if q, f := testkit.DeletionCounts(c.Deletions); q+f != 0 {
		t.Errorf("after the drain, Deletions still gives %d queued, %d failing", q, f)
	}
}

// A deletion whose Deleted keeps failing does not hold a drain beyond its
// context: it is retried after its backoff, then returned as left; a
// deletion of another key, arriving while it waits, is handled meanwhile.
func TestDrainGivesUpOnAFailingDeletionWhenItsContextEnds(t *testing.T) {
	fake := &failingDeleter{bad: "uid-bad"}
	c := newController(fake, queue.NewExponentialLimiter(10*time.Millisecond, 40*time.Millisecond))
	bad := deleted("bad")
	c.OnDelta(bad)
	ctx, cancel := context.WithCancel(context.Background())
	drained := make(chan []store.Delta[object])
	go func() { drained <- sharding.Drain(ctx, c, 1) }()
	testkit.Eventually(t, 10*time.Second, func() bool { fake.Mu.Lock(); defer fake.Mu.Unlock(); return fake.tries >= 3 },
		"the failing deletion was not retried")
	c.OnDelta(deleted("good"))
	testkit.Eventually(t, 10*time.Second, func() bool { return slices.Contains(fake.HandledUIDs(), "uid-good") },
		"a deletion arriving while another waits for its retry was not handled")
	select {
	case left := <-drained:
		t.Fatalf("the drain returned %d left while its context was live", len(left))
	default:
	}
	cancel()
	left := <-drained
	if len(left) != 1 || left[0].Object != bad.Object {
		t.Fatalf("left %v, want the failing deletion", left)
	}
	if q, f := testkit.DeletionCounts(c.Deletions); q != 0 || f != 1 {
		t.Errorf("after the drain, Deletions gives %d queued, %d failing; want the failing one", q, f)
	}
}
