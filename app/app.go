// Package app assembles the controller from its parts and runs it:
//
//	API server ──LIST/WATCH──▶ watcher ──writes──▶ store ──deltas──▶ queue
//	                                                 ▲                 │ keys
//	API server ◀──PUT /status, Events── reconciler ◀─┴── reads ── workers
//
// main.go turns flags into Options; tests and the benchmark harness build the
// same App with hooks to observe or replace parts.
//
// Around that core, the App plugs in what running in production needs:
// Prometheus metrics (package metrics) and the --explain narration (package
// explain) on every hook, /healthz, /readyz and /leaderz (package health),
// and, with leader election (package leader), workers that run only while
// this replica holds the Lease. A standby replica still lists and watches, so
// its cache is warm when it takes over; its deltas are not queued (a standby
// could otherwise gather tombstones without bound), and the new leader queues
// every key in its store instead — the same resync a controller-runtime
// controller does when it starts. Deletions that happened while it stood by
// are therefore not replayed; this controller has nothing to clean up on
// deletion (a controller that has must use a finalizer anyway).
//
// With sharding (sharding.go) every replica works, each on its part of the
// objects: it joins a ring of Leases (package ring), watches the slots it
// claims or should own (sharding.Watcher.SetShard), and a gate lets a reconcile start
// only in a slot it works. A slot changes hands only once the old owner has
// no reconcile of it in flight; a key that moved is dropped from the old
// owner's store without a deletion, and the new owner reconciles every key
// it took over. A replica leaving cleanly handles the deletions it heard of
// before it lets its slots go (drain).
package app

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"rawwatch/api/v1alpha1"
	"rawwatch/client"
	"rawwatch/codec"
	"rawwatch/explain"
	"rawwatch/freshness"
	"rawwatch/health"
	"rawwatch/internal/authz"
	"rawwatch/leader"
	"rawwatch/metrics"
	"rawwatch/observe"
	"rawwatch/queue"
	"rawwatch/reconcile"
	"rawwatch/reconcile/myresource"
	"rawwatch/ring"
	"rawwatch/shard"
	"rawwatch/sharding"
	"rawwatch/stats"
	"rawwatch/store"
	"rawwatch/ui"
	"rawwatch/watcher"
)

// Object is the type this controller watches.
type Object = *v1alpha1.MyResource

// The client-side rate limit main.go gives the controller's clients unless
// told otherwise (--kube-api-qps, --kube-api-burst; the status writer and
// the Event recorder each have a bucket of this size), and the Events the
// reconciler records (--events). Chosen from measurements: see "Whole-
// controller convergence" in docs/benchmarks.md. At 50/s, 10,000 creates
// took 198 s to converge, exactly what the limiter allows; an Event for
// every success costs the server a write per object, and client-go drops
// Events beyond 1,000 queued anyway.
const (
	DefaultQPS    = 200
	DefaultBurst  = 400
	DefaultEvents = myresource.EventsWarnings
)

