package ring

import (
	"container/heap"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"

	"rawwatch/shard"
)

// The ring model: real Members (their fence, their liveness tracker,
// their steps: renewal, update, fenceIfPast, beforeRenew, extend, the
// reading of a list, sight, the leave's mark and wait, the collection of
// dead Leases and the gate's Admits, the very code Run and the app run)
// whose I/O is replaced by events on one virtual clock, deterministic by
// seed, against a server that stores real Lease objects (resourceVersions,
// conflicts, NotFound). Each schedule generates the inputs that split
// brains came from:
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
//     at any instant of a request's flight, or after it timed out, or never
//     (an update whose Lease moved since its GET conflicts); a list reads
//     the Leases at any instant of its flight;
//   - the fence timer's goroutine scheduled up to 500 ms late;
//   - clocks skewed: every member's readings are off by up to ±30 s (no rule
//     compares them across members, so this must change nothing);
//   - a clean leave (claims dropped, the Lease marked leaving, a renew
//     period, the Lease deleted; the mark's write may fail), half of them
//     after a drain (Member.Drain: the slots handed over first, until
//     Drained or 20 s);
//   - the gate read at any instant: the invariant is checked after every
//     event, on each member's own clock.
//
// Each seed plays those; every fourth seed also plays them with the wider
// inputs (runModel's wide, modelWide), drawn apart (so that a seed's first
// schedule stays what it was):
//
//   - members of different lease durations (3–9 s) and renew periods
//     (0.5–3 s): a rolling update that changes the flags;
//   - a fourth member joining late, and handoffs with sweeps: each cache
//     covers what its member watches at once, each sweep is done at once;
//   - a clean leave while the member has slots given and not yet
//     confirmed (a leave during a handoff);
//   - a member cut off from the server (every request refused) for up to
//     two of its lease durations;
//   - a member killed (its Lease left behind);
//   - writes by others to the Leases: a label (once, or every second for
//     ever, as a GitOps tool), an annotation, the ring's label taken off,
//     the leaving mark written by hand, the holder cleared or set to
//     another member (also the giver's or the receiver's while a handoff
//     is under way), the lease duration shortened, or set to a day with
//     the renewTime moved on, a copy of a Lease under another name (two
//     Leases, one holder), two or up to 17 saved copies of a Lease's spec
//     re-applied in turn every second (the annotations a copy would erase
//     are out of scope: a hand that rewrites the handoff's annotations can
//     lose a gift), the Lease set back to a copy of an old leaving mark, a
//     sync that puts a Lease back from a saved copy whenever it is missing,
//     a copy saved before its holder paused most of its fence re-applied
//     over its first renewal after, the holder then cut off;
//   - a member whose lists fail (RBAC) while its renewals go through;
//   - a quiet tail after the inputs (every request answered, no pause):
//     the ring must converge (longer after a duration of a day: it is
//     believed up to leaseBelief times the observer's own).
//
// The invariants: at no instant may two members admit a reconcile of one
// slot (ring.Admits: Working, and before the fence deadline, on the gate's
// clock; a member that still holds Working past its deadline, frozen or
// its fence timer late, admits nothing); with the wider inputs, a member
// given a slot keeps watching it until it claims it (else the deletions it
// kept since the old owner's sweep are dropped), unless it was fenced or
// the gift ran out (HandoffTimeout, a leave's bound: both logged as
// losses); and after the quiet tail every slot is Working at one live
// member, and the live members agree on who they are.
//
// What the model leaves out: reconciles in flight when a fence strikes
// (cancelled by the gate, but a paused process resumes them for a moment:
// see docs/sharding.md), the watcher's lists (a cache covers what its
// member watches at once), and clocks that run at different rates.

const (
	modelLease = 4500 * time.Millisecond
	modelRenew = time.Second
	modelRun   = 30 * time.Second
)

