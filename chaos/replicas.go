package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"rawwatch/app"
	"rawwatch/faultproxy"
	"rawwatch/reconcile/myresource"
	"rawwatch/ring"
	"rawwatch/shard"
)

// replica is one controller of the run: the only one, or one of a sharded
// set (Config.Replicas).
type replica struct {
	name  string
	app   *app.App
	rec   *recorder
	meter *faultproxy.Meter
	// leases counts its requests on the ring's Leases (the budget's other
	// half: leaseBound).
	leases *leaseMeter
	dead   *atomic.Bool // the kill switch: every request fails at once
	stop   func()
	// from and to bound its life; to is zero while it runs.
	from, to time.Time
}

// errKilled is what a killed replica's requests get.
var errKilled = errors.New("chaos: this replica was killed")

// newReplica assembles a controller as main.go does, through the proxy at
// proxyURL: its transport metered (the LISTs and WATCHes of MyResources, for
// the request budget) and behind a kill switch. With sharding, it is one
// member of the ring.
func newReplica(cfg Config, base *rest.Config, ns, name string, sharding *app.Sharding, ref *referee) (*replica, error) {
	r := &replica{name: name, rec: newRecorder(ref), meter: faultproxy.NewMeter(), leases: newLeaseMeter(time.Now), dead: &atomic.Bool{}}
	r.rec.byObject = sharding != nil
	c := rest.CopyConfig(base)
	c.QPS, c.Burst = cfg.QPS, cfg.Burst
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		metered := r.meter.Wrap(rt)
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			if r.dead.Load() {
				return nil, errKilled
			}
			switch {
			case strings.Contains(req.URL.Path, "/myresources"):
				return metered.RoundTrip(req)
			case strings.Contains(req.URL.Path, "/leases"):
				r.leases.count(req)
			}
			return rt.RoundTrip(req) // the ring's Leases, Events: not the watcher's budget
		})
	})
	a, err := app.New(app.Options{
		Config: c, Namespace: ns, Workers: cfg.Workers, RetryMax: cfg.RetryMax,
		Watch:          cfg.Watch(),
		Observer:       r.rec,
		WrapReconciler: r.rec.wrap,
		WrapStatusWriter: func(w myresource.StatusWriter) myresource.StatusWriter {
			r.rec.status = w
			return r.rec
		},
		Sharding: sharding,
	})
	if err != nil {
		return nil, err
	}
	r.app = a
	r.rec.store = a.Store
	if a.Sharded != nil {
		r.rec.coverage = a.Sharded.Covered
	}
	return r, nil
}

// start runs the replica; with wait, until its first list (at most 2 minutes).
func (r *replica) start(ctx context.Context, logger klog.Logger, wait bool) error {
	r.from = time.Now()
	stop, err := runSynced(ctx, r.app, klog.LoggerWithValues(logger, "replica", r.name), wait)
	r.stop = stop
	return err
}

// kill stops the replica as a SIGKILL would: from now on none of its
// requests reaches the server (so it cannot delete its Lease, or finish a
// write), then its goroutines are ended.
func (r *replica) kill() {
	r.dead.Store(true)
	r.to = time.Now()
	r.stop()
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// objectKey names one object to the referee: its key and its UID. A name
// deleted and re-created is another object, with another UID, and with
// sharding it may fall in another replica's shard: the old one's deletion
// and the new one's reconcile may then run at once, on two replicas, each
// on its own object (a controller whose side effects are named after the
// object, not its UID, must know it).
func objectKey(key string, uid types.UID) string { return key + " uid " + string(uid) }

// refKey is what the referee holds a call to: the object, or the key.
func (r *recorder) refKey(key string, uid types.UID) string {
	if r.byObject {
		return objectKey(key, uid)
	}
	return key
}

// referee notices an object reconciled in two places at once: two workers
// of one replica, or two replicas.
type referee struct {
	mu       sync.Mutex
	busy     map[string]string // key (or object) → the replica reconciling it
	overlaps []string
	// names counts the calls in flight by name alone; sameName counts the
	// times two objects of one name (a name re-created) were in two
	// replicas' hands at once: not a double reconcile, but worth knowing.
	names    map[string]int
	sameName int
}

func newReferee() *referee { return &referee{busy: map[string]string{}, names: map[string]int{}} }

func (f *referee) enter(key, who string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if other, ok := f.busy[key]; ok {
		f.overlaps = append(f.overlaps, fmt.Sprintf("%s (%s and %s)", key, other, who))
	}
	f.busy[key] = who
	name, _, _ := strings.Cut(key, " uid ")
	if f.names[name]++; f.names[name] > 1 {
		f.sameName++
	}
}

func (f *referee) leave(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.busy, key)
	name, _, _ := strings.Cut(key, " uid ")
	if f.names[name]--; f.names[name] == 0 {
		delete(f.names, name)
	}
}