// Options configure an App. Zero values mean the defaults main.go documents.
type Options struct {
	Config    *rest.Config
	Namespace string // "" = all namespaces
	Workers   int    // default reconcile.DefaultWorkers
	PageSize  int64  // default watcher.DefaultPageSize
	// RetryBase and RetryMax bound the per-key retry delay (default
	// queue.DefaultRetryBase and DefaultRetryMax).
	RetryBase, RetryMax time.Duration

	// CacheDropAnnotations are deleted from every object the store takes
	// (store.DropAnnotations): annotations the reconciler never reads.
	CacheDropAnnotations []string
	// DetectMutations runs the store's mutation detector
	// (store.DetectMutations; also on with RAWWATCH_CACHE_MUTATION_DETECTOR
	// and in tests): every cached object is compared with a copy of it
	// every second, and a difference panics.
	DetectMutations bool
	// Watch tunes the watcher (its Handler, Observer and Codec are set by
	// New).
	Watch watcher.Options[Object]
	// Wire is the encoding to ask the API server for (codec.WireJSON or
	// codec.WireCBOR); the watcher decodes with package codec's fast codecs.
	Wire codec.Wire
	// Observer hears every event of every part (package observe), after the
	// metrics and the narration.
	Observer observe.Observer
	// WrapStatusWriter and WrapReconciler, when set, wrap the real ones
	// (tests use them to count writes or inject failures).
	WrapStatusWriter func(myresource.StatusWriter) myresource.StatusWriter
	WrapReconciler   func(reconcile.Reconciler[Object]) reconcile.Reconciler[Object]
	// Events: which status writes the reconciler records an Event for
	// (leader election records its own). Unlike the other fields, the zero
	// value is not main.go's default (DefaultEvents, warnings only): it is
	// reconcile's, EventsAll, every write.
	Events myresource.EventPolicy

	// Version is reported as rawwatch_build_info.
	Version string
	// MetricsAddr serves /metrics, HealthAddr /healthz, /readyz and /leaderz
	// ("" or "0": off; the same address serves both, plain HTTP only). New
	// binds them, so a port in use fails at once; Run serves them.
	MetricsAddr, HealthAddr string
	// UIAddr serves the live page (package ui) on /ui/ ("" or "0": off).
	UIAddr string
	// SecureServing serves /metrics and the live page over HTTPS to callers
	// the API server authenticates and authorizes (package authz; the probes
	// stay plain). Without it they are plain HTTP, and only on loopback.
	SecureServing bool
	// CertDir holds tls.crt and tls.key for secure serving (read again
	// when they change); "" makes a self-signed certificate at start.
	CertDir string
	// Authz bounds secure serving's reviews and how long their answers are
	// kept (zero fields: authz's defaults). A grant taken away is refused
	// within AllowTTL.
	Authz authz.Options
	// StreamLifetime is how long one live-page event stream lasts (and a
	// random part of a quarter more) before its browser reconnects, and is
	// authorized again (0: ui.DefaultMaxStream).
	StreamLifetime time.Duration
	// Explain, when set, narrates every mechanic (--explain).
	Explain *explain.Narrator
	// LeaderElection, when set, runs the workers only while this process
	// holds the Lease it names. Its Observer and EventRecorder are set by New.
	LeaderElection *leader.Config
	// FreshnessProbe, when above zero, writes a heartbeat this often into
	// the MyResource freshness.DefaultName in FreshnessNamespace (default
	// Namespace) while this replica works, and times it (package freshness).
	FreshnessProbe     time.Duration
	FreshnessNamespace string
	// Sharding, when set, makes this process one replica of a sharded
	// controller (not with LeaderElection or FreshnessProbe).
	Sharding *Sharding
}

// App is an assembled controller.
type App struct {
	Store   *store.Store[Object]
	Queue   *queue.Queue
	Watcher *watcher.Watcher[Object]
	// Sharded is Watcher limited to this replica's shard; nil without
	// sharding.
	Sharded    *sharding.Watcher[Object]
	Controller *reconcile.Controller[Object]
	Client     *client.Client
	Metrics    *metrics.Metrics
	// Stats counts what the watcher did.
	Stats *stats.Counter
	// UI is the live page's hub; nil without UIAddr.
	UI *ui.Hub
	// Elector is nil without leader election.
	Elector *leader.Elector
	// Member is this replica's place in the ring; nil without sharding.
	Member *ring.Member
	// Liveness, Readiness and Leadership are the checks behind /healthz,
	// /readyz and /leaderz.
	Liveness, Readiness, Leadership health.Checks

	opts     Options
	kube     kubernetes.Interface
	events   record.EventBroadcaster
	enqueue  atomic.Bool // deltas reach the queue (false on a standby)
	observer observe.Observer
	served   []*endpoint      // bound by New, served by Run
	probe    *freshness.Probe // nil without FreshnessProbe

	// Sharding: the gate, what the watcher watches (the ring's goroutine),
	// and the start of the watcher, once the first shard is known.
	gate         *gate
	watched      shard.SlotSet
	watcherStart chan struct{}
	startOnce    sync.Once
}