var modelBase = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type modelMember struct {
	id     string
	m      *Member
	skew   time.Duration
	start  time.Duration
	paused time.Duration // until then (virtual), its events wait
	left   bool          // its loop stopped: it is leaving
	gone   bool          // left, or killed: no event of it runs
	killed bool
	// the gate: claims (OnClaims), the deadline (OnDeadline), what its
	// watcher watches (the last non-empty Claims.Watched)
	gate    Claims
	until   time.Time
	watched shard.SlotSet
	// the round in progress
	renewOK    bool
	createFail time.Duration // its creates fail until then
	cutUntil   time.Duration // every request of it fails until then
	// its lists fail until then (its renewals go through)
	listCutUntil time.Duration
	roundStart   time.Duration
	// wideness: leave when it has slots given, after leaveAt
	leaveAt time.Duration
	// giving: while it leaves, the slots it had given (the model's own
	// record, whatever its Lease says)
	giving shard.SlotSet
	// onLanded, once: its next renewal landed
	onLanded func()
	// drainBy: it drains (Member.Drain), and leaves once drained or then
	drainBy time.Duration
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

// gift: a slot a member let go, named to another (its Claims.Given).
type gift struct {
	from, to string
	slot     int
}

type model struct {
	rng  *rand.Rand // the inputs every schedule has
	x    *rand.Rand // the wider inputs
	wide bool
	now  time.Duration
	q    modelQueue
	seq  int
	// the server: the Leases by name, the last resourceVersion
	leases map[string]*coordinationv1.Lease
	rv     int
	wrote  map[string]time.Duration // when each Lease was last written
	ms     []*modelMember
	// quiet: from then on every request is answered at once, and no input
	// but the GitOps labeller comes; end: the schedule ends.
	quiet, end time.Duration
	gifts      map[gift]bool // open: the receiver has not claimed it yet
	// stretch: lease durations more the tail lasts (a Lease says a day:
	// it is believed leaseBelief times the observer's own; its owner takes
	// it back once it stood still that long, then claims nothing as long)
	stretch time.Duration
	log     []string // what happened, for a failure's report
}

func (w *model) at(d time.Duration, mm *modelMember, run func()) {
	w.seq++
	heap.Push(&w.q, &modelEvent{at: max(d, w.now), seq: w.seq + w.rng.IntN(3), member: mm, run: run})
}

func (w *model) note(format string, args ...any) {
	if !verbose {
		return
	}
	if len(w.log) > modelLogLines {
		w.log = w.log[1:]
	}
	w.log = append(w.log, fmt.Sprintf("%8s ", w.now)+fmt.Sprintf(format, args...))
}

func (w *model) ms2(lo, hi int) time.Duration {
	return time.Duration(lo+w.rng.IntN(hi-lo+1)) * time.Millisecond
}

func (w *model) xms(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(w.x.Int64N(int64(hi-lo)/int64(time.Millisecond)+1))*time.Millisecond
}

// The server's side.

var leasesGR = schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}

func (w *model) get(name string) (*coordinationv1.Lease, error) {
	if l, ok := w.leases[name]; ok {
		return l.DeepCopy(), nil
	}
	return nil, apierrors.NewNotFound(leasesGR, name)
}

// put creates l (create) or updates it, held to its resourceVersion.
func (w *model) put(l *coordinationv1.Lease, create bool) error {
	cur, ok := w.leases[l.Name]
	switch {
	case create && ok:
		return apierrors.NewAlreadyExists(leasesGR, l.Name)
	case !create && !ok:
		return apierrors.NewNotFound(leasesGR, l.Name)
	case !create && cur.ResourceVersion != l.ResourceVersion:
		return apierrors.NewConflict(leasesGR, l.Name, errors.New("the object has been modified"))
	}
	w.rv++
	w.wrote[l.Name] = w.now
	l = l.DeepCopy()
	l.ResourceVersion = strconv.Itoa(w.rv)
	if l.Spec.RenewTime != nil { // the server keeps microseconds
		l.Spec.RenewTime = &metav1.MicroTime{Time: l.Spec.RenewTime.Truncate(time.Microsecond)}
	}
	w.leases[l.Name] = l
	return nil
}

// del deletes the Lease name, held to resourceVersion rv ("": any).
func (w *model) del(name, rv string) error {
	cur, ok := w.leases[name]
	switch {
	case !ok:
		return apierrors.NewNotFound(leasesGR, name)
	case rv != "" && cur.ResourceVersion != rv:
		return apierrors.NewConflict(leasesGR, name, errors.New("precondition failed"))
	}
	delete(w.leases, name)
	return nil
}

// listed is what the ring's LIST returns now.
func (w *model) listed() []coordinationv1.Lease {
	var items []coordinationv1.Lease
	for _, l := range w.leases {
		if l.Labels[Label] == "r" {
			items = append(items, *l) // shares its maps: a stored Lease is never changed in place
		}
	}
	slices.SortFunc(items, func(a, b coordinationv1.Lease) int { return strings.Compare(a.Name, b.Name) })
	return items
}

