package app

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"rawwatch/observe"
	"rawwatch/reconcile"
	"rawwatch/ring"
	"rawwatch/shard"
	"rawwatch/sharding"
	"rawwatch/store"
)

// Sharding makes this process one replica of a sharded controller: the
// replicas that share Ring divide the objects among themselves by a hash of
// their UIDs (package shard), each listing, watching, caching and
// reconciling only its part; membership and the handoff of slots ride on
// one Lease per replica (package ring).
type Sharding struct {
	// Namespace holds the ring's Leases.
	Namespace string
	// Ring names the ring; default "rawwatch".
	Ring string
	// Identity names this replica in the ring; default the host name and a
	// random suffix (a restarted process is a new member).
	Identity string
	// LeaseDuration and RenewPeriod: ring.Config's (default
	// ring.DefaultLeaseDuration and ring.DefaultRenewPeriod).
	LeaseDuration, RenewPeriod time.Duration
	// DrainTimeout bounds a clean leave's drain, from the end of Run's
	// context: the reconciles in flight, then the deletions heard of and
	// not handled yet (drain); then the ring is left. Default
	// DefaultDrainTimeout.
	DrainTimeout time.Duration
}

// DefaultDrainTimeout is how long a replica leaving cleanly may take to
// finish its reconciles in flight and handle the deletions it heard of,
// from the end of Run's context (a SIGTERM): no longer than a reconcile in
// flight may take anyway, so a pod's termination grace period that lets
// one finish and the Lease go lets the drain finish too (config/manager's
// 45 s does: a test checks).
const DefaultDrainTimeout = reconcile.ReconcileTimeout

// DefaultIdentity is a ring member's identity when none is given: the host
// name (in a pod, the pod's name) and a random suffix, as a Lease name allows.
func DefaultIdentity() string {
	host, _ := os.Hostname()
	host = strings.ToLower(strings.Trim(host, ".-"))
	if host == "" {
		host = "rawwatch"
	}
	return host + "-" + string(uuid.NewUUID())[:8]
}

// gate lets a reconcile of a key start only while this replica works the
// key's slot, and a deletion be handled only while it claims it (Working or
// Releasing); it keeps the deletions of slots it watches but does not work
// (yet, or for a moment: fenced), for when it does; it knows which slots
// have reconciles in flight (the ring releases a slot only once none is)
// and which were swept.
type gate struct {
	store *store.Store[Object]
	obs   observe.Observer

	// now is the gate's clock: the ring member's fence clock (Member.Now,
	// on which the deadline is), time.Now until there is a member.
	now func() time.Time

	mu     sync.Mutex
	claims ring.Claims
	// until is the ring's fence deadline (ring.Config.OnDeadline): from
	// then on nothing is admitted, whatever the claims say, until the ring
	// moves it (a worker resumed from a pause starts nothing before the
	// ring's fence has dropped the claims).
	until   time.Time
	flights map[*flight]struct{}
	// watched is the slots the watcher lists and watches: the last
	// non-empty Claims.Watched (a fenced replica has no claims and no
	// target, and keeps its watcher's shard until it has a target again).
	watched shard.SlotSet
	// held: deletions in slots watched, not worked (Pending, Target only,
	// or a fence took them): handed to the workers if the slot comes to be
	// worked, dropped if the watcher stops watching it.
	held map[int][]store.Delta[Object]
	// swept: of claims.Sweep, the slots swept since it asked, and where
	// (ring.Sweeps); fresh, the slots asked for since the sweep under way
	// began (it does not answer for them).
	swept ring.Sweeps
	fresh shard.SlotSet
	// stored: by slot, the newest object the store held of the slots
	// swept, at the ring's previous step (sweptSlots).
	stored [shard.Slots]uint64
	kick   chan struct{} // a sweep is asked for
}

type flight struct {
	slot   int
	cancel context.CancelFunc
}

// DeletionRouted: the gate held a deletion for a slot this replica watches
// but does not work yet (Route "held"), handed held ones to the workers
// when it came to work the slot ("replayed"), dropped ones whose slot it no
// longer watches ("dropped"), a sweep found one ("swept"), or a clean leave
// left it unhandled when its drain ran out of time ("abandoned").
type DeletionRouted struct {
	Key   string
	UID   string
	Route string
}

func newGate(s *store.Store[Object], obs observe.Observer) *gate {
	return &gate{store: s, obs: obs, now: time.Now, flights: map[*flight]struct{}{}, held: map[int][]store.Delta[Object]{}, kick: make(chan struct{}, 1)}
}

