package queue

import (
	"container/heap"
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

func (Added) Component() string { return "queue" }
func (Got) Component() string   { return "queue" }

// Queue is a work queue of keys with the guarantees controllers rely on:
//
//   - dedup: a key waiting in the queue is there once, however often it is added;
//   - exclusivity: between Get and Done a key belongs to one worker; adding it
//     meanwhile marks it dirty, and Done puts it back for exactly one more run;
//   - fairness: keys come out in the order they first became dirty, those
//     added by AddFirst (deletions) before all others;
//   - retries: AddRateLimited re-adds a key after its RateLimiter delay, and
//     Forget resets that delay once the key succeeds;
//   - shutdown: ShutDown makes Get return shutdown=true at once; workers finish
//     the key they hold, and delayed adds are dropped.
//
// The zero value is not usable; call New.
type Queue struct {
	limiter RateLimiter
	// Observer, when set before use, hears an Added for every add (deduped
	// or not) and a Got for every key Get hands out, with how long it waited
	// since the add that made it dirty: the queue latency. Only the queue
	// can measure that exactly, because only it knows, under its lock, when
	// a key became dirty. It is called without the lock held.
	Observer observe.Observer

	mu sync.Mutex
	// ready wakes workers blocked in Get.
	ready *sync.Cond
	// order holds the dirty keys Add queued that are not being processed,
	// oldest first; first, those AddFirst queued, handed out before order's.
	order, first lane
	// dirty: keys that need processing (waiting, or being processed and to
	// be re-queued by Done); the value is the sequence number of the key's
	// entry in order, 0 if it has none (in first, or being processed): an
	// entry of order whose number is not its key's is stale (AddFirst moved
	// the key) and skipped.
	dirty map[string]uint64
	seq   uint64
	// inOrder is how many of order's entries are not stale.
	inOrder int
	// urgent: the dirty keys added by AddFirst (in first, or being
	// processed: Done puts them in first).
	urgent map[string]struct{}
	// processing: keys handed out by Get and not yet Done.
	processing map[string]struct{}
	// waiting: keys scheduled by AddAfter, with the timer that will add
	// them; due holds the same, soonest first (a heap), for Snapshot.
	waiting map[string]*delayed
	due     dueHeap
	// dirtySince: when each dirty key was added (kept only with an Observer).
	dirtySince map[string]time.Time
	// dirtyPeak and processingPeak are the most keys dirty, and processing,
	// since those maps were last made: whether a burst grew them.
	dirtyPeak, processingPeak int
	shutdown                  bool
}

// burstKeys is what a burst is: a queue drained after more keys than this
// drops its maps and its order's array, which keep their size in Go. Smaller
// ones are kept for the next keys: made afresh at every drain, as a queue
// that gets one key at a time drains at every key, each would allocate again
// for that key.
const burstKeys = 64

type delayed struct {
	key   string
	at    time.Time
	timer *time.Timer
	first bool // added by AddFirst when due
	index int  // in due
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

// dueHeap is the delayed keys as a heap by due time (client-go's delaying
// queue keeps one too), each knowing its place, so that one replaced or
// fired leaves in O(log n), and the soonest are found without reading all
// (soonest).
type dueHeap struct{ byDue }

func (h dueHeap) Swap(i, j int) {
	h.byDue.Swap(i, j)
	h.byDue[i].index, h.byDue[j].index = i, j
}

func (h *dueHeap) Push(x any) {
	x.(*delayed).index = len(h.byDue)
	h.byDue.Push(x)
}

// soonest returns the max soonest keys, soonest first, reading about
// 2·max of the heap's entries: the soonest is the root, and each next one
// a child of one already taken.
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

// lane is a line of keys: Get takes them from its front; buf is the whole
// backing array, for reuse once the lane drains.
type lane struct {
	keys []entry
	buf  []entry
}

type entry struct {
	key string
	seq uint64 // in order: the key's number in dirty when queued
}

func (l *lane) push(e entry) {
	n := cap(l.keys)
	l.keys = append(l.keys, e)
	if cap(l.keys) != n { // a new array
		l.buf = l.keys
	}
}

func (l *lane) pop() entry {
	e := l.keys[0]
	l.keys[0] = entry{}
	l.keys = l.keys[1:]
	return e
}

// reset empties the lane; after a burst (burstKeys) it drops its array.
func (l *lane) reset() {
	if cap(l.buf) > burstKeys {
		l.buf = nil
	}
	clear(l.keys)
	l.keys = l.buf[:0]
}

// New returns a queue whose retries follow limiter (DefaultRateLimiter if nil).
func New(limiter RateLimiter) *Queue {
	if limiter == nil {
		limiter = DefaultRateLimiter()
	}
	q := &Queue{
		limiter:    limiter,
		dirty:      map[string]uint64{},
		urgent:     map[string]struct{}{},
		processing: map[string]struct{}{},
		waiting:    map[string]*delayed{},
		dirtySince: map[string]time.Time{},
	}
	q.ready = sync.NewCond(&q.mu)
	return q
}

// Add marks key as needing processing. It is a no-op after ShutDown.
func (q *Queue) Add(key string) { q.add(key, false) }

// add is Add, or with first AddFirst.
func (q *Queue) add(key string, first bool) {
	q.mu.Lock()
	var deduped bool
	if first {
		deduped = q.addFirstLocked(key)
	} else {
		deduped = q.addLocked(key)
	}
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
	if _, ok := q.dirty[key]; ok {
		return true
	}
	q.markDirty(key)
	if _, busy := q.processing[key]; busy {
		return false // Done will queue it
	}
	q.push(key)
	return false
}

func (q *Queue) markDirty(key string) {
	q.dirty[key] = 0
	q.dirtyPeak = max(q.dirtyPeak, len(q.dirty))
	if q.Observer != nil {
		q.dirtySince[key] = time.Now()
	}
}

// push puts key at the end of its line (first if urgent, else order) and
// wakes a worker.
func (q *Queue) push(key string) {
	if _, ok := q.urgent[key]; ok {
		q.first.push(entry{key: key})
	} else {
		q.seq++
		q.dirty[key] = q.seq
		q.order.push(entry{key: key, seq: q.seq})
		q.inOrder++
	}
	q.ready.Signal()
}

// AddFirst marks key as needing processing ahead of every key Add queued:
// behind the keys AddFirst queued before it, before all others (moved there
// if Add had queued it: in constant time, its entry in order left stale). A
// controller gives it the deletions: a change a worker reaches late is
// still read from the store, but a deletion a sharded replica does not
// reach before its slot moves (a fence, a handoff) is heard of by no
// replica. A key Add queued waits behind at most the AddFirst keys added
// while it waits, and those being processed when it was queued (they come
// back first after Done). A no-op after ShutDown.
func (q *Queue) AddFirst(key string) { q.add(key, true) }

func (q *Queue) addFirstLocked(key string) (deduped bool) {
	if q.shutdown {
		return true
	}
	if _, ok := q.urgent[key]; ok {
		return true
	}
	q.urgent[key] = struct{}{}
	seq, dirty := q.dirty[key]
	if !dirty {
		q.markDirty(key)
	}
	if _, busy := q.processing[key]; busy {
		return dirty // Done will queue it, first
	}
	if seq != 0 { // waiting in order: its entry there goes stale
		q.dirty[key] = 0
		q.inOrder--
		if len(q.order.keys) > 2*q.inOrder+burstKeys {
			q.compactOrder()
		}
	}
	q.push(key)
	return dirty
}

// compactOrder drops order's stale entries, keeping the live ones in their
// order: called once they outnumber the live ones (and a burst's worth),
// so that order holds at most about twice the keys waiting in it, however
// many AddFirst moved, at a cost spread over the moves.
func (q *Queue) compactOrder() {
	live := q.order.keys[:0]
	for _, e := range q.order.keys {
		if e.seq != 0 && q.dirty[e.key] == e.seq {
			live = append(live, e)
		}
	}
	clear(q.order.keys[len(live):])
	q.order.keys = live
}

// AddAfter adds key once d has passed. If key is already scheduled, the
// earlier of the two times wins.
func (q *Queue) AddAfter(key string, d time.Duration) { q.addAfter(key, d, false) }

// AddFirstAfter adds key by AddFirst once d has passed (a failed deletion's
// retry), as AddAfter does; scheduled both ways, the key is added first.
func (q *Queue) AddFirstAfter(key string, d time.Duration) { q.addAfter(key, d, true) }

func (q *Queue) addAfter(key string, d time.Duration, first bool) {
	if d <= 0 {
		q.add(key, first)
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.shutdown {
		return
	}
	at := time.Now().Add(d)
	if w, ok := q.waiting[key]; ok {
		first = first || w.first
		if !w.at.After(at) {
			w.first = first
			return
		}
		w.timer.Stop()
		heap.Remove(&q.due, w.index)
	}
	w := &delayed{key: key, at: at, first: first}
	w.timer = time.AfterFunc(d, func() {
		q.mu.Lock()
		if q.waiting[key] != w { // replaced by an earlier AddAfter, or shut down
			q.mu.Unlock()
			return
		}
		q.undelay(w)
		first := w.first
		q.mu.Unlock()
		q.add(key, first)
	})
	q.waiting[key] = w
	heap.Push(&q.due, w)
}

// undelay drops w, whose time has come, from the delayed keys; when none
// is left after a burst (burstKeys), their map and heap are made afresh.
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

// AddFirstRateLimited is AddRateLimited by AddFirst (AddFirstAfter).
func (q *Queue) AddFirstRateLimited(key string) time.Duration {
	d := q.limiter.When(key)
	q.AddFirstAfter(key, d)
	return d
}

// Forget clears key's retry history (call it when key succeeded).
func (q *Queue) Forget(key string) { q.limiter.Forget(key) }

// Retries is how many rate-limited retries key had since its last Forget.
func (q *Queue) Retries(key string) int { return q.limiter.Retries(key) }

// Get blocks until a key is ready and hands it to the caller, who must call
// Done(key) when finished. shutdown is true once ShutDown was called: the
// caller should stop.
func (q *Queue) Get() (key string, shutdown bool) {
	q.mu.Lock()
	for len(q.first.keys)+q.inOrder == 0 && !q.shutdown {
		q.ready.Wait()
	}
	if q.shutdown {
		q.mu.Unlock()
		return "", true
	}
	if len(q.first.keys) > 0 {
		key = q.first.pop().key
		delete(q.urgent, key)
	} else {
		for {
			if e := q.order.pop(); e.seq != 0 && q.dirty[e.key] == e.seq { // not stale
				key = e.key
				q.inOrder--
				break
			}
		}
	}
	q.processing[key] = struct{}{}
	q.processingPeak = max(q.processingPeak, len(q.processing))
	delete(q.dirty, key)
	since, timed := q.dirtySince[key]
	delete(q.dirtySince, key)
	// Go maps and slices keep their size after a burst: a queue that once
	// held every key of a 10,000-object list would keep that memory for
	// ever. Start afresh when the queue drains after a burst (burstKeys).
	if q.inOrder == 0 { // (stale entries go too)
		q.order.reset()
	}
	if len(q.first.keys) == 0 {
		q.first.reset()
	}
	if len(q.dirty) == 0 && q.dirtyPeak > burstKeys {
		q.dirty, q.dirtySince, q.urgent, q.dirtyPeak = map[string]uint64{}, map[string]time.Time{}, map[string]struct{}{}, 0
	}
	q.mu.Unlock()
	if timed && q.Observer != nil {
		q.Observer.Observe(Got{Key: key, Waited: time.Since(since)})
	}
	return key, false
}

// Done ends the processing of key. If key was added while it was being
// processed, it goes back to the queue now. Done of a key not being
// processed (a second Done) does nothing.
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

// ShutDown stops the queue: adds are ignored, delayed adds are cancelled, and
// every Get returns shutdown=true. Keys already handed out stay valid until
// their Done (the owner of the workers waits for them: Controller.Run does).
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

// Len is the number of keys ready to be handed out (not counting keys being
// processed or waiting for a delay).
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.first.keys) + q.inOrder
}

// Pending is the number of keys scheduled by AddAfter and not yet added.
func (q *Queue) Pending() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiting)
}

