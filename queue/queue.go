package queue

import (
	"container/heap"
	"slices"
	"sort"
	"sync"
	"time"

	"rawwatch/observe"
)

// The events a Queue reports to its Observer.
type (
	// Added: Add was called for Key; Deduped when the key was already waiting.
	Added struct {
		Key     string
		Deduped bool
	}
	// Got: a worker took Key, which had waited Waited since it became dirty.
	Got struct {
		Key    string
		Waited time.Duration
	}
)

// Queue is a work queue of keys with the guarantees controllers rely on:
//
//   - dedup: a key waiting in the queue is there once, however often added;
//   - exclusivity: between Get and Done a key belongs to one worker; an add
//     meanwhile marks it dirty, and Done puts it back for one more run;
//   - fairness: keys come out in the order they became dirty (or an Order's);
//   - retries: AddRateLimited re-adds a key after its RateLimiter's delay,
//     and Forget resets that delay;
//   - shutdown: ShutDown makes Get return shutdown=true at once; delayed
//     adds are dropped.
//
// Call New.
type Queue struct {
	limiter RateLimiter
	// Observer, when set before use, hears an Added for every add and a Got
	// for every key handed out, without the lock held.
	Observer observe.Observer

	mu sync.Mutex
	// ready wakes workers blocked in Get.
	ready *sync.Cond
	// order holds the dirty keys that are not being processed: ready.
	order Order
	// dirty: keys that need processing (waiting, or being processed and to
	// be re-queued by Done).
	dirty map[string]struct{}
	// processing: keys handed out by Get and not yet Done.
	processing map[string]struct{}
	// waiting: keys scheduled by AddAfter, with their timers; due holds
	// the same as a heap, soonest first, for Snapshot.
	waiting map[string]*delayed
	due     dueHeap
	// dirtySince: when each dirty key was added (kept only with an Observer).
	dirtySince map[string]time.Time
	// dirtyPeak and processingPeak: the most keys in those maps since they
	// were made (did a burst grow them?).
	dirtyPeak, processingPeak int
	shutdown                  bool
}

// burstKeys: a queue drained after more keys than this makes its maps and
// arrays afresh (Go's keep their size); smaller ones are reused.
const burstKeys = 64

type delayed struct {
	key   string
	at    time.Time
	timer *time.Timer
	index int // in due
}

// byDue orders delayed keys soonest first, as a heap.Interface.
type byDue []*delayed

func (h byDue) Len() int           { return len(h) }
func (h byDue) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h byDue) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *byDue) Push(x any)        { *h = append(*h, x.(*delayed)) }
func (h *byDue) Pop() any {
	old := *h
	d := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return d
}

// dueHeap is the delayed keys as a heap by due time, each knowing its place.
type dueHeap struct{ byDue }

func (h dueHeap) Swap(i, j int) {
	h.byDue.Swap(i, j)
	h.byDue[i].index, h.byDue[j].index = i, j
}

func (h *dueHeap) Push(x any) {
	x.(*delayed).index = len(h.byDue)
	h.byDue.Push(x)
}

// soonest returns the max soonest keys, soonest first, reading about 2·max
// entries: each next one is a child of one already taken.
func (h dueHeap) soonest(max int) []DelayedKey {
	n := min(max, len(h.byDue))
	out := make([]DelayedKey, 0, n)
	next := make(byDue, 0, n+1)
	if n > 0 {
		next = append(next, h.byDue[0])
	}
	for len(out) < n {
		d := heap.Pop(&next).(*delayed)
		out = append(out, DelayedKey{Key: d.key, Due: d.at})
		for c := 2*d.index + 1; c <= 2*d.index+2 && c < len(h.byDue); c++ {
			heap.Push(&next, h.byDue[c])
		}
	}
	return out
}

// Order is the line the ready keys wait in, under the queue's lock: Push a
// key that became ready, Touch one added again, Pop the next (when Len > 0);
// Peek is the next max keys Pop would hand out. The default is FIFO.
type Order interface {
	Push(key string)
	Touch(key string)
	Pop() string
	Len() int
	Peek(max int) []string
}

