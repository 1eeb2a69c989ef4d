package queue

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// Snapshot shows each key where it is: ready, delayed (soonest first, with
// its retries), or held by a worker; at most max of each, with full counts.
func TestSnapshot(t *testing.T) {
	q := New(NewRateLimiter(time.Hour, 10*time.Hour))
	defer q.ShutDown()
	for _, k := range []string{"r1", "r2", "r3", "busy"} {
		q.Add(k)
	}
	q.AddAfter("later", 2*time.Hour)
	q.AddRateLimited("retried") // 1 h
	q.AddRateLimited("retried") // already waiting: still due in 1 h, 2 retries
	if k, _ := q.Get(); k != "r1" {
		t.Fatalf("Get = %q", k)
	}
	s := q.Snapshot(2)
	if fmt.Sprint(s.Ready) != "[r2 r3]" || s.ReadyLen != 3 {
		t.Errorf("ready = %v (%d), want [r2 r3] of 3", s.Ready, s.ReadyLen)
	}
	if fmt.Sprint(s.Processing) != "[r1]" {
		t.Errorf("processing = %v, want [r1]", s.Processing)
	}
	if s.DelayedLen != 2 || len(s.Delayed) != 2 || s.Delayed[0].Key != "retried" || s.Delayed[1].Key != "later" {
		t.Fatalf("delayed = %+v (%d), want retried then later", s.Delayed, s.DelayedLen)
	}
	if s.Delayed[0].Retries != 2 || s.Delayed[1].Retries != 0 {
		t.Errorf("retries = %d, %d, want 2, 0", s.Delayed[0].Retries, s.Delayed[1].Retries)
	}
	if due := time.Until(s.Delayed[0].Due); due < 59*time.Minute || due > time.Hour {
		t.Errorf("retried is due in %v, want about 1h", due)
	}
	if s := q.Snapshot(1); len(s.Ready) != 1 || len(s.Delayed) != 1 || s.DelayedLen != 2 {
		t.Errorf("Snapshot(1) = %+v", s)
	}
}

// What Snapshot does under the queue's lock — the lock Add, Get and Done
// take — does not grow with the keys the queue holds: it copies at most max
// keys of each kind, so a viewer of the live page (one Snapshot about
// every 100 ms) never slows the workers, whatever the number of keys
// waiting out a retry. Held as allocations, which load cannot disturb:
// the same number with 1,000 and 100,000 delayed keys, and at most
// maxSnapshotBytes; the time is BenchmarkAddGetDoneWithViewers'.
func TestASnapshotCopiesAtMostMaxKeysWhateverTheQueueHolds(t *testing.T) {
	const max, maxSnapshotBytes = 50, 16 << 10
	allocs := map[int]float64{}
	for _, n := range []int{1_000, 100_000} {
		q := delayedQueue(n)
		for i := range 2 * max { // ready keys too, and some taken by workers
			q.Add(fmt.Sprint("ns/ready-", i))
		}
		for range max + 1 {
			q.Get()
		}
		allocs[n] = testing.AllocsPerRun(10, func() { q.Snapshot(max) })
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		const runs = 10
		for range runs {
			q.Snapshot(max)
		}
		runtime.ReadMemStats(&after)
		if b := (after.TotalAlloc - before.TotalAlloc) / runs; b > maxSnapshotBytes {
			t.Errorf("Snapshot(%d) with %d delayed keys allocates %d bytes, want at most %d (what it copies must not grow with the keys)", max, n, b, maxSnapshotBytes)
		}
		q.ShutDown()
	}
	if allocs[1_000] != allocs[100_000] {
		t.Errorf("Snapshot(%d) makes %v allocations with 1,000 delayed keys and %v with 100,000, want the same", max, allocs[1_000], allocs[100_000])
	}
}