// ownership is when each replica claimed which slots (Working or Releasing:
// while it claims a slot, it handles the slot's deletions): its
// ring.ClaimsChanged events, as they came.
type ownership struct {
	at      []time.Time
	claimed []shard.SlotSet
	fenced  []bool  // the change was a fence: every claim dropped at once
	rv      []int64 // where the replica's watch was at the change
}

func (o *ownership) add(t time.Time, c ring.Claims, fenced bool, rv int64) {
	o.at = append(o.at, t)
	o.claimed = append(o.claimed, c.Working.Union(c.Releasing))
	o.fenced = append(o.fenced, fenced)
	o.rv = append(o.rv, rv)
}

// claim is one stretch of a replica's claim of a slot, as claimedAt finds
// it: how it ended (at zero: it had not by the end of the run), whether by a
// fence, and where the replica's watch was then.
type claim struct {
	end    time.Time
	fenced bool
	rv     int64
}

// claimedAt tells whether slot was claimed at t and, if so, how that claim
// ended.
func (o *ownership) claimedAt(slot int, t time.Time) (claimed bool, c claim) {
	i := -1
	for i+1 < len(o.at) && !o.at[i+1].After(t) {
		i++
	}
	if i < 0 || !o.claimed[i].Has(slot) {
		return false, claim{rv: -1}
	}
	for j := i + 1; j < len(o.at); j++ {
		if !o.claimed[j].Has(slot) {
			return true, claim{end: o.at[j], fenced: o.fenced[j], rv: o.rv[j]}
		}
	}
	return true, claim{rv: -1}
}

// claimedWithin: this replica claimed slot at some moment from from to to
// (zero: on).
func (o *ownership) claimedWithin(slot int, from, to time.Time) bool {
	if claimed, _ := o.claimedAt(slot, from); claimed {
		return true
	}
	for i, at := range o.at {
		if at.After(from) && (to.IsZero() || !at.After(to)) && o.claimed[i].Has(slot) {
			return true
		}
	}
	return false
}

// claimedFrom is when this replica first claimed slot after t (zero: it
// did not).
func (o *ownership) claimedFrom(slot int, t time.Time) time.Time {
	for i := range o.at {
		if o.at[i].After(t) && o.claimed[i].Has(slot) {
			return o.at[i]
		}
	}
	return time.Time{}
}

// fencedBetween is when this replica first fenced itself between from and
// to (zero: it did not).
func (o *ownership) fencedBetween(from, to time.Time) time.Time {
	for i := range o.at {
		if o.at[i].After(from) && o.at[i].Before(to) && o.fenced[i] {
			return o.at[i]
		}
	}
	return time.Time{}
}

// endedBefore is how this replica's last claim of slot before t ended
// (end zero: it had none): when, whether by a fence, and where its watch
// was then.
func (o *ownership) endedBefore(slot int, t time.Time) (c claim) {
	c.rv = -1
	for i := range o.at {
		if o.at[i].After(t) {
			break
		}
		if i > 0 && o.claimed[i-1].Has(slot) && !o.claimed[i].Has(slot) {
			c = claim{end: o.at[i], fenced: o.fenced[i], rv: o.rv[i]}
		}
	}
	return c
}

// around describes when slot was claimed, relative to t: the changes of
// its claim, as offsets from t ("+1.2s claimed, +3s fenced").
func (o *ownership) around(slot int, t time.Time) string {
	var out []string
	was := false
	for i := range o.at {
		if now := o.claimed[i].Has(slot); now != was || o.fenced[i] {
			what := map[bool]string{true: "claimed", false: "let go"}[now]
			if o.fenced[i] {
				what = "fenced"
			}
			out = append(out, fmt.Sprintf("%+.1fs %s (watch at %d)", o.at[i].Sub(t).Seconds(), what, o.rv[i]))
			was = now
		}
	}
	if len(out) == 0 {
		return "never"
	}
	return strings.Join(out, ", ")
}

// observeClaims is the recorder's share of ring events.
func (r *recorder) observeClaims(e ring.ClaimsChanged) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.owns.add(time.Now(), e.Claims, e.Fenced, r.lastRV)
}

// leaseMeter counts a replica's requests on Leases, by verb, each with its
// time, counted on its transport (refused connections too).
type leaseMeter struct {
	now   func() time.Time
	mu    sync.Mutex
	at    []time.Time
	verbs []string
}

func newLeaseMeter(now func() time.Time) *leaseMeter { return &leaseMeter{now: now} }

// count records r, a request on Leases: get, list, create, update, patch or
// delete.
func (m *leaseMeter) count(r *http.Request) {
	verb := strings.ToLower(r.Method)
	switch r.Method {
	case http.MethodGet:
		verb = "get"
		if strings.HasSuffix(strings.TrimSuffix(r.URL.Path, "/"), "/leases") {
			verb = "list"
		}
	case http.MethodPost:
		verb = "create"
	case http.MethodPut:
		verb = "update"
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.at = append(m.at, m.now())
	m.verbs = append(m.verbs, verb)
}

// between counts the requests from from up to (not including) to, by verb.
func (m *leaseMeter) between(from, to time.Time) map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := map[string]int{}
	for i, t := range m.at {
		if !t.Before(from) && t.Before(to) {
			n[m.verbs[i]]++
		}
	}
	return n
}