// FIFO is the default Order: keys in the order they became ready.
type FIFO struct {
	keys []string
	buf  []string // the whole backing array, for reuse once drained
}

func (f *FIFO) Push(key string) {
	n := cap(f.keys)
	f.keys = append(f.keys, key)
	if cap(f.keys) != n { // a new array
		f.buf = f.keys
	}
}

func (f *FIFO) Touch(string) {}

func (f *FIFO) Pop() string {
	key := f.keys[0]
	f.keys[0] = ""
	f.keys = f.keys[1:]
	if len(f.keys) == 0 {
		if cap(f.buf) > burstKeys {
			f.buf = nil
		}
		f.keys = f.buf[:0]
	}
	return key
}

func (f *FIFO) Len() int { return len(f.keys) }

func (f *FIFO) Peek(max int) []string { return slices.Clone(f.keys[:min(max, len(f.keys))]) }

// New returns a FIFO queue whose retries follow limiter (DefaultRateLimiter
// if nil).
func New(limiter RateLimiter) *Queue { return NewOrdered(limiter, &FIFO{}) }

// NewOrdered is New with the ready keys in order.
func NewOrdered(limiter RateLimiter, order Order) *Queue {
	if limiter == nil {
		limiter = DefaultRateLimiter()
	}
	q := &Queue{
		limiter:    limiter,
		order:      order,
		dirty:      map[string]struct{}{},
		processing: map[string]struct{}{},
		waiting:    map[string]*delayed{},
		dirtySince: map[string]time.Time{},
	}
	q.ready = sync.NewCond(&q.mu)
	return q
}

// Add marks key as needing processing. It is a no-op after ShutDown.
func (q *Queue) Add(key string) {
	q.mu.Lock()
	deduped := q.addLocked(key)
	q.mu.Unlock()
	if q.Observer != nil {
		q.Observer.Observe(Added{Key: key, Deduped: deduped})
	}
}

// addLocked reports whether the add was absorbed by an earlier one.
func (q *Queue) addLocked(key string) (deduped bool) {
	if q.shutdown {
		return true
	}
	_, busy := q.processing[key]
	if _, ok := q.dirty[key]; ok {
		if !busy {
			q.order.Touch(key)
		}
		return true
	}
	q.dirty[key] = struct{}{}
	q.dirtyPeak = max(q.dirtyPeak, len(q.dirty))
	if q.Observer != nil {
		q.dirtySince[key] = time.Now()
	}
	if busy {
		return false // Done will queue it
	}
	q.push(key)
	return false
}

// push makes key ready and wakes a worker.
func (q *Queue) push(key string) {
	q.order.Push(key)
	q.ready.Signal()
}