// runModel plays one schedule (with the wider inputs, or not); it returns
// a description of the first violation, or "".
func runModel(seed uint64, wide bool) string {
	w := &model{rng: rand.New(rand.NewPCG(seed, 19)), x: rand.New(rand.NewPCG(seed, 23)), wide: wide,
		leases: map[string]*coordinationv1.Lease{}, wrote: map[string]time.Duration{}, gifts: map[gift]bool{}}
	w.quiet, w.end = modelRun, modelRun
	if wide {
		w.end = 1 << 62 // until the quiet tail starts
	}
	log := logr.Discard()
	ids := []string{"a", "b", "c"}
	if w.wide {
		ids = append(ids, "d") // joins late: handoffs
	}
	for _, id := range ids {
		mm := &modelMember{id: id, start: w.ms2(0, 2000)}
		if w.rng.IntN(3) == 0 {
			mm.skew = w.ms2(0, 60000) - 30*time.Second
		}
		lease, renew := modelLease, modelRenew
		if w.wide {
			lease = []time.Duration{3 * time.Second, 4500 * time.Millisecond, 6 * time.Second, 9 * time.Second}[w.x.IntN(4)]
			var periods []time.Duration
			for _, r := range []time.Duration{500 * time.Millisecond, time.Second, 1500 * time.Millisecond, 2 * time.Second, 3 * time.Second} {
				if 3*r <= lease {
					periods = append(periods, r)
				}
			}
			renew = periods[w.x.IntN(len(periods))]
			if id == "d" {
				mm.start = w.xms(5*time.Second, 20*time.Second)
			}
		}
		cfg := Config{Client: fake.NewSimpleClientset(), Namespace: "ns", Ring: "r", Identity: id,
			LeaseDuration: lease, RenewPeriod: renew,
			Now: func() time.Time { return modelBase.Add(w.now + mm.skew) },
			OnClaims: func(c Claims) {
				if c.Working != mm.gate.Working {
					w.note("%s works %d slots (was %d)", mm.id, c.Working.Len(), mm.gate.Working.Len())
				}
				mm.gate = c
				if v := c.Watched(); !v.Empty() {
					mm.watched = v
				}
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
			}}
		if w.wide { // its cache covers what it watches, its sweeps are done at once
			cfg.Covers = func() Cover {
				c := mm.m.Claims()
				return Cover{Slots: c.Watched().Minus(c.Lingering), Since: 1, Synced: 1 << 40}
			}
			cfg.Swept = func() Sweeps {
				s := Sweeps{Slots: mm.m.Claims().Sweep}
				for _, i := range s.Slots.List() {
					s.At[i] = 1
				}
				return s
			}
		}
		m, err := New(cfg)
		if err != nil {
			panic(err)
		}
		mm.m = m
		w.ms = append(w.ms, mm)
		w.at(mm.start, mm, func() { w.round(mm) })
	}
	// The inputs, at random instants.
	for range w.rng.IntN(3) {
		mm := w.ms[w.rng.IntN(3)]
		w.at(w.ms2(3000, int(modelRun/time.Millisecond)), nil, func() {
			l := int(mm.m.cfg.LeaseDuration / time.Millisecond)
			d := w.ms2(l/2, 3*l)
			mm.paused = max(mm.paused, w.now+d)
			w.quiet = max(w.quiet, mm.paused)
			w.note("%s paused for %s", mm.id, d)
		})
	}
	for range w.rng.IntN(3) {
		mm := w.ms[w.rng.IntN(3)]
		w.at(w.ms2(3000, int(modelRun/time.Millisecond)), nil, func() {
			if _, ok := w.leases[mm.m.leaseName()]; ok {
				delete(w.leases, mm.m.leaseName())
				mm.createFail = w.now + w.ms2(0, 2*int(mm.m.cfg.LeaseDuration/time.Millisecond))
				w.quiet = max(w.quiet, mm.createFail)
				w.note("%s's Lease deleted by hand; its creates fail until %s", mm.id, mm.createFail)
			}
		})
	}
	if w.rng.IntN(3) == 0 {
		mm := w.ms[w.rng.IntN(3)]
		drain := w.rng.IntN(2) == 0 // a clean leave that hands its slots over first
		w.at(w.ms2(5000, int(modelRun/time.Millisecond)), mm, func() {
			if !drain {
				w.leave(mm)
				return
			}
			w.note("%s drains", mm.id)
			mm.m.Drain()
			mm.drainBy = w.now + 20*time.Second // the handoff's share of DrainTimeout
		})
	}
	if w.wide {
		w.widen()
	}
	tail := false
	for w.q.Len() > 0 {
		e := heap.Pop(&w.q).(*modelEvent)
		if w.wide && !tail && e.at > w.quiet {
			w.end, tail = w.quiet+(modelTail+w.stretch)*w.longest(), true // the quiet tail, then the verdict
		}
		if e.at > w.end {
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
			return w.report(v)
		}
	}
	if w.wide {
		w.now = w.end
		if v := w.converged(); v != "" {
			return w.report(v)
		}
	}
	return ""
}

func (w *model) report(v string) string {
	if verbose {
		return v + "\n" + strings.Join(w.log, "\n")
	}
	return v
}

func (w *model) longest() time.Duration {
	var l time.Duration
	for _, mm := range w.ms {
		l = max(l, mm.m.cfg.LeaseDuration)
	}
	return l
}