// admit tells whether a delta goes to the workers now. A change does if
// this replica works its slot; a deletion, if it claims the slot (Working or
// Releasing). A deletion in a slot it only watches is held (see set).
func (g *gate) admit(d store.Delta[Object]) bool {
	slot := shard.SlotOf(string(d.Object.GetUID()))
	g.mu.Lock()
	defer g.mu.Unlock()
	if ring.Admits(g.claims, g.until, g.now(), slot, d.Type == store.Deleted) {
		return true
	}
	if d.Type != store.Deleted {
		return false
	}
	if g.watched.Has(slot) {
		g.hold(slot, d)
	}
	return false
}

// hold keeps a deletion for when this replica works its slot (mu held).
func (g *gate) hold(slot int, d store.Delta[Object]) {
	g.held[slot] = append(g.held[slot], d)
	g.routed(d, "held")
}

func (g *gate) routed(d store.Delta[Object], route string) {
	g.obs.Observe(DeletionRouted{Key: d.Key, UID: string(d.Object.GetUID()), Route: route})
}

// enter starts a reconcile (or, with deletion, a deletion's handling) of obj,
// if admit would let it in; leave must follow. The context ends when the
// slot is taken away without being released (the replica was fenced). A
// deletion not let in is held, as by admit.
func (g *gate) enter(ctx context.Context, d store.Delta[Object], deletion bool) (_ context.Context, leave func(), ok bool) {
	slot := shard.SlotOf(string(d.Object.GetUID()))
	g.mu.Lock()
	defer g.mu.Unlock()
	if !ring.Admits(g.claims, g.until, g.now(), slot, deletion) {
		switch {
		case deletion && g.watched.Has(slot):
			g.hold(slot, d)
		case deletion: // its slot's deletions are another replica's now
			g.routed(d, "dropped")
		}
		return nil, nil, false
	}
	ctx, cancel := context.WithCancel(ctx)
	f := &flight{slot: slot, cancel: cancel}
	g.flights[f] = struct{}{}
	return ctx, func() {
		g.mu.Lock()
		delete(g.flights, f)
		g.mu.Unlock()
		cancel()
	}, true
}

// setDeadline is ring.Config.OnDeadline.
func (g *gate) setDeadline(until time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.until = until
}

// busy is the slots with a reconcile, or a deletion's handling, in flight.
func (g *gate) busy() shard.SlotSet {
	g.mu.Lock()
	defer g.mu.Unlock()
	var s shard.SlotSet
	for f := range g.flights {
		s = s.With(f.slot)
	}
	return s
}

// set puts c in effect: reconciles start only in c.Working from now on; the
// ones in flight in a slot no longer claimed at all are cancelled (a slot
// being released keeps its reconciles: the ring waits for them). It returns
// what the watcher is to watch (see watched), the slots newly worked and the
// deletions held for them (and for the slots it now claims in custody,
// Releasing: it handles them before handing the slot on); those held for a
// slot no longer watched are
// dropped (another replica covers it). A fence keeps them: the deletions
// still queued then are held as the workers reach them, and handled when
// the replica works their slots again; after an outage of the API server
// every replica fences itself, and the ring comes back as it was.
func (g *gate) set(c ring.Claims) (watched, gained shard.SlotSet, replay []store.Delta[Object]) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if w := c.Watched(); !w.Empty() {
		g.watched = w
	}
	gained = c.Working.Minus(g.claims.Working)
	g.fresh = g.fresh.Union(c.Sweep.Minus(g.claims.Sweep))
	g.swept.Slots = g.swept.Slots.And(c.Sweep).And(g.claims.Sweep) // a sweep answers for one request
	g.claims = c
	for f := range g.flights {
		if !c.Claimed().Has(f.slot) {
			f.cancel()
		}
	}
	for slot, ds := range g.held {
		switch {
		case c.Working.Union(c.Releasing).Has(slot): // worked, or in custody
			replay = append(replay, ds...)
			delete(g.held, slot)
			for _, d := range ds {
				g.routed(d, "replayed")
			}
		case !g.watched.Has(slot):
			delete(g.held, slot)
			for _, d := range ds {
				g.routed(d, "dropped")
			}
		}
	}
	if !c.Sweep.Minus(g.swept.Slots).Empty() {
		select {
		case g.kick <- struct{}{}:
		default:
		}
	}
	return g.watched, gained, replay
}