// AddAfter adds key once d has passed; of two schedules, the earlier wins.
func (q *Queue) AddAfter(key string, d time.Duration) {
	if d <= 0 {
		q.Add(key)
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.shutdown {
		return
	}
	at := time.Now().Add(d)
	if w, ok := q.waiting[key]; ok {
		if !w.at.After(at) {
			return
		}
		w.timer.Stop()
		heap.Remove(&q.due, w.index)
	}
	w := &delayed{key: key, at: at}
	w.timer = time.AfterFunc(d, func() {
		q.mu.Lock()
		if q.waiting[key] != w { // replaced by an earlier AddAfter, or shut down
			q.mu.Unlock()
			return
		}
		q.undelay(w)
		q.mu.Unlock()
		q.Add(key)
	})
	q.waiting[key] = w
	heap.Push(&q.due, w)
}

// undelay drops w, whose time has come, from the delayed keys.
func (q *Queue) undelay(w *delayed) {
	delete(q.waiting, w.key)
	heap.Remove(&q.due, w.index)
	if len(q.waiting) == 0 && cap(q.due.byDue) > burstKeys {
		q.waiting, q.due = map[string]*delayed{}, dueHeap{}
	}
}

// AddRateLimited re-adds key after the delay its rate limiter gives it, and
// returns that delay.
func (q *Queue) AddRateLimited(key string) time.Duration {
	d := q.limiter.When(key)
	q.AddAfter(key, d)
	return d
}

// Forget clears key's retry history (call it when key succeeded).
func (q *Queue) Forget(key string) { q.limiter.Forget(key) }

// Retries is how many rate-limited retries key had since its last Forget.
func (q *Queue) Retries(key string) int { return q.limiter.Retries(key) }

// Get blocks until a key is ready and hands it out; the caller calls
// Done(key) when finished, and stops on shutdown.
func (q *Queue) Get() (key string, shutdown bool) {
	q.mu.Lock()
	for q.order.Len() == 0 && !q.shutdown {
		q.ready.Wait()
	}
	if q.shutdown {
		q.mu.Unlock()
		return "", true
	}
	key = q.order.Pop()
	q.processing[key] = struct{}{}
	q.processingPeak = max(q.processingPeak, len(q.processing))
	delete(q.dirty, key)
	since, timed := q.dirtySince[key]
	delete(q.dirtySince, key)
	// After a burst, start afresh (burstKeys).
	if len(q.dirty) == 0 && q.dirtyPeak > burstKeys {
		q.dirty, q.dirtySince, q.dirtyPeak = map[string]struct{}{}, map[string]time.Time{}, 0
	}
	q.mu.Unlock()
	if timed && q.Observer != nil {
		q.Observer.Observe(Got{Key: key, Waited: time.Since(since)})
	}
	return key, false
}

// Done ends the processing of key; if key was added meanwhile, it goes
// back to the queue. A second Done does nothing.
func (q *Queue) Done(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, ok := q.processing[key]; !ok {
		return
	}
	delete(q.processing, key)
	if _, again := q.dirty[key]; again && !q.shutdown {
		q.push(key)
	}
	if len(q.processing) == 0 && q.processingPeak > burstKeys {
		q.processing, q.processingPeak = map[string]struct{}{}, 0 // as in Get
	}
}

// ShutDown stops the queue: adds are ignored, delayed adds cancelled, and
// every Get returns shutdown=true. Keys handed out stay valid until Done.
func (q *Queue) ShutDown() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.shutdown = true
	for key, w := range q.waiting {
		w.timer.Stop()
		delete(q.waiting, key)
	}
	q.due = dueHeap{}
	q.ready.Broadcast()
}

// Len is the number of keys ready to be handed out.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.order.Len()
}

// Pending is the number of keys scheduled by AddAfter and not yet added.
func (q *Queue) Pending() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiting)
}

// Snapshot is what the queue holds at one moment (for the live page): at
// most max keys of each kind, with the full counts: Ready in the order Get
// hands them out, Delayed soonest first, Processing those workers hold.
type Snapshot struct {
	Ready                []string
	Delayed              []DelayedKey
	Processing           []string
	ReadyLen, DelayedLen int
}

// DelayedKey is a key that will be added at Due, after Retries rate-limited
// retries.
type DelayedKey struct {
	Key     string
	Due     time.Time
	Retries int
}

// Snapshot copies at most max keys of each kind, reading about 2·max
// entries under the lock however many keys the queue holds.
func (q *Queue) Snapshot(max int) Snapshot {
	if max < 0 {
		max = 0
	}
	q.mu.Lock()
	s := Snapshot{ReadyLen: q.order.Len(), DelayedLen: len(q.waiting), Ready: q.order.Peek(max)}
	s.Delayed = q.due.soonest(max)
	for key := range q.processing {
		if len(s.Processing) >= max {
			break
		}
		s.Processing = append(s.Processing, key)
	}
	q.mu.Unlock()
	for i := range s.Delayed {
		s.Delayed[i].Retries = q.limiter.Retries(s.Delayed[i].Key)
	}
	sort.Strings(s.Processing)
	return s
}