// widen schedules the wider inputs.
func (w *model) widen() {
	pick := func() *modelMember { return w.ms[w.x.IntN(len(w.ms))] }
	when := func() time.Duration { return w.xms(3*time.Second, modelRun) }
	// One of the first three leaves at its first round with slots given
	// after d joined (a leave during a handoff), or 15 s later.
	w.ms[w.x.IntN(3)].leaveAt = w.ms[3].start
	// One is cut off from the server a while (a partition: every request
	// of it fails), for up to two of its lease durations.
	if w.x.IntN(2) == 0 {
		mm := pick()
		w.at(when(), nil, func() {
			d := w.xms(mm.m.cfg.LeaseDuration/2, 2*mm.m.cfg.LeaseDuration)
			mm.cutUntil = w.now + d
			w.quiet = max(w.quiet, mm.cutUntil)
			w.note("%s cut off from the server for %s", mm.id, d)
		})
	}
	if w.x.IntN(4) == 0 {
		mm := pick()
		w.at(when(), nil, func() {
			if !mm.gone {
				mm.gone, mm.killed = true, true
				w.note("%s killed", mm.id)
			}
		})
	}
	for range w.x.IntN(5) {
		mm, kind := pick(), w.x.IntN(14)
		w.at(when(), nil, func() { w.foreignWrite(mm, kind) })
	}
	if w.x.IntN(3) == 0 { // a member whose lists fail (RBAC), its renewals not
		mm := pick()
		w.at(when(), nil, func() {
			d := w.xms(mm.m.cfg.LeaseDuration/2, 3*mm.m.cfg.LeaseDuration)
			mm.listCutUntil = w.now + d
			w.quiet = max(w.quiet, mm.listCutUntil)
			w.note("%s cannot list the ring's Leases for %s", mm.id, d)
		})
	}
	if w.x.IntN(3) == 0 { // a copy set back over a renewal nobody read, of a member working
		first := w.x.IntN(len(w.ms))
		w.at(when(), nil, func() {
			for i := range w.ms {
				if mm := w.ms[(first+i)%len(w.ms)]; !mm.gone && !mm.gate.Working.Empty() {
					w.foreignWrite(mm, 13)
					return
				}
			}
		})
	}
	if w.x.IntN(2) == 0 { // an operator drains a replica: marks its Lease leaving
		mm := pick()
		w.at(when(), nil, func() { w.foreignWrite(mm, 4) })
	}
}

