package compare

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"rawwatch/api/v1alpha1"
	"rawwatch/client"
	"rawwatch/reconcile/myresource"
	"rawwatch/store"
)

// informerController is rawwatch's reconciler on client-go's machinery,
// sample-controller style: a SharedIndexInformer, a rate-limited workqueue,
// workers, and Events through record.NewBroadcaster, with the client
// settings and the clients (a status writer, a clientset for Events) the
// real controller has (app).
type informerController struct {
	informer   cache.SharedIndexInformer
	queue      workqueue.TypedRateLimitingInterface[string]
	reconciler *myresource.Reconciler
	events     record.EventBroadcaster
	workers    int
}

// indexerGetter reads the informer's cache for the reconciler.
type indexerGetter struct{ cache.Indexer }

func (g indexerGetter) Get(key string) (*v1alpha1.MyResource, bool) {
	obj, ok, err := g.GetByKey(key)
	if err != nil || !ok {
		return nil, false
	}
	o, ok := obj.(*v1alpha1.MyResource)
	return o, ok
}

// newInformerController builds the informer controller; strip drops every
// object's managedFields before it is cached (informer-stripped).
func newInformerController(cfg *rest.Config, ns string, s Setting, strip bool) (*informerController, error) {
	c, err := client.New(cfg)
	if err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	lw := cache.NewListWatchFromClient(c.REST(), v1alpha1.Resource, ns, fields.Everything())
	ic := &informerController{
		informer: cache.NewSharedIndexInformer(lw, &v1alpha1.MyResource{}, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}),
		queue:    workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		workers:  s.Workers,
	}
	if strip {
		if err := ic.informer.SetTransform(cacheTransform(nil, true)); err != nil {
			return nil, err
		}
	}
	ic.reconciler = &myresource.Reconciler{Store: indexerGetter{ic.informer.GetIndexer()}, Client: c, Events: s.Events}
	if s.Events != myresource.EventsNone {
		ic.events = record.NewBroadcaster()
		ic.events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
		ic.reconciler.Recorder = ic.events.NewRecorder(client.Scheme, corev1.EventSource{Component: "informer-controller"})
	}
	enqueue := func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if o, ok := obj.(*v1alpha1.MyResource); ok {
			ic.queue.Add(store.KeyOf(o))
		}
	}
	_, err = ic.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	})
	return ic, err
}

// run runs the informer and, once it synced, the workers, until ctx ends.
func (ic *informerController) run(ctx context.Context, synced chan<- struct{}) error {
	if ic.events != nil {
		defer ic.events.Shutdown()
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ic.queue.ShutDown()
	wg.Go(func() { ic.informer.RunWithContext(ctx) })
	if !cache.WaitForCacheSync(ctx.Done(), ic.informer.HasSynced) {
		return ctx.Err()
	}
	close(synced)
	for range ic.workers {
		wg.Go(func() {
			for ic.next(ctx) {
			}
		})
	}
	<-ctx.Done()
	return nil
}

func (ic *informerController) next(ctx context.Context) bool {
	key, shutdown := ic.queue.Get()
	if shutdown {
		return false
	}
	defer ic.queue.Done(key)
	if err := ic.reconciler.Reconcile(ctx, key); err != nil {
		ic.queue.AddRateLimited(key)
		return true
	}
	ic.queue.Forget(key)
	return true
}

// ---- what a controller sends, counted in its transport ----

type transportCounts struct {
	mu       sync.Mutex
	requests map[string]int
	codes    map[int]int
	last     time.Time // the last request's answer
	eventAt  time.Time // the last Event write's answer
}

func (t *transportCounts) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		code := 0
		if resp != nil {
			code = resp.StatusCode
		}
		t.count(requestName(req), code)
		return resp, err
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// requestName is "VERB resource[/subresource]": the method, or WATCH or
// LIST for a GET of a watch or a collection.
func requestName(req *http.Request) string {
	// /api/v1/namespaces/NS/RESOURCE[/NAME[/SUB]] or
	// /apis/GROUP/VERSION/namespaces/NS/RESOURCE[/NAME[/SUB]]
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	switch {
	case len(parts) > 0 && parts[0] == "api":
		parts = parts[min(2, len(parts)):]
	case len(parts) > 0 && parts[0] == "apis":
		parts = parts[min(3, len(parts)):]
	}
	if len(parts) >= 2 && parts[0] == "namespaces" && len(parts) > 2 {
		parts = parts[2:]
	}
	resource, named := "", false
	switch len(parts) {
	case 0:
		resource = strings.Trim(req.URL.Path, "/")
	case 1:
		resource = parts[0]
	case 2:
		resource, named = parts[0], true
	default:
		resource, named = parts[0]+"/"+parts[2], true
	}
	verb := req.Method
	if verb == http.MethodGet && req.URL.Query().Get("watch") == "true" {
		verb = "WATCH"
	} else if verb == http.MethodGet && !named {
		verb = "LIST"
	}
	return verb + " " + resource
}

func (t *transportCounts) count(name string, code int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.requests == nil {
		t.requests, t.codes = map[string]int{}, map[int]int{}
	}
	t.requests[name]++
	t.codes[code]++
	t.last = time.Now()
	if strings.HasSuffix(name, " events") && !strings.HasPrefix(name, "WATCH") && !strings.HasPrefix(name, "LIST") {
		t.eventAt = t.last
	}
}

// settle waits until no request was answered for quiet, at most limit.
func (t *transportCounts) settle(quiet, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		t.mu.Lock()
		idle := time.Since(t.last)
		t.mu.Unlock()
		if idle >= quiet {
			return
		}
		time.Sleep(quiet - idle)
	}
}

func (t *transportCounts) snapshot() (map[string]int, map[int]int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r, c := map[string]int{}, map[int]int{}
	for k, v := range t.requests {
		r[k] = v
	}
	for k, v := range t.codes {
		c[k] = v
	}
	return r, c
}

func (t *transportCounts) lastEvent() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.eventAt
}