// Snapshot is what the queue holds at one moment, for a view of it (the live
// page): at most max keys of each kind, with the full counts.
type Snapshot struct {
	// Ready are keys waiting for a worker, in the order Get hands them out
	// (Len of them).
	Ready []string
	// Delayed are keys waiting out a delay, soonest first (Pending of them).
	Delayed []DelayedKey
	// Processing are keys a worker holds.
	Processing           []string
	ReadyLen, DelayedLen int
}

// DelayedKey is a key that will be added at Due; Retries is how many
// rate-limited retries it had (0 for a plain AddAfter).
type DelayedKey struct {
	Key     string
	Due     time.Time
	Retries int
}

// Snapshot copies at most max keys of each kind. Under the queue's lock (the
// lock Add, Get and Done take) it reads about 2·max entries of each kind and
// the counts, however many keys the queue holds: a view that calls it
// often does not slow the workers. Ready may show fewer than max keys when
// AddFirst moved many keys queued before them (their stale entries are
// read too, at most 2·max+64 entries of order).
func (q *Queue) Snapshot(max int) Snapshot {
	if max < 0 {
		max = 0
	}
	q.mu.Lock()
	s := Snapshot{ReadyLen: len(q.first.keys) + q.inOrder, DelayedLen: len(q.waiting)}
	for _, e := range q.first.keys[:min(max, len(q.first.keys))] {
		s.Ready = append(s.Ready, e.key)
	}
	for _, e := range q.order.keys[:min(2*max+burstKeys, len(q.order.keys))] {
		if len(s.Ready) >= max {
			break
		}
		if q.dirty[e.key] == e.seq && e.seq != 0 {
			s.Ready = append(s.Ready, e.key)
		}
	}
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