// foreignWrite is a write to mm's Lease by someone else than mm.
func (w *model) foreignWrite(mm *modelMember, kind int) {
	l, err := w.get(mm.m.leaseName())
	if err != nil {
		return
	}
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	var what string
	switch kind {
	case 0:
		what, l.Labels["example.com/touched"] = "labelled", w.now.String()
	case 1: // a GitOps tool, every second for ever (while the Lease is there)
		what = "labelled every second"
		var touch func()
		touch = func() {
			if l, err := w.get(mm.m.leaseName()); err == nil {
				// In the quiet tail, only the Leases of members gone (a
				// write may conflict with a live member's renewal).
				if w.now < w.quiet || mm.gone {
					if l.Labels == nil {
						l.Labels = map[string]string{}
					}
					l.Labels["example.com/touched"] = w.now.String()
					_ = w.put(l, false)
				}
				w.at(w.now+time.Second, nil, touch)
			}
		}
		w.at(w.now+time.Second, nil, touch)
	case 2:
		what, l.Annotations["example.com/note"] = "annotated", w.now.String()
	case 3:
		what = "unlabelled"
		delete(l.Labels, Label)
	case 4:
		what, l.Annotations[AnnotationLeaving] = "marked leaving by hand", "true"
	case 5:
		what, l.Spec.HolderIdentity = "holder cleared", nil
	case 6:
		other := w.ms[w.x.IntN(len(w.ms))].id
		what, l.Spec.HolderIdentity = "holder set to "+other, &other
	case 7:
		one := int32(1)
		what, l.Spec.LeaseDurationSeconds = "lease duration set to 1s", &one
	case 9: // saved copies' specs re-applied by another writer (a sync
		// cycling through saved revisions: two, or up to 17), every
		// second for ever
		saved := []*coordinationv1.Lease{l.DeepCopy()}
		save, more := w.xms(time.Second, 4*time.Second), 1
		if w.x.IntN(2) == 0 {
			save, more = time.Second, 1+w.x.IntN(16)
		}
		for i := range more {
			w.at(w.now+time.Duration(i+1)*save, nil, func() {
				if l, err := w.get(mm.m.leaseName()); err == nil {
					saved = append(saved, l)
				}
			})
		}
		n := 0
		var replay func()
		replay = func() {
			if l, err := w.get(mm.m.leaseName()); err == nil {
				if w.now < w.quiet { // until the tail (a collection races them: it is slow, not wrong)
					c := saved[n%len(saved)]
					l.Spec = *c.Spec.DeepCopy() // the holder's record (annotations erased by hand lose what they said: out of scope)
					if w.put(l, false) == nil {
						w.note("%s's Lease set back to a saved copy (renewTime %s)", mm.id, l.Spec.RenewTime)
					}
					n++
				}
				w.at(w.now+time.Second, nil, replay)
			}
		}
		w.at(w.now+w.xms(time.Second, 6*time.Second), nil, replay)
		return
	case 10: // a lease duration of a day, its renewTime moved on: a hand edit the holder's record shows
		if l.Spec.RenewTime == nil {
			return
		}
		day := int32(86400)
		later := metav1.NewMicroTime(l.Spec.RenewTime.Add(time.Millisecond))
		what, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = "lease duration set to a day", &day, &later
		w.stretch = 2 * leaseBelief
	case 11: // set back to a saved copy of an old leave of its identity
		old := metav1.NewMicroTime(modelBase.Add(-time.Hour))
		what, l.Spec.RenewTime, l.Spec.AcquireTime = "set back to a copy of an old leaving mark", &old, &old
		l.Annotations[AnnotationLeaving] = mark(old.Time)
		l.Annotations[AnnotationSlots], l.Annotations[AnnotationPending], l.Annotations[AnnotationGiven] = "", "", ""
	case 12: // a GitOps sync that puts the Lease back, from a copy saved
		// now, whenever it finds it missing (collected, left, deleted)
		saved := l.DeepCopy()
		saved.ResourceVersion = ""
		var sync func()
		sync = func() {
			if _, err := w.get(saved.Name); err != nil && w.now < w.quiet && w.put(saved, true) == nil {
				w.note("%s's Lease put back from a saved copy (renewTime %s)", mm.id, saved.Spec.RenewTime)
			}
			if w.now < w.quiet {
				w.at(w.now+time.Second, nil, sync)
			}
		}
		w.at(w.now+time.Second, nil, sync)
		return
	case 13: // saved now; the holder pauses until just before its fence, and the
		// copy is re-applied over its first renewal after, which nobody
		// read; the holder is cut off from then until its fence (it never
		// reads the copy while it may work)
		saved := l.DeepCopy()
		mm.m.mu.Lock()
		renewed := mm.m.renewed
		mm.m.mu.Unlock()
		left := renewed.Add(mm.m.fenceAfter()).Sub(mm.m.Now())
		renew := int(mm.m.cfg.RenewPeriod / time.Millisecond)
		if renewed.IsZero() || left < mm.m.cfg.RenewPeriod || mm.onLanded != nil {
			return // fenced, or about to be: nothing to hide
		}
		d := left - w.ms2(renew/2, renew) // it resumes just before its fence
		mm.paused = max(mm.paused, w.now+d)
		w.quiet = max(w.quiet, mm.paused)
		mm.onLanded = func() {
			w.at(w.now+w.ms2(1, 200), nil, func() {
				l, err := w.get(saved.Name)
				if err != nil {
					return
				}
				l.Spec, l.Annotations = *saved.Spec.DeepCopy(), saved.Annotations
				if w.put(l, false) == nil {
					w.note("%s's Lease set back to the copy saved before its pause", mm.id)
				}
				cut := mm.m.fenceAfter() // it reads the copy only once fenced anyway
				mm.cutUntil = w.now + cut
				w.quiet = max(w.quiet, mm.cutUntil)
				w.note("%s cut off from the server for %s", mm.id, cut)
			})
		}
		w.note("%s's Lease saved, %s paused for %s", mm.id, mm.id, d)
		return
	case 8: // a copy under another name, holder and all: it stands still
		c := l.DeepCopy()
		c.Name, c.ResourceVersion = "r-"+mm.id+"-copy", ""
		if err := w.put(c, true); err == nil {
			w.note("%s's Lease copied as %s", mm.id, c.Name)
		}
		return
	}
	if err := w.put(l, false); err == nil {
		w.note("%s's Lease %s by another writer", mm.id, what)
	}
}

// verbose: a violation comes with what happened before it.
var verbose, debugSeen = false, false

// modelLogLines is how many lines of what happened a report keeps.
var modelLogLines = 600

// check is the invariants, at this instant.
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
	if w.wide {
		return w.custody()
	}
	return ""
}

func (w *model) admits(mm *modelMember) shard.SlotSet {
	if gateClock && !mm.m.Now().Before(mm.until) { // Admits, for every slot at once
		return shard.SlotSet{}
	}
	return mm.gate.Working
}

