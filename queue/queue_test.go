package queue

import (
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"rawwatch/observe"
)

func TestQueueDedup(t *testing.T) {
	q := New(nil)
	var deduped []bool
	q.Observer = observe.Func(func(e observe.Event) {
		if a, ok := e.(Added); ok {
			deduped = append(deduped, a.Deduped)
		}
	})
	q.Add("a")
	q.Add("b")
	q.Add("a")
	if q.Len() != 2 {
		t.Fatalf("len = %d, want 2", q.Len())
	}
	if fmt.Sprint(deduped) != "[false false true]" {
		t.Fatalf("observed dedup = %v", deduped)
	}
	k1, _ := q.Get()
	k2, _ := q.Get()
	if k1 != "a" || k2 != "b" {
		t.Fatalf("order = %s %s, want a b", k1, k2)
	}
}

func TestQueueKeyAddedWhileProcessingComesBackOnceAfterDone(t *testing.T) {
	q := New(nil)
	q.Add("a")
	key, _ := q.Get()
	for range 5 {
		q.Add("a") // an update arrives while a worker holds the key
	}
	if q.Len() != 0 {
		t.Fatal("a key being processed must not be handed to another worker")
	}
	q.Done(key)
	if q.Len() != 1 {
		t.Fatalf("after Done the key must be back once, len = %d", q.Len())
	}
	q.Get()
	q.Done("a")
	if q.Len() != 0 {
		t.Fatal("the key came back twice")
	}
}

func TestQueueNeverProcessesAKeyConcurrently(t *testing.T) {
	q := New(nil)
	const keys, workers, adds = 10, 8, 5000
	var busy [keys]atomic.Int32
	var processed atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				key, shutdown := q.Get()
				if shutdown {
					return
				}
				var i int
				fmt.Sscan(key, &i)
				if busy[i].Add(1) != 1 {
					t.Errorf("key %s processed by two workers at once", key)
				}
				time.Sleep(50 * time.Microsecond)
				busy[i].Add(-1)
				processed.Add(1)
				q.Done(key)
			}
		})
	}
	for n := range adds {
		q.Add(fmt.Sprint(n % keys))
	}
	for q.Len() > 0 {
		time.Sleep(time.Millisecond)
	}
	q.ShutDown()
	wg.Wait()
	if p := processed.Load(); p == 0 || p > adds {
		t.Fatalf("processed %d times", p)
	}
}

func TestExponentialLimiterGrowsAndCaps(t *testing.T) {
	l := NewExponentialLimiter(5*time.Millisecond, 100*time.Millisecond)
	var got []time.Duration
	for range 7 {
		got = append(got, l.When("k"))
	}
	want := []time.Duration{5, 10, 20, 40, 80, 100, 100}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("delays = %v", got)
		}
	}
	if l.Retries("k") != 7 || l.When("other") != 5*time.Millisecond {
		t.Fatal("keys must have separate histories")
	}
	l.Forget("k")
	if l.Retries("k") != 0 || l.When("k") != 5*time.Millisecond {
		t.Fatal("Forget must reset the history")
	}
}

func TestTheBucketSpacesRetriesOfAllKeys(t *testing.T) {
	l := newBucketed(NewExponentialLimiter(time.Millisecond, time.Millisecond), 10, 2)
	// The burst passes; the third retry (of any key) waits for a token.
	if l.When("a") > time.Millisecond || l.When("b") > time.Millisecond {
		t.Fatal("burst must pass")
	}
	if d := l.When("c"); d < 50*time.Millisecond {
		t.Fatalf("third retry delayed %v, want about 100ms", d)
	}
}

func TestAddRateLimitedWaitsThenAdds(t *testing.T) {
	q := New(NewExponentialLimiter(20*time.Millisecond, time.Second))
	start := time.Now()
	if d := q.AddRateLimited("k"); d != 20*time.Millisecond {
		t.Fatalf("first retry delay %v", d)
	}
	if q.Len() != 0 || q.Pending() != 1 {
		t.Fatal("a rate-limited key must wait")
	}
	key, _ := q.Get()
	if key != "k" || time.Since(start) < 20*time.Millisecond {
		t.Fatalf("got %q after %v", key, time.Since(start))
	}
	q.Done(key)
	if q.Retries("k") != 1 {
		t.Fatal("retry not counted")
	}
	q.Forget("k")
	if q.Retries("k") != 0 {
		t.Fatal("Forget must clear the count")
	}
}

func TestAddAfterKeepsTheEarliestTime(t *testing.T) {
	q := New(nil)
	q.AddAfter("k", time.Hour)
	q.AddAfter("k", 10*time.Millisecond)
	q.AddAfter("k", time.Hour) // a later time does not push it back
	done := make(chan string)
	go func() { k, _ := q.Get(); done <- k }()
	select {
	case k := <-done:
		if k != "k" {
			t.Fatal(k)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the earliest AddAfter did not fire")
	}
	if q.Pending() != 0 {
		t.Fatal("fired key still pending")
	}
}

func TestShutDownLetsInFlightWorkFinish(t *testing.T) {
	q := New(nil)
	q.Add("busy")
	q.Add("queued")
	q.AddAfter("later", time.Hour)
	key, _ := q.Get()

	q.ShutDown()
	if _, shutdown := q.Get(); !shutdown {
		t.Fatal("Get after ShutDown must report shutdown")
	}
	q.Add("new")
	if q.Pending() != 0 {
		t.Fatal("delayed adds must be cancelled")
	}
	// The key in process finishes normally; it does not come back.
	before := q.Len()
	q.Add(key)
	q.Done(key)
	if q.Len() != before {
		t.Fatalf("%d keys queued after Done, %d before: a key came back after ShutDown", q.Len(), before)
	}
}

func TestShutDownWakesBlockedWorkers(t *testing.T) {
	q := New(nil)
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			if _, shutdown := q.Get(); !shutdown {
				t.Error("expected shutdown")
			}
		})
	}
	time.Sleep(10 * time.Millisecond)
	q.ShutDown()
	wg.Wait()
}