// Snapshot's delayed keys are the soonest due, soonest first, whatever
// happened to the others: some replaced by an earlier AddAfter, some
// asked later (kept), some fired.
func TestASnapshotShowsTheSoonestDelayedKeys(t *testing.T) {
	q := New(nil)
	defer q.ShutDown()
	r := rand.New(rand.NewPCG(1, 2))
	due := map[string]time.Duration{}
	start := time.Now()
	gaps := r.Perm(2_000) // due times 10 s apart: their order is not the loop's timing
	for i := range 2_000 {
		key := fmt.Sprint("k", r.IntN(500))
		d := time.Hour + time.Duration(gaps[i])*10*time.Second
		if i%100 == 0 {
			key, d = fmt.Sprint("soon", i), time.Millisecond // fires
		}
		q.AddAfter(key, d)
		if old, ok := due[key]; !ok || d < old {
			due[key] = d
		}
	}
	for deadline := time.Now().Add(time.Minute); q.Pending() != len(due)-20; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d keys delayed, want %d (the soon ones fired)", q.Pending(), len(due)-20)
		}
	}
	q.mu.Lock()
	if len(q.due.byDue) != len(q.waiting) {
		t.Errorf("%d keys in the heap of due times, %d delayed", len(q.due.byDue), len(q.waiting))
	}
	for i, d := range q.due.byDue {
		if d.index != i || q.waiting[d.key] != d {
			t.Errorf("the heap's entry %d (%s, index %d) is not the key's delayed add", i, d.key, d.index)
		}
	}
	q.mu.Unlock()
	var want []string
	for k := range due {
		if due[k] > time.Millisecond {
			want = append(want, k)
		}
	}
	slices.SortFunc(want, func(a, b string) int { return int(due[a] - due[b]) })
	for _, max := range []int{1, 7, 50, 1000} {
		s := q.Snapshot(max)
		var got []string
		for _, d := range s.Delayed {
			got = append(got, d.Key)
			if off := d.Due.Sub(start) - due[d.Key]; off < 0 || off > time.Minute {
				t.Errorf("Snapshot(%d): %s due %v after the start, want %v", max, d.Key, d.Due.Sub(start), due[d.Key])
			}
		}
		if n := min(max, len(want)); !slices.Equal(got, want[:n]) || s.DelayedLen != len(want) {
			t.Errorf("Snapshot(%d) shows %d of %d delayed keys %v…, want the %d soonest %v…", max, len(got), s.DelayedLen, got[:min(5, len(got))], n, want[:min(5, n)])
		}
	}
}

// delayedQueue is a queue with n keys waiting out a delay of about an hour.
func delayedQueue(n int) *Queue {
	q := New(nil)
	for i := range n {
		q.AddAfter(fmt.Sprint("ns/failing-", i), time.Hour+time.Duration(i)*time.Millisecond)
	}
	return q
}

// Add, Get and Done of one key, with 100,000 keys waiting out a retry and
// 0 or 8 viewers of the live page, each taking a Snapshot of ListMax keys
// every 100 ms (the page's own pace is slower: a picture every 500 ms, and
// at each batch of events). The two must be within a few percent: a
// browser never slows the controller.
//
//	go test -run '^$' -bench AddGetDoneWithViewers -count 6 ./queue/
func BenchmarkAddGetDoneWithViewers(b *testing.B) {
	q := delayedQueue(100_000)
	defer q.ShutDown()
	for _, viewers := range []int{0, 8} {
		b.Run(fmt.Sprintf("delayed=100000/viewers=%d", viewers), func(b *testing.B) {
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for range viewers {
				wg.Go(func() {
					tick := time.NewTicker(100 * time.Millisecond)
					defer tick.Stop()
					for {
						q.Snapshot(50)
						select {
						case <-stop:
							return
						case <-tick.C:
						}
					}
				})
			}
			b.ResetTimer()
			for b.Loop() {
				q.Add("ns/changed")
				k, _ := q.Get()
				q.Done(k)
			}
			b.StopTimer()
			close(stop)
			wg.Wait()
		})
	}
}

// One Snapshot of ListMax keys with 100,000 keys waiting out a retry: an
// upper bound of the time it holds the queue's lock.
//
//	go test -run '^$' -bench 'Snapshot$' ./queue/
func BenchmarkSnapshot(b *testing.B) {
	q := delayedQueue(100_000)
	defer q.ShutDown()
	for b.Loop() {
		q.Snapshot(50)
	}
}