// custody: a member given a slot keeps watching it until it claims it,
// while the gift stands (its giver names it, or leaves naming it), unless
// the member was fenced (or killed, or left) since.
func (w *model) custody() string {
	var standing []gift
	for _, o := range w.ms {
		given := o.m.claims.Given // the model's goroutine: no lock needed
		if o.left {
			given = o.giving
		}
		if given.Empty() {
			continue
		}
		for _, i := range given.List() {
			if to := o.m.givenTo[i]; to != "" && w.member(to) != nil {
				standing = append(standing, gift{o.id, to, i})
			}
		}
	}
	if len(standing) == 0 && len(w.gifts) == 0 {
		return ""
	}
	for _, g := range standing {
		if _, ok := w.gifts[g]; !ok {
			// A gift to a member that does not watch the slot is an
			// overdue handoff's (HandoffTimeout): logged as a loss, not
			// the receiver's to keep.
			w.gifts[g] = w.member(g.to).watched.Has(g.slot)
			w.note("%s gives slot %d to %s (watching it: %v)", g.from, g.slot, g.to, w.gifts[g])
			if w.x.IntN(4) == 0 && w.now < w.quiet { // a hand clears the giver's or the receiver's holder meanwhile
				mm := w.member([]string{g.from, g.to}[w.x.IntN(2)])
				w.at(w.now+w.xms(0, 2*time.Second), nil, func() { w.foreignWrite(mm, 5) })
			}
		}
	}
	for g, open := range w.gifts {
		n := w.member(g.to)
		switch {
		case !slices.Contains(standing, g):
			delete(w.gifts, g) // may be given again
		case !open:
		case n.gone || n.left || n.m.Now().After(n.until) || n.gate.Claimed().Has(g.slot):
			w.gifts[g] = false // discharged: claimed, or its receiver fenced or gone
		case !n.watched.Has(g.slot):
			return fmt.Sprintf("at %s %s stopped watching slot %d, given to it by %s, before claiming it: the deletions it kept for it are dropped (%s claims %+v)",
				w.now, n.id, g.slot, g.from, n.id, n.gate)
		}
	}
	return ""
}

func (w *model) member(id string) *modelMember {
	for _, mm := range w.ms {
		if mm.id == id {
			return mm
		}
	}
	return nil
}

// converged: after the quiet tail, every slot is Working at one live
// member, and the live members agree on who they are.
func (w *model) converged() string {
	var live []string
	for _, mm := range w.ms {
		if !mm.gone && !mm.left {
			live = append(live, mm.id)
		}
	}
	var working shard.SlotSet
	for _, mm := range w.ms {
		if mm.gone || mm.left {
			continue
		}
		if got := mm.m.Members(); !slices.Equal(got, live) {
			return fmt.Sprintf("after the quiet tail (%s), %s sees members %v; live: %v", w.end-w.quiet, mm.id, got, live)
		}
		working = working.Union(w.admits(mm))
	}
	if len(live) > 0 && working != shard.All() {
		return fmt.Sprintf("after the quiet tail (%s), the live members %v work %d slots of %d", w.end-w.quiet, live, working.Len(), shard.Slots)
	}
	return ""
}

