package ring

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes/fake"

	"rawwatch/shard"
)

// The ring model: three real Members (their fence, their liveness tracker,
// their steps: update, fenceIfPast, beforeRenew, extend, sight and the
// gate's Admits, the very code Run and the app run) whose I/O is replaced by
// events on one virtual clock, deterministic by seed. Each schedule
// generates the inputs that split brains came from:
//
//   - members paused (SIGSTOP, a VM paused, a GC storm) for up to three
//     lease durations: none of their events runs meanwhile, and on resume
//     the ones that came due run in a random order, each up to 300 ms late
//     (Run's select, the fence timer's goroutine, a request's answer: the
//     goroutines come back one by one); the monotonic clock runs on;
//   - Leases deleted by hand, their owners' re-creates failing (500s) for a
//     while;
//   - Lease requests that answer late, fail, or hang to their timeouts
//     (bounded by the fence deadline, as request does), writes that land
//     at any instant of a request's flight, or after it timed out, or never;
//     a list reads the Leases at any instant of its flight;
//   - the fence timer's goroutine scheduled up to 500 ms late;
//   - clocks skewed: every member's readings are off by up to ±30 s (no rule
//     compares them across members, so this must change nothing);
//   - a clean leave (claims dropped, the Lease marked leaving, a renew
//     period, the Lease deleted; the mark's write may fail);
//   - the gate read at any instant: the invariant is checked after every
//     event, on each member's own clock. (The watcher's Coverage, which the
//     app publishes on the Lease, is taken as published atomically: the
//     model's covers are all slots.)
//
// The invariant: at no instant may two members admit a reconcile of one
// slot (ring.Admits: Working, and before the fence deadline, on the gate's
// clock). A member that still holds Working past its deadline (frozen, or
// its fence timer late) admits nothing, so it does not count.
//
// What the model leaves out: reconciles in flight when a fence strikes
// (cancelled by the gate, but a paused process resumes them for a moment:
// see docs/sharding.md), the sweep and custody (handoff_test.go's model
// plays them), and clocks that run at different rates.

const (
	modelLease = 4500 * time.Millisecond
	modelRenew = time.Second
	modelRun   = 30 * time.Second
)

var modelBase = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type modelLeaseObj struct {
	rv              int
	claims, pending shard.SlotSet
	leaving         bool
}

type modelMember struct {
	id     string
	m      *Member
	skew   time.Duration
	start  time.Duration
	paused time.Duration // until then (virtual), its events wait
	left   bool          // its loop stopped: it is leaving
	wrote  bool          // it wrote its Lease once (Member.wrote)
	gone   bool          // left
	// the gate: claims (OnClaims) and the deadline (OnDeadline)
	gate  Claims
	until time.Time
	// the round in progress
	renewOK    bool
	createFail time.Duration // its creates fail until then
	roundStart time.Duration
}

type modelEvent struct {
	at     time.Duration
	seq    int
	member *modelMember // nil: the server's
	run    func()
}

type modelQueue []*modelEvent