// New builds an App; nothing runs until Run.
func New(opts Options) (_ *App, err error) {
	if opts.Config == nil {
		return nil, fmt.Errorf("app: no rest.Config")
	}
	if opts.Workers == 0 {
		opts.Workers = reconcile.DefaultWorkers
	}
	if opts.RetryBase == 0 {
		opts.RetryBase = queue.DefaultRetryBase
	}
	if opts.RetryMax == 0 {
		opts.RetryMax = queue.DefaultRetryMax
	}
	if opts.Sharding != nil && (opts.LeaderElection != nil || opts.FreshnessProbe > 0) {
		return nil, fmt.Errorf("app: sharding goes with neither leader election (every replica works) nor the freshness probe (its one object lives in one shard)")
	}
	myClient, err := client.New(opts.Config)
	if err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(opts.Config)
	if err != nil {
		return nil, err
	}

	a := &App{Client: myClient, opts: opts, Store: store.New[Object](), kube: kube}
	// The store shares equal label maps and repeated strings between its
	// objects (less memory and CPU per event): safe here, as nothing writes
	// to a cached object (the reconciler DeepCopies before it writes; the
	// mutation detector would say otherwise).
	a.Store.Share()
	if opts.DetectMutations {
		a.Store.DetectMutations()
	}
	if len(opts.CacheDropAnnotations) > 0 {
		a.Store.SetTransformKeepingLabels(store.DropAnnotations[Object](opts.CacheDropAnnotations...))
	}
	a.events = record.NewBroadcaster()
	defer func() {
		if err != nil { // its goroutines would outlive a failed New
			a.events.Shutdown()
		}
	}()
	a.events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	recorder := a.events.NewRecorder(client.Scheme, corev1.EventSource{Component: "rawwatch"})

	limiter := queue.NewRateLimiter(opts.RetryBase, opts.RetryMax)
	if opts.Sharding != nil {
		// A deletion waits behind no backlog: the slot may move before a
		// worker reaches it, and no other replica hears of it.
		a.Queue = queue.NewOrdered(limiter, sharding.NewDeletionsFirst(func(key string) bool { return a.Controller.HasDeletions(key) }))
	} else {
		a.Queue = queue.New(limiter)
	}
	a.Metrics = metrics.New(metrics.Options{Version: opts.Version,
		QueueDepth: a.Queue.Len, QueueDelayed: a.Queue.Pending, StoreObjects: a.Store.Len})
	// One fan-out for every part: the metrics, the counts, the narration,
	// the probe, the caller's.
	a.Stats = &stats.Counter{}
	observer := observe.Fanout{a.Metrics, a.Stats}
	if opts.Explain != nil {
		observer = append(observer, opts.Explain)
	}
	if opts.FreshnessProbe > 0 {
		if a.probe, err = a.newProbe(); err != nil {
			return nil, err
		}
		observer = append(observer, a.probe)
	}
	if opts.UIAddr != "" && opts.UIAddr != "0" {
		a.UI = ui.New(ui.Options{Queue: a.Queue.Snapshot, StoreLen: a.Store.Len, MaxStream: opts.StreamLifetime,
			Viewer: func(r *http.Request) string { return authz.User(r.Context()) }})
		observer = append(observer, a.UI)
	}
	if opts.Observer != nil {
		observer = append(observer, opts.Observer)
	}
	if a.probe != nil {
		a.probe.Observer = observer // it ignores its own events
	}
	a.observer = observer
	a.Queue.Observer = observer
	var status myresource.StatusWriter = myClient
	if opts.WrapStatusWriter != nil {
		status = opts.WrapStatusWriter(status)
	}
	var rec reconcile.Reconciler[Object] = &myresource.Reconciler{
		Store: a.Store, Client: status, Recorder: recorder, Events: opts.Events,
	}
	if opts.WrapReconciler != nil {
		rec = opts.WrapReconciler(rec)
	}
	if opts.Sharding != nil {
		a.gate = newGate(a.Store, observer)
		a.watcherStart = make(chan struct{})
		rec = gatedReconciler{next: rec, gate: a.gate}
	}
	a.Controller = &reconcile.Controller[Object]{
		Queue: a.Queue, Reconciler: rec, Observer: observer,
	}

	wopts := opts.Watch
	wopts.PageSize = opts.PageSize
	wopts.Observer = observer
	wopts.Handler = func(d store.Delta[Object]) {
		if a.enqueue.Load() && (a.gate == nil || a.gate.admit(d)) {
			a.Controller.OnDelta(d)
		}
	}
	wopts.Codec = codec.JSON[Object]{GVK: v1alpha1.GroupVersionKind, SharesLabels: a.Store.SharesLabels}
	var src watcher.Source = watcher.RESTSource{Client: myClient.REST(), Resource: v1alpha1.Resource, Namespace: opts.Namespace}
	if opts.Wire == codec.WireCBOR {
		src, wopts.Codec, _ = codec.NewCBOR(src, v1alpha1.GroupVersionKind, wopts.Codec)
	}
	if opts.Sharding != nil {
		a.Sharded = sharding.NewWatcher(src, a.Store, wopts, nil) // the first claims say what to watch
		a.Watcher = a.Sharded.Watcher
	} else {
		a.Watcher = watcher.New(src, a.Store, wopts)
	}
	if a.UI != nil {
		a.UI.SetResourceVersion(a.Watcher.ResourceVersion)
	}

	if opts.LeaderElection == nil {
		a.enqueue.Store(true)
		observer.Observe(leader.Leading{Leading: true}) // the one replica works
		if opts.Sharding != nil {
			if a.Member, err = a.newMember(); err != nil {
				return nil, err
			}
			a.gate.now = a.Member.Now // the fence's clock, which counts a suspend
		}
	} else {
		lc := *opts.LeaderElection
		lc.Observer, lc.EventRecorder = observer, recorder
		if a.Elector, err = leader.New(opts.Config, lc); err != nil {
			return nil, err
		}
	}
	a.addChecks()
	if a.served, err = a.endpoints(); err != nil {
		return nil, fmt.Errorf("app: %w", err)
	}
	if err = listen(a.served); err != nil {
		return nil, err
	}
	return a, nil
}