// toSweep is the slots the ring asks to sweep and that were not swept since;
// the sweep that starts now answers for them.
func (g *gate) toSweep() shard.SlotSet {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.fresh = shard.SlotSet{}
	return g.claims.Sweep.Minus(g.swept.Slots)
}

// sweptNow records a finished sweep of slots (begun at toSweep): listed at
// resourceVersion at, the newest object of each slot at newest.
func (g *gate) sweptNow(slots shard.SlotSet, at uint64, newest *[shard.Slots]uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	done := slots.And(g.claims.Sweep).Minus(g.fresh)
	g.swept.Slots = g.swept.Slots.Union(done)
	for _, i := range done.List() {
		g.swept.At[i], g.swept.Newest[i] = at, newest[i]
	}
}

// fencedHolding: the replica's ring fenced itself (its deadline passed, or
// it never had one) and it holds deletions it heard of. (Claiming nothing
// is not enough: a joiner's slots are Pending until confirmed, and one that
// leaves will not work them.)
func (g *gate) fencedHolding() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	fenced := !g.now().Before(g.until)
	return fenced && g.claims.Working.Union(g.claims.Releasing).Empty() && len(g.held) > 0
}

// takeHeld empties the held deletions and returns them.
func (g *gate) takeHeld() []store.Delta[Object] {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []store.Delta[Object]
	for slot, ds := range g.held {
		out = append(out, ds...)
		delete(g.held, slot)
	}
	return out
}

// heldSlots is the slots whose deletions the gate holds (ring.Config.Held).
func (g *gate) heldSlots() shard.SlotSet {
	g.mu.Lock()
	defer g.mu.Unlock()
	var s shard.SlotSet
	for slot := range g.held {
		s = s.With(slot)
	}
	return s
}

// watchedSlots is what the watcher watches.
func (g *gate) watchedSlots() shard.SlotSet {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.watched
}

// claimed is the slots this replica claims (Working or Releasing): those
// whose deletions it handles.
func (g *gate) claimed() shard.SlotSet {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.claims.Working.Union(g.claims.Releasing)
}

// lingering is what the watcher watches only until the others have seen it
// withdrawn (ring.Claims.Lingering).
func (g *gate) lingering() shard.SlotSet {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.claims.Lingering
}

// sweptSlots is what the ring reads as its Sweeps, once a step. The newest
// object of a swept slot is the newest of the sweep's list and of what the
// store held of the slot at the previous step: the watch may have brought
// objects created after the sweep, which the new owner's cache must have
// reached too before the slot is let go (its watch may break right after
// the sweep, and relist after their deletion). A step old, so that a slot
// whose objects keep changing is not chased for ever: the new owner's
// renewal in between shows where its cache stood.
func (g *gate) sweptSlots() ring.Sweeps {
	g.mu.Lock()
	w, prev := g.swept, g.stored
	g.mu.Unlock()
	var now [shard.Slots]uint64
	for _, obj := range g.store.List() {
		if slot := shard.SlotOf(string(obj.GetUID())); w.Slots.Has(slot) {
			if rv := sharding.ParseRV(obj.GetResourceVersion()); rv != math.MaxUint64 {
				now[slot] = max(now[slot], rv)
			}
		}
	}
	for _, i := range w.Slots.List() {
		w.Newest[i] = max(w.Newest[i], prev[i])
	}
	g.mu.Lock()
	g.stored = now
	g.mu.Unlock()
	return w
}

// keysIn is the keys of the stored objects in slots.
func (g *gate) keysIn(slots shard.SlotSet) []string {
	var keys []string
	for _, obj := range g.store.List() {
		if slots.Has(shard.SlotOf(string(obj.GetUID()))) {
			keys = append(keys, store.KeyOf(obj))
		}
	}
	return keys
}

// gatedReconciler reconciles a key only through the gate. A key this
// replica does not work (its slot moved away while it sat in the queue) is
// dropped: its new owner reconciles it. So is a key not in the store: its
// object moved to another replica's shard (and was dropped from this store),
// or was deleted (Deleted carries its tombstone, through the gate too).
type gatedReconciler struct {
	next reconcile.Reconciler[Object]
	gate *gate
}

func (r gatedReconciler) Reconcile(ctx context.Context, key string) error {
	obj, ok := r.gate.store.Get(key)
	if !ok {
		return nil
	}
	ctx, leave, ok := r.gate.enter(ctx, store.Delta[Object]{Key: key, Object: obj}, false)
	if !ok {
		return nil
	}
	defer leave()
	return r.next.Reconcile(ctx, key)
}

