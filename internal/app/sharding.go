package app

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"rawwatch/reconcile"
	"rawwatch/ring"
	"rawwatch/shard"
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
}

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
// key's slot, and knows which slots have reconciles in flight (the ring
// releases a slot only once none is).
type gate struct {
	store *store.Store[Object]

	mu      sync.Mutex
	working shard.SlotSet
	flights map[*flight]struct{}
}

type flight struct {
	slot   int
	cancel context.CancelFunc
}

func newGate(s *store.Store[Object]) *gate {
	return &gate{store: s, flights: map[*flight]struct{}{}}
}

// owns tells whether this replica works obj's slot now.
func (g *gate) owns(obj Object) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.working.Has(shard.SlotOf(string(obj.GetUID())))
}

// enter starts a reconcile in obj's slot, if this replica works it; leave
// must follow. The reconcile's context ends when the slot is taken away
// without being released (the replica was fenced).
func (g *gate) enter(ctx context.Context, obj Object) (_ context.Context, leave func(), ok bool) {
	slot := shard.SlotOf(string(obj.GetUID()))
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.working.Has(slot) {
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

// busy is the slots with a reconcile in flight.
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
// the slots newly worked.
func (g *gate) set(c ring.Claims) (gained shard.SlotSet) {
	g.mu.Lock()
	defer g.mu.Unlock()
	gained = c.Working.Minus(g.working)
	g.working = c.Working
	for f := range g.flights {
		if !c.Claimed().Has(f.slot) {
			f.cancel()
		}
	}
	return gained
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
	ctx, leave, ok := r.gate.enter(ctx, obj)
	if !ok {
		return nil
	}
	defer leave()
	return r.next.Reconcile(ctx, key)
}

func (r gatedReconciler) Deleted(ctx context.Context, d store.Delta[Object]) error {
	ctx, leave, ok := r.gate.enter(ctx, d.Object)
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
	// renewal until the replica fences itself.
	cfg := rest.CopyConfig(a.opts.Config)
	cfg.UserAgent = cmp.Or(cfg.UserAgent, rest.DefaultKubernetesUserAgent()) + " ring"
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return ring.New(ring.Config{
		Client: kube, Namespace: s.Namespace, Ring: s.Ring, Identity: s.Identity,
		LeaseDuration: s.LeaseDuration, RenewPeriod: s.RenewPeriod,
		Observer: a.observer, OnClaims: a.onClaims, Busy: a.gate.busy,
	})
}

// startWatcher lets Run start the watcher (with the shard just set).
func (a *App) startWatcher() { a.startOnce.Do(func() { close(a.watcherStart) }) }

// onClaims is called by the ring (on its goroutine) when this replica's
// claims change.
func (a *App) onClaims(c ring.Claims) {
	gained := a.gate.set(c)
	// The watcher starts with the first slots this replica works, not
	// before: until then its view of the ring may be partial (replicas
	// started together each see themselves alone at first, and would each
	// list everything once for nothing).
	if watched := c.Watched(); !watched.Empty() && watched != a.watched && (!a.watched.Empty() || !c.Working.Empty()) {
		a.watched = watched
		a.Watcher.SetShard(watched.Set())
		a.startWatcher()
	}
	if !gained.Empty() {
		// Taken over: whatever the store holds of these slots gets a
		// reconcile (the watcher's relist hands out the rest as Added, and
		// the gate now lets them in).
		a.Controller.Resync(a.gate.keysIn(gained))
	}
}