// Run serves the endpoints, runs the watcher, waits for its first list, then
// runs the workers until ctx ends — with leader election, only while this
// process holds the Lease. It returns once in-flight reconciles have
// finished (with sharding: and the deletions heard of were handled, within
// Sharding.DrainTimeout of ctx's end, and the ring was left): nil after ctx
// ended, leader.ErrLost if the Lease was lost. Every part logs through
// klog.FromContext(ctx), under its own name.
func (a *App) Run(ctx context.Context) error {
	log := klog.FromContext(ctx)
	defer a.events.Shutdown()
	stopServing, err := a.serve(log)
	if err != nil {
		a.closeListeners()
		return err
	}
	defer stopServing() // last: the probes answer while the rest drains
	watchCtx, stopWatching := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopWatching() // a lost lease ends the watcher too
	drain := func() {}
	if a.Member == nil {
		wg.Go(func() { a.Watcher.Run(watchCtx) })
	} else {
		// The ring is left (the Lease deleted, the slots free for the
		// others) only once the workers stopped and the deletions heard of
		// were handled (drain), within DrainTimeout of ctx's end: the
		// watcher runs until then, and the ring after it (deferred after
		// the rest).
		s := a.opts.Sharding
		ringCtx, leaveRing := context.WithCancel(context.WithoutCancel(ctx))
		defer leaveRing()
		drainCtx, stopDraining := context.WithCancel(context.WithoutCancel(ctx))
		defer stopDraining()
		defer context.AfterFunc(ctx, func() { time.AfterFunc(cmp.Or(s.DrainTimeout, DefaultDrainTimeout), stopDraining) })()
		// The handoff of the slots ends two renew periods before the
		// drain, for the sweep of what is still claimed then.
		handoffCtx, stopHandoff := context.WithCancel(drainCtx)
		defer stopHandoff()
		handoff := max(0, cmp.Or(s.DrainTimeout, DefaultDrainTimeout)-2*cmp.Or(s.RenewPeriod, ring.DefaultRenewPeriod))
		defer context.AfterFunc(ctx, func() { time.AfterFunc(handoff, stopHandoff) })()
		watcherCtx, stopWatcher := context.WithCancel(context.WithoutCancel(ctx))
		defer stopWatcher()
		watcherDone := make(chan struct{})
		// A clean leave hands the slots over first (ring.Member.Drain):
		// from ctx's end, while the workers finish and drain waits.
		defer context.AfterFunc(ctx, a.Member.Drain)()
		wg.Go(func() { a.Member.Run(ringCtx) })
		wg.Go(func() {
			a.sweep(ringCtx, cmp.Or(s.RenewPeriod, ring.DefaultRenewPeriod), cmp.Or(s.LeaseDuration, ring.DefaultLeaseDuration))
		})
		wg.Go(func() {
			defer close(watcherDone)
			select { // the first claims say what to watch
			case <-a.watcherStart:
				a.Sharded.Run(watcherCtx)
			case <-watcherCtx.Done():
			}
		})
		drain = func() { a.drain(klog.NewContext(drainCtx, log), handoffCtx, stopWatcher, watcherDone) }
	}
	wg.Go(func() { a.whoAmI(watchCtx) })
	if a.Store.DetectsMutations() {
		wg.Go(func() { checkCache(watchCtx, a.Store) })
	}

	log.Info("Waiting for the first list", "server", a.opts.Config.Host, "namespace", a.opts.Namespace)
	if a.Elector == nil {
		a.work(ctx, nil)
		drain()
		return nil
	}
	return a.Elector.Run(ctx, a.work)
}