func (r gatedReconciler) Deleted(ctx context.Context, d store.Delta[Object]) error {
	ctx, leave, ok := r.gate.enter(ctx, d, true)
	if !ok {
		return nil
	}
	defer leave()
	return r.next.Deleted(ctx, d)
}

// newMember joins the ring of opts.Sharding; its claims drive the gate, the
// watcher's shard and the resync of slots taken over.
func (a *App) newMember() (*ring.Member, error) {
	s := *a.opts.Sharding
	if s.Namespace == "" {
		return nil, fmt.Errorf("app: sharding needs a namespace for the ring's Leases")
	}
	if s.Ring == "" {
		s.Ring = "rawwatch"
	}
	if s.Identity == "" {
		s.Identity = DefaultIdentity()
	}
	// The ring's requests get a client of their own, with its own rate
	// limiter: a burst of Events or status writes must not hold back a
	// renewal until the replica fences itself; and no client-go retries
	// after a Retry-After (ring.NewClient).
	cfg := rest.CopyConfig(a.opts.Config)
	cfg.UserAgent = cmp.Or(cfg.UserAgent, rest.DefaultKubernetesUserAgent()) + " ring"
	kube, err := ring.NewClient(cfg)
	if err != nil {
		return nil, err
	}
	return ring.New(ring.Config{
		Client: kube, Namespace: s.Namespace, Ring: s.Ring, Identity: s.Identity,
		LeaseDuration: s.LeaseDuration, RenewPeriod: s.RenewPeriod,
		Observer: a.observer, OnClaims: a.onClaims, Busy: a.busy, OnDeadline: a.gate.setDeadline,
		Covers: a.covers, Swept: a.gate.sweptSlots, Held: a.gate.heldSlots,
	})
}

// busy is the slots with a reconcile in flight or a deletion not handled
// yet (queued, however long the queue, or being handled), and those with a
// deletion whose handling failed and waits for a retry.
//
// The deletions are read first: one that starts being handled between the
// two reads is then in both, not in neither.
func (a *App) busy() (busy, failing shard.SlotSet) {
	a.Controller.Deletions(func(d store.Delta[Object], failed bool) {
		if slot := shard.SlotOf(string(d.Object.GetUID())); failed {
			failing = failing.With(slot)
		} else {
			busy = busy.With(slot)
		}
	})
	return busy.Union(a.gate.busy()), failing
}

// covers is the slots this replica hears every deletion of (listed by the
// watcher and still watched), and where its cache stands (the ring's
// goroutine, as onClaims).
func (a *App) covers() ring.Cover {
	slots, since, at := a.Sharded.Coverage()
	// What only lingers is not published: the others must stop counting
	// on it (it is watched only until they have seen that).
	return ring.Cover{Slots: slots.And(a.watched).Minus(a.gate.lingering()), Since: sharding.ParseRV(since), Synced: sharding.ParseRV(at)}
}

// sweep sweeps the slots the ring asks to, until ctx ends: it finds the
// deletions the watch has not brought yet (sharding.Watcher.Sweep), hands them to the
// workers, then tells the ring (which lets the slot go once they are
// handled). A failed sweep is tried again after a pause, doubling from a
// renew period up to a lease duration; nothing else retries it.
func (a *App) sweep(ctx context.Context, renew, lease time.Duration) {
	log := klog.FromContext(ctx).WithName("sharding")
	pause := renew
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.gate.kick:
		}
		for slots := a.gate.toSweep(); !slots.Empty(); slots = a.gate.toSweep() {
			res, err := a.Sharded.Sweep(ctx, slots)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				log.Error(err, "Could not sweep the slots being handed over; trying again", "slots", slots, "in", pause)
				select {
				case <-ctx.Done():
					return
				case <-time.After(pause):
				}
				pause = min(2*pause, lease)
				continue
			}
			pause = renew
			for _, d := range res.Deleted {
				a.gate.routed(d, "swept")
				if a.gate.admit(d) {
					a.Controller.OnDelta(d)
				}
			}
			log.V(1).Info("Swept the slots being handed over", "slots", slots, "deletions", len(res.Deleted), "resourceVersion", res.RV)
			a.gate.sweptNow(slots, res.RV, &res.Newest)
		}
	}
}