func (q modelQueue) Len() int { return len(q) }
func (q modelQueue) Less(i, j int) bool {
	return q[i].at < q[j].at || q[i].at == q[j].at && q[i].seq < q[j].seq
}
func (q modelQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *modelQueue) Push(x any)   { *q = append(*q, x.(*modelEvent)) }
func (q *modelQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

type model struct {
	rng    *rand.Rand
	now    time.Duration
	q      modelQueue
	seq    int
	leases map[string]*modelLeaseObj
	rv     int
	ms     []*modelMember
	log    []string // what happened, for a failure's report
}

func (w *model) at(d time.Duration, mm *modelMember, run func()) {
	w.seq++
	heap.Push(&w.q, &modelEvent{at: max(d, w.now), seq: w.seq + w.rng.IntN(3), member: mm, run: run})
}

func (w *model) note(format string, args ...any) {
	if !verbose {
		return
	}
	if len(w.log) > 400 {
		w.log = w.log[1:]
	}
	w.log = append(w.log, fmt.Sprintf("%8s ", w.now)+fmt.Sprintf(format, args...))
}

func (w *model) ms2(lo, hi int) time.Duration {
	return time.Duration(lo+w.rng.IntN(hi-lo+1)) * time.Millisecond
}

// runModel plays one schedule; it returns a description of the first
// violation, or "".
func runModel(seed uint64) string {
	w := &model{rng: rand.New(rand.NewPCG(seed, 19)), leases: map[string]*modelLeaseObj{}}
	log := logr.Discard()
	for _, id := range []string{"a", "b", "c"} {
		mm := &modelMember{id: id, start: w.ms2(0, 2000)}
		if w.rng.IntN(3) == 0 {
			mm.skew = w.ms2(0, 60000) - 30*time.Second
		}
		m, err := New(Config{Client: fake.NewSimpleClientset(), Namespace: "ns", Ring: "r", Identity: id,
			LeaseDuration: modelLease, RenewPeriod: modelRenew,
			Now: func() time.Time { return modelBase.Add(w.now + mm.skew) },
			OnClaims: func(c Claims) {
				if c.Working != mm.gate.Working {
					w.note("%s works %d slots (was %d)", mm.id, c.Working.Len(), mm.gate.Working.Len())
				}
				mm.gate = c
			},
			Busy: func() (busy, _ shard.SlotSet) {
				if w.rng.IntN(3) == 0 { // reconciles in flight hold a Releasing slot a while
					busy = mm.gate.Releasing
				}
				return
			},
			OnDeadline: func(until time.Time) {
				mm.until = until
				w.note("%s deadline %s", mm.id, until.Sub(modelBase)-mm.skew)
				if !until.IsZero() { // the fence timer's goroutine, maybe late
					w.at(until.Sub(modelBase)-mm.skew+w.ms2(0, 500), mm, func() { mm.m.fenceIfPast(log) })
				}
			}})
		if err != nil {
			panic(err)
		}
		mm.m = m
		w.ms = append(w.ms, mm)
		w.at(mm.start, mm, func() { w.round(mm) })
	}
	// The inputs, at random instants.
	for range w.rng.IntN(3) {
		mm := w.ms[w.rng.IntN(len(w.ms))]
		w.at(w.ms2(3000, int(modelRun/time.Millisecond)), nil, func() {
			d := w.ms2(int(modelLease/time.Millisecond)/2, 3*int(modelLease/time.Millisecond))
			mm.paused = max(mm.paused, w.now+d)
			w.note("%s paused for %s", mm.id, d)
		})
	}
	for range w.rng.IntN(3) {
		mm := w.ms[w.rng.IntN(len(w.ms))]
		w.at(w.ms2(3000, int(modelRun/time.Millisecond)), nil, func() {
			if _, ok := w.leases[mm.id]; ok {
				delete(w.leases, mm.id)
				mm.createFail = w.now + w.ms2(0, 2*int(modelLease/time.Millisecond))
				w.note("%s's Lease deleted by hand; its creates fail until %s", mm.id, mm.createFail)
			}
		})
	}
	if w.rng.IntN(3) == 0 {
		mm := w.ms[w.rng.IntN(len(w.ms))]
		w.at(w.ms2(5000, int(modelRun/time.Millisecond)), mm, func() { w.leave(mm) })
	}
	for w.q.Len() > 0 {
		e := heap.Pop(&w.q).(*modelEvent)
		if e.at > modelRun {
			break
		}
		w.now = e.at
		if mm := e.member; mm != nil {
			if mm.gone {
				continue
			}
			if mm.paused > w.now { // frozen: it runs on resume, in a random order, its goroutines scheduled up to 300 ms late
				w.seq++
				heap.Push(&w.q, &modelEvent{at: mm.paused + w.ms2(0, 300), seq: w.seq + w.rng.IntN(1000), member: mm, run: e.run})
				continue
			}
		}
		e.run()
		if v := w.check(); v != "" {
			if verbose {
				return v + "\n" + strings.Join(w.log, "\n")
			}
			return v
		}
	}
	return ""
}

// verbose: a violation comes with what happened before it.
var verbose, debugSeen = false, false

// check is the invariant, at this instant.
func (w *model) check() string {
	for i, a := range w.ms {
		for _, b := range w.ms[i+1:] {
			if a.gone || b.gone {
				continue
			}
			both := w.admits(a).And(w.admits(b))
			if !both.Empty() {
				return fmt.Sprintf("at %s %s and %s both admit reconciles in %d slots (%v)", w.now, a.id, b.id, both.Len(), both)
			}
		}
	}
	return ""
}

func (w *model) admits(mm *modelMember) shard.SlotSet {
	if gateClock && !mm.m.Now().Before(mm.until) { // Admits, for every slot at once
		return shard.SlotSet{}
	}
	return mm.gate.Working
}

// request is one Lease request's flight: when its answer comes, whether it
// succeeds, and when (if ever) a write it makes lands.
func (w *model) request(mm *modelMember) (answer time.Duration, ok bool, lands time.Duration) {
	timeout := modelRenew // as Member.request bounds it
	now := mm.m.Now()
	mm.m.mu.Lock()
	if !mm.m.renewed.IsZero() {
		if left := mm.m.renewed.Add(mm.m.fenceAfter()).Sub(now); left > 0 {
			timeout = min(timeout, left)
		}
	}
	mm.m.mu.Unlock()
	switch r := w.rng.IntN(20); {
	case r < 14: // answered
		lat := w.ms2(1, 400)
		if lat >= timeout {
			return w.now + timeout, false, w.now + lat
		}
		return w.now + lat, true, w.now + w.ms2(0, int(lat/time.Millisecond))
	case r < 16: // refused (500)
		return w.now + w.ms2(1, 50), false, -1
	default: // hangs to its timeout; its write lands late, or never
		lands := time.Duration(-1)
		if w.rng.IntN(2) == 0 {
			lands = w.now + w.ms2(0, int((timeout+time.Second)/time.Millisecond))
		}
		return w.now + timeout, false, lands
	}
}

// round is Member.round with the I/O as events: beforeRenew, the renewal,
// extend, the list (sight), update.
func (w *model) round(mm *modelMember) {
	m := mm.m
	if mm.left {
		return
	}
	mm.roundStart = w.now
	m.beforeRenew(logr.Discard())
	sent := m.Now()
	c := m.Claims()
	claimed, pending := c.Claimed(), c.Pending
	answer, ok, lands := w.request(mm)
	_, exists := w.leases[mm.id]
	deleted := false
	if !exists && mm.wrote { // Member.renew: errLeaseDeleted
		deleted, ok, lands = ok, false, -1 // known if the GET was answered
	}
	if !exists && w.now < mm.createFail {
		ok, lands = false, -1
	}
	w.note("%s renews claiming %d, answer at %s ok=%v, lands at %s", mm.id, claimed.Len(), answer, ok, lands)
	found := true
	if lands >= 0 {
		w.at(lands, nil, func() {
			l := w.leases[mm.id]
			if l == nil {
				if exists { // deleted meanwhile: an update finds nothing
					found = false
					return
				}
				l = &modelLeaseObj{}
				w.leases[mm.id] = l
			}
			w.rv++
			l.rv, l.claims, l.pending, l.leaving = w.rv, claimed, pending, false
		})
	}
	w.at(answer, mm, func() {
		if mm.left {
			return
		}
		ok = ok && found
		mm.renewOK = ok
		mm.wrote = mm.wrote || ok
		if ok {
			m.wrote = sent // as Member.renew: afterLook reads it
		}
		if deleted { // and re-created at the next turn
			mm.wrote = false
			m.wrote = time.Time{}
			m.lostLease()
			m.setRenewed(time.Time{})
			m.fenceIfPast(logr.Discard())
		}
		if ok {
			m.wroteLease()
			m.published = claimed
			m.extend(logr.Discard(), sent)
		}
		w.list(mm)
	})
}

func (w *model) list(mm *modelMember) {
	m := mm.m
	answer, ok, _ := w.request(mm)
	read := w.now + w.ms2(0, int((answer-w.now)/time.Millisecond))
	listed := map[string]observed{}
	own := false
	w.at(read, nil, func() {
		_, own = w.leases[mm.id]
		for id, l := range w.leases {
			if id != mm.id {
				listed[id] = observed{rv: strconv.Itoa(l.rv), claims: l.claims, pending: l.pending, leaving: l.leaving}
			}
		}
	})
	w.at(answer, mm, func() {
		if mm.left {
			return
		}
		m.lookOK = ok
		if ok {
			now := m.cfg.Now()
			m.mu.Lock()
			m.sighted(listed, now)
			m.mu.Unlock()
			m.looks++
		}
		m.ownSeen = own
		m.afterLook(logr.Discard(), mm.renewOK)
		m.update(logr.Discard())
		w.note("%s listed (ok=%v, read at %s): members %v", mm.id, ok, read, m.Members())
		if debugSeen {
			for id, o := range m.seen {
				w.note("   %s sees %s: rv %s at %s gone %v leaving %v claims %d", mm.id, id, o.rv, o.at.Sub(modelBase)-mm.skew, o.gone, o.leaving, o.claims.Len())
			}
		}
		w.at(max(w.now, mm.roundStart+modelRenew), mm, func() { w.round(mm) })
	})
}

// leave is Member.leave with the I/O as events.
func (w *model) leave(mm *modelMember) {
	m := mm.m
	mm.left = true
	m.setRenewed(time.Time{})
	m.mu.Lock()
	m.claims = Claims{}
	m.mu.Unlock()
	m.cfg.OnClaims(Claims{})
	w.note("%s leaves", mm.id)
	del := func() {
		w.at(w.now+w.ms2(1, 200), nil, func() { delete(w.leases, mm.id) })
		mm.gone = true
	}
	if w.rng.IntN(10) == 0 { // the mark is not written
		del()
		return
	}
	w.at(w.now+w.ms2(1, 200), nil, func() {
		if l := w.leases[mm.id]; l != nil {
			w.rv++
			l.rv, l.claims, l.pending, l.leaving = w.rv, shard.SlotSet{}, shard.SlotSet{}, true
		}
	})
	w.at(w.now+200*time.Millisecond+modelRenew, mm, del)
}

// modelSchedules plays n schedules from seed 0; it returns the first
// violation found.
func modelSchedules(n int) (seed uint64, violation string) {
	memo := map[string]map[string][]int{}
	assignSlots = func(members []string) map[string][]int {
		k := strings.Join(members, ",")
		if a, ok := memo[k]; ok {
			return a
		}
		memo[k] = shard.Assign(members)
		return memo[k]
	}
	defer func() { assignSlots = shard.Assign }()
	for seed := range uint64(n) {
		if v := runModel(seed); v != "" {
			return seed, v
		}
	}
	return 0, ""
}

func modelCount(t *testing.T) int {
	if testing.Short() {
		return 2000
	}
	return 10000
}

// TestTheRingModelNeverAdmitsTwice plays the ring model's schedules and
// requires none to let two members admit one slot at any instant.
func TestTheRingModelNeverAdmitsTwice(t *testing.T) {
	n := modelCount(t)
	start := time.Now()
	if seed, v := modelSchedules(n); v != "" {
		verbose = true
		defer func() { verbose = false }()
		t.Fatalf("seed %d: %s", seed, runModel(seed))
	}
	t.Logf("%d schedules of %s (virtual) in %s", n, modelRun, time.Since(start).Round(time.Millisecond))
}

// Each rule, broken on purpose, must make the model fail: else the model
// does not see the input the rule is for.
func TestTheRingModelFailsWithoutEachRule(t *testing.T) {
	for _, rule := range []struct {
		name string
		v    *bool
	}{
		{"a member past its fence fences before it renews (fenceFirst)", &fenceFirst},
		{"the gate admits nothing past the fence deadline (gateClock)", &gateClock},
		{"a Lease that vanished unmarked stays live for its lease (vanishedLive)", &vanishedLive},
	} {
		t.Run(rule.name, func(t *testing.T) {
			*rule.v = false
			defer func() { *rule.v = true }()
			seed, v := modelSchedules(modelCount(t))
			if v == "" {
				t.Fatalf("with the rule broken, no schedule failed")
			}
			t.Logf("broken, it fails: seed %d: %s", seed, v)
		})
	}
}