// checkCache compares the cached objects with the mutation detector's
// copies every second until ctx ends, and panics at a difference: a cached
// object was changed in place, and nothing read from the cache can be
// trusted any more (client-go's detector panics too).
func checkCache(ctx context.Context, s *store.Store[Object]) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := s.CheckMutations(); err != nil {
				panic(err)
			}
		}
	}
}

// work waits for the first list and runs the workers until ctx ends; abort
// ending cancels the reconciles in flight (the Lease was lost).
func (a *App) work(ctx, abort context.Context) {
	select {
	case <-a.Watcher.Synced():
	case <-ctx.Done():
		return
	}
	if a.probe != nil {
		probeCtx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		defer wg.Wait()
		defer stop()
		wg.Go(func() { a.probe.Run(probeCtx) })
	}
	if !a.enqueue.Swap(true) {
		// We just took over: what happened before reached the store but not
		// the queue. Every key gets a reconcile (a level-triggered resync).
		a.Controller.Resync(a.Store.Keys())
	}
	klog.FromContext(ctx).Info("Synced; starting workers", "objects", a.Store.Len(),
		"resourceVersion", a.Watcher.ResourceVersion(), "workers", a.opts.Workers)
	a.Controller.Run(ctx, abort, a.opts.Workers)
}

// whoAmI logs who the server says we are (kubectl auth whoami): with an
// in-cluster token, the ServiceAccount the RBAC rules must grant.
func (a *App) whoAmI(ctx context.Context) {
	review, err := a.kube.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		klog.FromContext(ctx).V(1).Info("Could not ask the server who we are", "err", err)
		return
	}
	klog.FromContext(ctx).Info("Authenticated", "user", review.Status.UserInfo.Username, "groups", review.Status.UserInfo.Groups)
}

// newProbe sets up the freshness probe: its heartbeat is a merge patch of one
// annotation, creating the object the first time.
func (a *App) newProbe() (*freshness.Probe, error) {
	ns := cmp.Or(a.opts.FreshnessNamespace, a.opts.Namespace)
	if ns == "" {
		return nil, fmt.Errorf("app: the freshness probe needs a namespace for its object (FreshnessNamespace, or Namespace)")
	}
	if a.opts.Namespace != "" && ns != a.opts.Namespace {
		return nil, fmt.Errorf("app: the freshness probe's namespace %q is not the watched one, %q: the watcher would never see its heartbeats", ns, a.opts.Namespace)
	}
	if slices.Contains(a.opts.CacheDropAnnotations, freshness.Annotation) {
		return nil, fmt.Errorf("app: the freshness probe reads its heartbeat from the annotation %s, which CacheDropAnnotations drops", freshness.Annotation)
	}
	write := func(ctx context.Context, t time.Time) error {
		beat := t.UTC().Format(time.RFC3339Nano)
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{freshness.Annotation: beat}}})
		_, err := a.Client.Patch(ctx, ns, freshness.DefaultName, types.MergePatchType, patch)
		if apierrors.IsNotFound(err) {
			_, err = a.Client.Create(ctx, &v1alpha1.MyResource{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: freshness.DefaultName,
					Annotations: map[string]string{freshness.Annotation: beat},
					Labels:      map[string]string{"app.kubernetes.io/managed-by": "rawwatch"}},
				Spec: v1alpha1.MyResourceSpec{Message: "rawwatch's freshness probe writes a heartbeat here"},
			})
			if apierrors.IsForbidden(err) {
				err = fmt.Errorf("the probe's object %s/%s is missing, and this controller may not create it (config/components/freshness-probe ships it): %w", ns, freshness.DefaultName, err)
			}
		}
		return err
	}
	return &freshness.Probe{Key: store.Key(ns, freshness.DefaultName), Interval: a.opts.FreshnessProbe, Write: write}, nil
}