// drain is the first half of a clean leave, before the ring's Lease is
// deleted: the workers have stopped; the watcher, the ring's handoff
// (ring.Member.Drain) and the gate still run. Until handoff ends (two renew
// periods before ctx) or the ring has handed every slot over, every
// deletion heard of and not handled is handed to Deleted; then the watcher
// stops and a sweep of the slots still claimed (none, unless the handoff
// ran out of time) finds what its watch had not brought, until ctx ends.
// What is left then is lost, with a log line (docs/sharding.md, "What
// cannot be promised").
func (a *App) drain(ctx, handoff context.Context, stopWatcher func(), watcherDone <-chan struct{}) {
	log := klog.FromContext(ctx).WithName("sharding")
	start := time.Now()
	sharding.Drain(ctx, a.Controller, a.opts.Workers)
	swept := 0
	// Fenced (it claims nothing): what it hears of is held, not handled.
	// A sweep of the watched slots holds what the watch had not brought
	// too; the ring still renews, and once it claims its slots again it
	// replays what it held (onClaims): wait for that, within ctx.
	if a.gate.claimed().Empty() {
		swept += a.sweepBeforeLeaving(ctx, log, a.gate.watchedSlots())
	}
	// The ring hands the slots over meanwhile (ring.Member.Drain): each is
	// let go once its new owner covers it and it was swept, and stays
	// given until that owner confirms it; the deletions of the slots still
	// claimed are handled here until then.
	drained := func() bool { return a.Member == nil || a.Member.Drained() }
	for (!drained() || a.gate.fencedHolding()) && handoff.Err() == nil {
		select {
		case <-handoff.Done():
		case <-time.After(50 * time.Millisecond):
		}
		sharding.Drain(handoff, a.Controller, a.opts.Workers)
	}
	stopWatcher()
	<-watcherDone
	swept += a.sweepBeforeLeaving(ctx, log, a.gate.claimed())
	left := sharding.Drain(ctx, a.Controller, a.opts.Workers)
	// Held for slots it does not work (fenced, or not confirmed yet): their
	// owners handle them only if they heard of them too.
	left = append(left, a.gate.takeHeld()...)
	for _, d := range left {
		a.gate.routed(d, "abandoned")
	}
	if len(left) > 0 {
		keys := make([]string, 0, min(len(left), 10))
		for _, d := range left[:cap(keys)] {
			keys = append(keys, d.Key)
		}
		log.Info("Leaving the ring with deletions not handled: no replica will handle them", "deletions", len(left), "keys", keys, "took", time.Since(start))
		return
	}
	log.V(1).Info("Drained the deletions before leaving the ring", "swept", swept, "took", time.Since(start))
}

// sweepBeforeLeaving sweeps slots (sharding.Watcher.Sweep) and lets the deletions
// it finds in as any other (the gate holds those of slots not claimed),
// and says how many it let in.
func (a *App) sweepBeforeLeaving(ctx context.Context, log klog.Logger, slots shard.SlotSet) (admitted int) {
	if slots.Empty() || ctx.Err() != nil {
		return 0
	}
	res, err := a.Sharded.Sweep(ctx, slots)
	if err != nil {
		log.Error(err, "Could not sweep the slots before leaving: a deletion the watch had not brought yet is lost", "slots", slots)
	}
	for _, d := range res.Deleted {
		a.gate.routed(d, "swept")
		if a.gate.admit(d) {
			a.Controller.OnDelta(d)
			admitted++
		}
	}
	return admitted
}

// startWatcher lets Run start the watcher (with the shard just set).
func (a *App) startWatcher() { a.startOnce.Do(func() { close(a.watcherStart) }) }

// onClaims is called by the ring (on its goroutine) when this replica's
// claims change.
func (a *App) onClaims(c ring.Claims) {
	watched, gained, replay := a.gate.set(c)
	// The watcher starts with the first target (the ring gives none until
	// its view is settled); the replica claims a slot only once the
	// watcher has listed it.
	if !watched.Empty() && watched != a.watched {
		a.watched = watched
		a.Sharded.SetShard(watched.Set())
		a.startWatcher()
	}
	// The deletions it heard of before it worked their slots (the old
	// owner may have handled some: a deletion is handled at least once,
	// never by two replicas at once), first: nothing else tells of them,
	// and queued behind the resync below (every stored key of the slots)
	// they waited for all of it.
	for _, d := range replay {
		a.Controller.OnDelta(d)
	}
	if !gained.Empty() {
		// Taken over: whatever the store holds of these slots gets a
		// reconcile (the watcher's relist hands out the rest as Added, and
		// the gate now lets them in).
		a.Controller.Resync(a.gate.keysIn(gained))
	}
}