// Got reports how long a key waited from the add that made it dirty to the
// Get that handed it out; a deduped add does not restart the clock.
func TestQueueGotMeasuresFromTheFirstAdd(t *testing.T) {
	q := New(nil)
	var waits []time.Duration
	q.Observer = observe.Func(func(e observe.Event) {
		if g, ok := e.(Got); ok {
			if g.Key != "a" {
				t.Errorf("Got %q", g.Key)
			}
			waits = append(waits, g.Waited)
		}
	})
	q.Add("a")
	time.Sleep(20 * time.Millisecond)
	q.Add("a") // deduped: the key has been waiting since the first add
	q.Get()
	q.Add("a") // while processing: waits until Done, and that counts
	time.Sleep(10 * time.Millisecond)
	q.Done("a")
	q.Get()
	if len(waits) != 2 || waits[0] < 20*time.Millisecond || waits[1] < 10*time.Millisecond {
		t.Fatalf("waits = %v, want [>=20ms >=10ms]", waits)
	}
}

// A queue keeps its maps and its order's array while keys come one at a
// time (made afresh at every drain, they cost allocations for every key),
// and drops them once it drains after a burst, whose size Go maps and
// slices would keep for ever.
func TestQueueDropsOnlyWhatABurstGrew(t *testing.T) {
	q := New(nil)
	q.Observer = observe.Func(func(observe.Event) {})
	type parts struct{ dirty, since, processing, order uintptr }
	of := func() parts {
		return parts{reflect.ValueOf(q.dirty).Pointer(), reflect.ValueOf(q.dirtySince).Pointer(),
			reflect.ValueOf(q.processing).Pointer(), reflect.ValueOf(q.order.(*FIFO).buf).Pointer()}
	}
	one := func(key string) {
		q.Add(key)
		k, _ := q.Get()
		q.Done(k)
	}
	one("a")
	first := of()
	for i := range 100 {
		one(fmt.Sprint(i))
	}
	if now := of(); now != first {
		t.Fatalf("one key at a time: the queue's maps and array changed (%+v, then %+v)", first, now)
	}
	for i := range burstKeys + 1 {
		q.Add(fmt.Sprint(i))
	}
	var keys []string
	for q.Len() > 0 {
		k, _ := q.Get()
		keys = append(keys, k)
	}
	for _, k := range keys {
		q.Done(k)
	}
	now := of()
	if now.dirty == first.dirty || now.since == first.since || now.processing == first.processing || now.order != 0 {
		t.Fatalf("drained after a burst of %d keys: maps and array kept (%+v, before %+v)", burstKeys+1, now, first)
	}
	if q.dirtyPeak != 0 || q.processingPeak != 0 {
		t.Fatalf("peaks %d and %d after the drain, want 0", q.dirtyPeak, q.processingPeak)
	}
}

// The delayed keys' map and heap go too once the last of a burst is due.
func TestDelayedKeysDropWhatABurstGrew(t *testing.T) {
	q := New(nil)
	defer q.ShutDown()
	// The burst first waits an hour, so a busy machine cannot let keys fall
	// due while the rest are still added; then each is made due at once
	// (AddAfter keeps the earliest time).
	for i := range burstKeys + 1 {
		q.AddAfter(fmt.Sprint(i), time.Hour)
	}
	q.mu.Lock()
	grown := cap(q.due.byDue)
	q.mu.Unlock()
	if grown <= burstKeys {
		t.Fatalf("%d delayed keys: the heap's array holds %d, want more than %d", burstKeys+1, grown, burstKeys)
	}
	for i := range burstKeys + 1 {
		q.AddAfter(fmt.Sprint(i), time.Millisecond)
	}
	for deadline := time.Now().Add(time.Minute); q.Pending() > 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d keys still delayed", q.Pending())
		}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if cap(q.due.byDue) != 0 {
		t.Errorf("after a burst of %d delayed keys, all due: the heap keeps an array of %d", burstKeys+1, cap(q.due.byDue))
	}
}

// Done twice for one Get (a worker's bug, or a deferred Done plus an
// explicit one) while the key was re-added queues it once: Len counts it
// once, and the next Get finds it (client-go's Done pushes whatever is
// dirty; here a key counted twice would make Get index past order's end).
func TestDoneTwiceDoesNotQueueTheKeyTwice(t *testing.T) {
	q := New(nil)
	q.Add("a")
	k, _ := q.Get()
	q.Add(k) // changed while processed
	q.Done(k)
	q.Done(k) // the second Done
	if q.Len() != 1 {
		t.Fatalf("Done twice after a re-add: Len %d, want 1 (one dirty key, a); a second Get would panic "+
			"(the order holds %d entries)", q.Len(), q.order.Len())
	}
}
