// Package app assembles the controller from its parts and runs it:
//
//	API server ──LIST/WATCH──▶ watcher ──writes──▶ store ──deltas──▶ queue
//	                                                 ▲                 │ keys
//	API server ◀──PUT /status, Events── reconciler ◀─┴── reads ── workers
//
// main.go turns flags into Options; tests and the benchmark harness build the
// same App with hooks to observe or replace parts.
package app

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"rawwatch/api/v1alpha1"
	"rawwatch/client"
	"rawwatch/reconcile"
	"rawwatch/store"
	"rawwatch/watcher"
)

// Object is the type this controller watches.
type Object = *v1alpha1.MyResource

// Options configure an App. Zero values mean the defaults main.go documents.
type Options struct {
	Config    *rest.Config
	Namespace string // "" = all namespaces
	Workers   int    // default 2
	PageSize  int64  // default 500
	// RetryBase and RetryMax bound the per-key retry delay (default 5 ms, 1000 s).
	RetryBase, RetryMax time.Duration
	Logger              klog.Logger

	// Watch tunes the watcher (its Handler, Codec and Logger are set by New).
	Watch watcher.Options[Object]
	// WorkerObserver hears what the workers do.
	WorkerObserver reconcile.Observer
	// WrapStatusWriter and WrapReconciler, when set, wrap the real ones
	// (tests use them to count writes or inject failures).
	WrapStatusWriter func(reconcile.StatusWriter) reconcile.StatusWriter
	WrapReconciler   func(reconcile.Reconciler[Object]) reconcile.Reconciler[Object]
}

// App is an assembled controller.
type App struct {
	Store      *store.Store[Object]
	Queue      *store.Queue
	Watcher    *watcher.Watcher[Object]
	Controller *reconcile.Controller[Object]
	Client     *client.Client

	opts   Options
	events record.EventBroadcaster
}

// New builds an App; nothing runs until Run.
func New(opts Options) (*App, error) {
	if opts.Config == nil {
		return nil, fmt.Errorf("app: no rest.Config")
	}
	if opts.Workers == 0 {
		opts.Workers = 2
	}
	if opts.RetryBase == 0 {
		opts.RetryBase = 5 * time.Millisecond
	}
	if opts.RetryMax == 0 {
		opts.RetryMax = 1000 * time.Second
	}
	if opts.Logger.GetSink() == nil {
		opts.Logger = klog.Background()
	}
	log := opts.Logger
	myClient, err := client.New(opts.Config)
	if err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(opts.Config)
	if err != nil {
		return nil, err
	}

	a := &App{Client: myClient, opts: opts, Store: store.New[Object]()}
	a.events = record.NewBroadcaster()
	a.events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	recorder := a.events.NewRecorder(client.Scheme, corev1.EventSource{Component: "rawwatch"})

	a.Queue = store.NewQueue(store.MaxOf(
		store.NewExponentialLimiter(opts.RetryBase, opts.RetryMax),
		store.NewBucketLimiter(10, 100),
	))
	var status reconcile.StatusWriter = myClient
	if opts.WrapStatusWriter != nil {
		status = opts.WrapStatusWriter(status)
	}
	var rec reconcile.Reconciler[Object] = &reconcile.MyResourceReconciler{
		Store: a.Store, Client: status, Recorder: recorder, Logger: log.WithName("reconciler"),
	}
	if opts.WrapReconciler != nil {
		rec = opts.WrapReconciler(rec)
	}
	a.Controller = &reconcile.Controller[Object]{
		Queue: a.Queue, Reconciler: rec, Observer: opts.WorkerObserver, Logger: log.WithName("controller"),
	}

	wopts := opts.Watch
	wopts.PageSize = opts.PageSize
	wopts.Handler = a.Controller.OnDelta
	wopts.Codec = watcher.Codec[Object]{GVK: v1alpha1.GroupVersionKind}
	wopts.Logger = log.WithName("watcher")
	src := watcher.RESTSource{Client: myClient.REST(), Resource: v1alpha1.Resource, Namespace: opts.Namespace}
	a.Watcher = watcher.New(src, a.Store, wopts)
	return a, nil
}

// Run runs the watcher, waits for its first list, then runs the workers until
// ctx ends. It returns once in-flight reconciles have finished.
func (a *App) Run(ctx context.Context) error {
	log := a.opts.Logger
	defer a.events.Shutdown()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { a.Watcher.Run(ctx) })

	log.Info("Waiting for the first list", "server", a.opts.Config.Host, "namespace", a.opts.Namespace)
	select {
	case <-a.Watcher.Synced():
	case <-ctx.Done():
		return nil
	}
	log.Info("Synced; starting workers", "objects", a.Store.Len(),
		"resourceVersion", a.Watcher.ResourceVersion(), "workers", a.opts.Workers)
	a.Controller.Run(ctx, a.opts.Workers)
	return nil
}
