package compare

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	crreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"rawwatch/api/v1alpha1"
	"rawwatch/client"
	"rawwatch/reconcile/myresource"
	"rawwatch/store"
)

// ---- controller-runtime: a manager's cache and a controller, at its defaults ----
//
// What most controller authors run: manager.New, and a controller built with
// builder.ControllerManagedBy(...).For(&MyResource{}) whose reconciler reads
// the object from the manager's cache (a deep copy, the cache's default) and
// does nothing else. Everything is controller-runtime's default (its
// priority queue, one worker, no transform, the cache's informer with
// client-go's WatchList gate as the process sets it) except what several
// managers in one process or a benchmark need: the metrics server is off (it
// would bind :8080), the cache watches one namespace as every other consumer
// does, and each controller has a name of its own. The events are recorded
// by a predicate, which controller-runtime calls from its informer's event
// handler before it enqueues: the same place the other consumers record.
//
// Linking controller-runtime into this package registers its client-go
// metrics (per REST request: a watch is one) and its workqueue metrics
// provider, which only named workqueues use: the informer consumers'
// queues are unnamed and stay without metrics.

type crConsumer struct {
	mgr   manager.Manager
	ns    string
	queue atomic.Pointer[priorityqueue.PriorityQueue[crreconcile.Request]]
	inf   atomic.Pointer[toolscache.SharedIndexInformer]
	src   *syncedSource
}

var (
	crNames     atomic.Int64
	crLoggerSet sync.Once
)

// crManagerOptions are the manager's options at controller-runtime's
// defaults, but for the metrics server (off: several managers share a
// process) and the cache, which watches namespace ns only.
func crManagerOptions(ns string) manager.Options {
	// controller-runtime logs through a logr it is given, and complains
	// (with a stack) when it never was: klog's, as the rest of the process
	// uses, its Info lines at -v=1 (its errors always).
	crLoggerSet.Do(func() { crlog.SetLogger(klog.Background().V(1)) })
	return manager.Options{
		Scheme:  client.Scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache:   crcache.Options{DefaultNamespaces: map[string]crcache.Config{ns: {}}},
	}
}

// crController adds to mgr a controller of MyResources built with
// controller-runtime's builder, with opts, preds and r: what
// For(&MyResource{}, WithPredicates(preds...)) builds, its source wrapped to
// say when the controller's own handler has synced (the informer syncs
// before the controller adds its handler, which then hears the cache as it
// is by then).
func crController(mgr manager.Manager, opts controller.Options, r crreconcile.Reconciler, preds ...predicate.TypedPredicate[object]) (*syncedSource, error) {
	src := &syncedSource{SyncingSource: source.Kind(mgr.GetCache(), &v1alpha1.MyResource{}, &handler.TypedEnqueueRequestForObject[object]{}, preds...),
		synced: make(chan struct{})}
	name := fmt.Sprintf("compare-%d", crNames.Add(1))
	return src, builder.ControllerManagedBy(mgr).Named(name).WatchesRawSource(src).WithOptions(opts).Complete(r)
}

// syncedSource is a source that closes synced once it has synced.
type syncedSource struct {
	source.SyncingSource
	synced chan struct{}
}

func (s *syncedSource) WaitForSync(ctx context.Context) error {
	err := s.SyncingSource.WaitForSync(ctx)
	if err == nil && ctx.Err() == nil {
		close(s.synced)
	}
	return err
}

// crRun runs mgr until ctx ends, closing synced once src has synced; it
// returns the manager's error.
func crRun(ctx context.Context, mgr manager.Manager, src *syncedSource, synced chan<- struct{}) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ended := make(chan error, 1)
	go func() { ended <- mgr.Start(ctx) }()
	select {
	case <-src.synced:
		close(synced)
	case err := <-ended:
		return err
	}
	return <-ended
}