// request is one Lease request's flight: when its answer comes, whether it
// succeeds, and when (if ever) a write it makes lands.
func (w *model) request(mm *modelMember) (answer time.Duration, ok bool, lands time.Duration) {
	timeout := mm.m.cfg.RenewPeriod // as Member.request bounds it
	now := mm.m.Now()
	mm.m.mu.Lock()
	if !mm.m.renewed.IsZero() {
		if left := mm.m.renewed.Add(mm.m.fenceAfter()).Sub(now); left > 0 {
			timeout = min(timeout, left)
		}
	}
	mm.m.mu.Unlock()
	r := w.rng.IntN(20)
	switch {
	case w.now < mm.cutUntil: // cut off: refused
		r = 14
	case w.now >= w.quiet: // the quiet tail: answered, at once
		r = 0
	}
	switch {
	case r < 14: // answered
		lat := w.ms2(1, 400)
		if w.now >= w.quiet {
			lat = min(lat, timeout/2)
		}
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

var errModelTimeout = errors.New("context deadline exceeded")

// modelTail is the quiet tail, in the longest lease duration of the
// members: time to count out the dead, hand every slot over, and claim.
const modelTail = 6

// modelGetToPut is how long before a renewal's write lands its GET was
// answered: a write by another in between makes it conflict.
const modelGetToPut = 5 * time.Millisecond

// round is Member.round with the I/O as events: beforeRenew, the renewal
// (a GET at the flight's start, its write landing later), extend, the
// list, update, the collection of a dead Lease.
func (w *model) round(mm *modelMember) {
	m := mm.m
	if mm.left {
		return
	}
	if mm.leaveAt > 0 && w.now >= mm.leaveAt && (!m.Claims().Given.Empty() || w.now >= mm.leaveAt+15*time.Second) {
		w.leave(mm)
		return
	}
	if mm.drainBy > 0 && (m.Drained() || w.now >= mm.drainBy) {
		w.leave(mm)
		return
	}
	mm.roundStart = w.now
	m.beforeRenew(logr.Discard())
	sent := m.Now()
	answer, ok, lands := w.request(mm)
	got, getErr := w.get(m.leaseName())
	// The GET was answered if the write could land, or the answer came.
	var wr renewal
	decided := errModelTimeout
	if ok || lands >= 0 {
		wr, decided = m.renewal(got, getErr)
		if decided == nil && wr.create && w.now < mm.createFail {
			decided = apierrors.NewInternalError(errors.New("etcdserver: request timed out"))
		}
		if decided != nil {
			lands = -1
		}
	}
	w.note("%s renews claiming %d, answer at %s ok=%v, lands at %s (%v)", mm.id, wr.claimed.Len(), answer, ok, lands, decided)
	landed, applied := false, false
	land := func() {
		if applied {
			return
		}
		applied = true
		// The GET is answered just before the write is sent, and before
		// the client gives up (a write landing after its answer was sent
		// before it): only a write in between makes it conflict.
		if cur, ok := w.leases[wr.lease.Name]; ok && !wr.create && w.wrote[wr.lease.Name] < min(lands, answer)-modelGetToPut {
			wr.lease.ResourceVersion = cur.ResourceVersion
		}
		landed = w.put(wr.lease, wr.create) == nil
		if f := mm.onLanded; landed && f != nil {
			mm.onLanded = nil
			f()
		}
	}
	if lands >= 0 {
		w.at(lands, nil, land)
	}
	w.at(answer, mm, func() {
		if lands >= 0 && lands <= w.now { // landed at the instant of the answer, ordered after it
			land()
		}
		if mm.left {
			return
		}
		err := decided
		if err == nil && (!ok || !landed) {
			err = errModelTimeout
		}
		mm.renewOK = err == nil
		if err == nil {
			m.wroteRenewal(wr)
		}
		m.renewDone(logr.Discard(), sent, err, false)
		w.list(mm)
	})
}

func (w *model) list(mm *modelMember) {
	m := mm.m
	answer, ok, _ := w.request(mm)
	if w.now < mm.listCutUntil { // refused (403), at once
		answer, ok = w.now+w.ms2(1, 50), false
	}
	read := w.now + w.ms2(0, int((answer-w.now)/time.Millisecond))
	var items []coordinationv1.Lease
	done := false
	w.at(read, nil, func() { items, done = w.listed(), true })
	w.at(answer, mm, func() {
		if mm.left {
			return
		}
		if !done { // read at the instant of the answer, ordered after it
			items = w.listed()
		}
		if ok {
			m.listed(logr.Discard(), items, m.cfg.Now())
		}
		m.lookDone(logr.Discard(), ok, mm.renewOK)
		w.note("%s listed (ok=%v, read at %s): members %v", mm.id, ok, read, m.Members())
		if debugSeen {
			m.mu.Lock()
			w.note("   %s claims %+v quiet until %s unseen until %s renewed %s", mm.id, m.claims, m.quietUntil.Sub(modelBase)-mm.skew, m.unseenUntil.Sub(modelBase)-mm.skew, m.renewed.Sub(modelBase)-mm.skew)
			m.mu.Unlock()
			for name, o := range m.seen {
				w.note("   %s sees %s: record %s at %s hidden %s lease %s gone %v leaving %v claims %d", mm.id, name, o.record, o.at.Sub(modelBase)-mm.skew, o.hidden.Sub(modelBase)-mm.skew, o.lease, o.gone, o.leaving, o.claims.Len())
			}
		}
		if ok {
			w.collect(mm)
		}
		w.at(max(w.now, mm.roundStart+m.cfg.RenewPeriod), mm, func() { w.round(mm) })
	})
}

// collect is Member.collect with the I/O as events (its requests are the
// wider inputs' draws: they do not move the other schedules).
func (w *model) collect(mm *modelMember) {
	m := mm.m
	now := m.cfg.Now()
	name, o := m.collectable(now)
	if name == "" {
		return
	}
	var got *coordinationv1.Lease
	if !o.leaving {
		var err error
		if got, err = w.get(name); err != nil {
			return
		}
	}
	rv, marked := collection(o, got)
	at := w.now + w.xms(time.Millisecond, 300*time.Millisecond)
	w.seq++
	heap.Push(&w.q, &modelEvent{at: at, seq: w.seq, run: func() {
		switch {
		case marked != nil:
			if w.put(marked, false) == nil {
				m.collecting, m.collectingAt = name, now
				w.note("%s marks %s leaving to collect it", mm.id, name)
			}
		case rv != "":
			if w.del(name, rv) == nil {
				w.note("%s collects %s", mm.id, name)
			}
		}
	}})
}

// leave is Member.leave with the I/O as events: quit, the mark (a GET and
// an UPDATE), the wait (lists while a slot it gave is not confirmed), the
// delete held to the mark.
func (w *model) leave(mm *modelMember) {
	m := mm.m
	mm.left = true
	mm.giving = m.Claims().Given
	given, held := m.quit()
	w.note("%s leaves, giving %v", mm.id, given)
	if !held {
		mm.gone = true
		return
	}
	done := func() { mm.gone, mm.giving = true, shard.SlotSet{} }
	if w.rng.IntN(10) == 0 { // the mark is not written: nothing is deleted
		done()
		return
	}
	got, err := w.get(m.leaseName())
	if err != nil {
		done()
		return
	}
	stamp, err := m.leavingMark(got, given)
	if err != nil {
		done()
		return
	}
	markedRV := ""
	w.at(w.now+w.ms2(1, 200), nil, func() {
		if w.put(got, false) == nil {
			markedRV = w.leases[got.Name].ResourceVersion
			m.wrote = stamp.Truncate(time.Microsecond)
		}
	})
	renew := m.cfg.RenewPeriod
	start := w.now + 200*time.Millisecond
	var wait func(waited int)
	wait = func(waited int) {
		w.at(start+time.Duration(waited)*renew, mm, func() {
			if markedRV == "" {
				done()
				return
			}
			if !given.Empty() && waited < leaveWait {
				m.listed(logr.Discard(), w.listed(), m.cfg.Now())
				given = m.unconfirmed(given)
			}
			if given.Empty() || waited == leaveWait {
				w.at(w.now+w.ms2(1, 200), nil, func() { _ = w.del(m.leaseName(), markedRV) })
				done()
				return
			}
			wait(waited + 1)
		})
	}
	wait(1)
}

// modelSearch plays the schedules of n seeds from 0, with the wider
// inputs or without; it returns the first violation found.
func modelSearch(n int, wide bool) (seed uint64, violation string) {
	defer memoAssign()()
	for seed := range uint64(n) {
		if v := runModel(seed, wide); v != "" {
			return seed, v
		}
	}
	return 0, ""
}

// memoAssign memoizes assignSlots until the function it returns is called
// (the members of the model's schedules are few, and Assign is most of a
// schedule's cost).
func memoAssign() (restore func()) {
	memo := map[string]map[string][]int{}
	assignSlots = func(members []string) map[string][]int {
		k := strings.Join(members, ",")
		if a, ok := memo[k]; ok {
			return a
		}
		memo[k] = shard.Assign(members)
		return memo[k]
	}
	return func() { assignSlots = shard.Assign }
}

// modelWide: does seed play a second schedule, with the wider inputs?
func modelWide(seed uint64) bool { return seed%4 == 3 }

// modelSchedules plays the schedules of n seeds from 0 (every fourth one
// twice: with the wider inputs too); it returns the first violation found.
func modelSchedules(n int) (seed uint64, wide bool, violation string) {
	defer memoAssign()()
	for seed := range uint64(n) {
		if v := runModel(seed, false); v != "" {
			return seed, false, v
		}
		if modelWide(seed) {
			if v := runModel(seed, true); v != "" {
				return seed, true, v
			}
		}
	}
	return 0, false, ""
}

// modelCount is how many seeds the sweep plays: fewer under -short, and
// under -race (the model is one goroutine: the detector sees nothing in
// it, and slows it about eight times).
func modelCount(t *testing.T) int {
	if testing.Short() || raceEnabled {
		return 1000
	}
	return 10000
}

// TestTheRingModelNeverAdmitsTwice plays the ring model's schedules and
// requires none to let two members admit one slot at any instant, a
// member given a slot to drop it, or the ring not to converge.
func TestTheRingModelNeverAdmitsTwice(t *testing.T) {
	n := modelCount(t)
	start := time.Now()
	if seed, wide, v := modelSchedules(n); v != "" {
		verbose = true
		defer func() { verbose = false }()
		t.Fatalf("seed %d (wide %v): %s", seed, wide, runModel(seed, wide))
	}
	t.Logf("%d schedules (%d of them with the wider inputs) in %s", n+n/4, n/4, time.Since(start).Round(time.Millisecond))
}

// Each rule, broken on purpose, must make the model fail: else the model
// does not see the input the rule is for.
func TestTheRingModelFailsWithoutEachRule(t *testing.T) {
	for _, rule := range []struct {
		name string
		v    *bool
		wide bool // the input it is for is among the wider ones
	}{
		{"a member past its fence fences before it renews (fenceFirst)", &fenceFirst, false},
		{"the gate admits nothing past the fence deadline (gateClock)", &gateClock, false},
		{"a Lease that vanished unmarked stays live for its lease (vanishedLive)", &vanishedLive, false},
		{"a Lease is judged by the lease duration its holder wrote (byHolder)", &byHolder, true},
		{"a Lease renews when its holder's record moves, not its resourceVersion (byRecord)", &byRecord, true},
		{"a leaving mark counts only with the renewal it was written with (markBound)", &markBound, true},
		{"a leave names the slots it gave until they are confirmed (keepGiven)", &keepGiven, true},
		{"a move that may hide a renewal keeps a Lease current, its claims every slot (byMove)", &byMove, true},
		{"a copy of an old leaving mark counts for nothing (markFresh)", &markFresh, true},
	} {
		t.Run(rule.name, func(t *testing.T) {
			*rule.v = false
			defer func() { *rule.v = true }()
			// Each search stops at its first failure; these bounds are
			// about twice the seed it is found at.
			n := 4000
			if rule.wide {
				n = 1200
			}
			seed, v := modelSearch(n, rule.wide)
			if v == "" {
				t.Fatalf("with the rule broken, no schedule of %d failed (wide %v)", n, rule.wide)
			}
			t.Logf("broken, it fails: seed %d (wide %v): %s", seed, rule.wide, v)
		})
	}
}