// busiest is the most requests in any minute from from to to.
func (m *leaseMeter) busiest(from, to time.Time) int {
	m.mu.Lock()
	var at []time.Time
	for _, t := range m.at {
		if !t.Before(from) && t.Before(to) {
			at = append(at, t)
		}
	}
	m.mu.Unlock()
	return faultproxy.BusiestIn(at, time.Minute)
}

// leaseBound is the most requests on Leases a ring member renewing every
// renew may make in any minute (package ring's loop): a round of three
// (its Lease's GET, then its UPDATE or CREATE, then the ring's LIST) at
// once and then at each tick of a renew-period ticker, which drops the ticks
// a slow round misses (so at most ⌊1 min / renew⌋ + 2 rounds start in a
// minute: the ticks in it, and one that fired just before and waited for a
// round); the collection of dead members' Leases, at most one step (a GET
// and an UPDATE, or a DELETE) every three renew periods; each request may
// be retried by client-go after the 1 s Retry-After it makes up for a GET
// whose connection was reset (a server's Retry-After never reaches it:
// ring.NewClient drops it), within the round's timeout of one renew period:
// at most ⌊renew / 1 s⌋ times; and the requests of a clean leave
// (leaveRequests). With the short run's renew period of 1 s: 62 rounds of
// at most 6, 21 collection steps of at most 4, and a leave, 461; with the
// default 2 s, 32 rounds of at most 9, 11 steps of at most 6, and a leave,
// 359.
func leaseBound(renew time.Duration) int {
	rounds := int(time.Minute/renew) + 2
	steps := int(time.Minute/(3*renew)) + 1
	perRequest := 1 + int(renew/time.Second)
	return rounds*3*perRequest + steps*2*perRequest + leaveRequests
}

// leaveRequests is what a clean leave asks of the Lease API: its Lease's
// GET and the UPDATE that marks it leaving, a LIST a renew period for up
// to two more while the slots it gave are not confirmed, the DELETE.
const leaveRequests = 5

// span is a stretch of time: from, to (zero: on).
type span struct{ from, to time.Time }

// holds is when this replica had d's object: from the first time it was
// in its store until the first of: its gate dropped the object's
// deletion, its watch left the slot (a reshard or a list without it), its
// kill (to; zero: never). A watch that came back to the slot had it again
// from the list that brought it back (the first of the slot after the
// leave) if its store had it at or after that list (lastHad: the object,
// made before, was then in that list), until the next of those ends. While
// it had the object, it held its deletion once it was deleted (queued,
// or kept by its gate for when it works the slot). Callers hold mu.
func (r *recorder) holds(d deletion, slot int, to time.Time) []span {
	from, had := r.known[d.incarnation]
	if !had {
		return nil
	}
	if t, ok := r.dropped[d.incarnation]; ok && (to.IsZero() || t.Before(to)) {
		to = t
	}
	var out []span
	for to.IsZero() || !from.After(to) {
		s, left := span{from, to}, time.Time{}
		for _, w := range r.watching {
			if w.at.After(from) && !w.slots.Has(slot) {
				left = w.at
				break
			}
		}
		if !left.IsZero() && (to.IsZero() || left.Before(to)) {
			s.to = left
		}
		out = append(out, s)
		if left.IsZero() || !left.Equal(s.to) {
			break // it had the object to the end, or to its drop or kill
		}
		// The watch left the slot: did it come back to it with the object?
		back := time.Time{}
		for _, w := range r.watching {
			if w.at.After(left) && w.slots.Has(slot) {
				back = w.at
				break
			}
		}
		if back.IsZero() || r.lastHad[d.incarnation].Before(back) {
			break
		}
		from = back
	}
	return out
}

// custody: this replica had d's object while it claimed the object's slot
// (Working or Releasing), so it could have reconciled it and its deletion
// was this replica's to handle or to hand over (holds says when it had
// it). A replica that only watched the slot (a joiner's Target, a claim
// about to come) and let it go knew the object without owing its deletion
// to anyone, unless the slot was given to it (judge.givenToAHolder).
// Callers hold mu.
func (r *recorder) custody(d deletion, slot int, to time.Time) bool {
	for _, s := range r.holds(d, slot, to) {
		if r.owns.claimedWithin(slot, s.from, s.to) {
			return true
		}
	}
	return false
}

// heldAfter: this replica had d's object, or held its deletion, at t or
// after (holds). Callers hold mu.
func (r *recorder) heldAfter(d deletion, slot int, to, t time.Time) bool {
	for _, s := range r.holds(d, slot, to) {
		if s.to.IsZero() || s.to.After(t) {
			return true
		}
	}
	return false
}