// newControllerRuntime builds the controller-runtime consumer; strip drops
// managedFields in the cache's DefaultTransform (controller-runtime-stripped).
func newControllerRuntime(cfg *rest.Config, ns string, rec *recorder, drop []string, strip bool) (consumer, error) {
	opts := crManagerOptions(ns)
	// The raw store's annotation trim, when asked for (Transform all).
	opts.Cache.DefaultTransform = cacheTransform(drop, strip)
	c := &crConsumer{ns: ns}
	// The cache's default informer constructor, wrapped to keep the
	// informer: its store is what storeLen and dump read (the cache's own
	// reader would copy every object out).
	opts.Cache.NewInformer = func(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, ix toolscache.Indexers) toolscache.SharedIndexInformer {
		inf := toolscache.NewSharedIndexInformer(lw, obj, resync, ix)
		c.inf.Store(&inf)
		return inf
	}
	mgr, err := manager.New(rest.CopyConfig(cfg), opts)
	if err != nil {
		return nil, err
	}
	c.mgr = mgr
	record := predicate.TypedFuncs[object]{
		CreateFunc: func(e event.TypedCreateEvent[object]) bool {
			rec.event(EvAdd, e.Object.ResourceVersion, store.KeyOf(e.Object))
			return true
		},
		UpdateFunc: func(e event.TypedUpdateEvent[object]) bool {
			typ := byte(EvUpdate)
			if e.ObjectOld.ResourceVersion == e.ObjectNew.ResourceVersion {
				typ = EvResync
			}
			rec.event(typ, e.ObjectNew.ResourceVersion, store.KeyOf(e.ObjectNew))
			return true
		},
		DeleteFunc: func(e event.TypedDeleteEvent[object]) bool {
			rec.event(EvDelete, e.Object.ResourceVersion, store.KeyOf(e.Object))
			return true
		},
	}
	reader := mgr.GetCache()
	noop := crreconcile.Func(func(ctx context.Context, req crreconcile.Request) (crreconcile.Result, error) {
		var o v1alpha1.MyResource
		_ = reader.Get(ctx, req.NamespacedName, &o)
		return crreconcile.Result{}, nil
	})
	c.src, err = crController(mgr, controller.Options{
		// The default queue (controller.NewTypedUnmanaged's, with
		// UsePriorityQueue unset), built here only to read its length.
		NewQueue: func(name string, rl workqueue.TypedRateLimiter[crreconcile.Request]) workqueue.TypedRateLimitingInterface[crreconcile.Request] {
			q := priorityqueue.New(name, func(o *priorityqueue.Opts[crreconcile.Request]) {
				o.Log = mgr.GetLogger().WithValues("controller", name)
				o.RateLimiter = rl
			})
			c.queue.Store(&q)
			return q
		},
	}, noop, record)
	if err != nil {
		return nil, err
	}
	return c, nil
}

func (c *crConsumer) run(ctx context.Context, synced chan<- struct{}) {
	if err := crRun(ctx, c.mgr, c.src, synced); err != nil {
		klog.ErrorS(err, "controller-runtime manager")
	}
}

func (c *crConsumer) storeLen() int {
	if i := c.inf.Load(); i != nil {
		return len((*i).GetStore().ListKeys())
	}
	return 0
}

func (c *crConsumer) queued() int {
	if q := c.queue.Load(); q != nil {
		return (*q).Len()
	}
	return 0
}

func (c *crConsumer) lists() int64 { return -1 }

func (c *crConsumer) dump() map[string]string {
	out := map[string]string{}
	if i := c.inf.Load(); i != nil {
		for _, obj := range (*i).GetStore().List() {
			if o, ok := obj.(object); ok {
				out[store.KeyOf(o)] = o.ResourceVersion
			}
		}
	}
	return out
}

// ---- controller-runtime running rawwatch's reconciler (convergence) ----

// crConvergeController is rawwatch's reconciler on controller-runtime: a
// manager's cache and a controller built with its builder, at its defaults
// but for the workers (MaxConcurrentReconciles, the setting's), with the
// manager's own Event recorder, and the status writer the real controller
// has. A failed reconcile is requeued by controller-runtime's rate limiter.
type crConvergeController struct {
	mgr manager.Manager
	src *syncedSource
}

// cacheGetter reads controller-runtime's cache for the reconciler (a deep
// copy, the cache's default).
type cacheGetter struct{ crcache.Cache }

func (g cacheGetter) Get(key string) (*v1alpha1.MyResource, bool) {
	ns, name, _ := strings.Cut(key, "/")
	var o v1alpha1.MyResource
	if err := g.Cache.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &o); err != nil {
		return nil, false
	}
	return &o, true
}

func newCRController(cfg *rest.Config, ns string, s Setting) (*crConvergeController, error) {
	c, err := client.New(cfg)
	if err != nil {
		return nil, err
	}
	mgr, err := manager.New(cfg, crManagerOptions(ns))
	if err != nil {
		return nil, err
	}
	r := &myresource.Reconciler{Store: cacheGetter{mgr.GetCache()}, Client: c, Events: s.Events}
	if s.Events != myresource.EventsNone {
		// The core/v1 Event recorder, as the informer controller's and
		// rawwatch's (the events/v1 one, GetEventRecorder, writes another
		// resource).
		r.Recorder = mgr.GetEventRecorderFor("controller-runtime-controller")
	}
	src, err := crController(mgr, controller.Options{MaxConcurrentReconciles: s.Workers},
		crreconcile.Func(func(ctx context.Context, req crreconcile.Request) (crreconcile.Result, error) {
			return crreconcile.Result{}, r.Reconcile(ctx, req.Namespace+"/"+req.Name)
		}))
	if err != nil {
		return nil, err
	}
	return &crConvergeController{mgr: mgr, src: src}, nil
}

// run runs the manager until ctx ends; synced is closed once the
// controller's handler has synced.
func (c *crConvergeController) run(ctx context.Context, synced chan<- struct{}) error {
	return crRun(ctx, c.mgr, c.src, synced)
}
