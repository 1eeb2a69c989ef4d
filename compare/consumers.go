package compare

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"

	"rawwatch/api/v1alpha1"
	"rawwatch/client"
	"rawwatch/codec"
	"rawwatch/queue"
	"rawwatch/reconcile"
	"rawwatch/store"
	"rawwatch/watcher"
)

// Consumer kinds.
const (
	KindRaw          = "raw"
	KindRawWatchList = "raw-watchlist"
	KindInformer     = "informer"
	KindInformerList = "informer-list"
	KindBare         = "bare"
	// KindInformerStripped is the informer as a careful client-go user runs
	// it: a transform drops managedFields before the object is cached.
	KindInformerStripped = "informer-stripped"
	// KindControllerRuntime is a controller-runtime manager's cache and a
	// controller at controller-runtime's defaults (crconsumer.go).
	KindControllerRuntime = "controller-runtime"
	// The delivery benchmark's own kinds (BenchmarkDelivery), not in
	// AllKinds: each changes one thing of a kind above, to tell what that
	// one thing costs.
	//
	// KindRawGeneric is raw decoding every object with the generic decoder
	// (metajson.Plain, encoding/json's rules), without MyResource's own.
	KindRawGeneric = "raw-generic"
	// KindInformerFastDecode is informer-stripped decoding MyResources with
	// MyResource's own decoder, through a runtime.Serializer (fastdecode.go).
	KindInformerFastDecode = "informer-fastdecode"
	// KindControllerRuntimeStripped is controller-runtime with its cache's
	// DefaultTransform dropping managedFields.
	KindControllerRuntimeStripped = "controller-runtime-stripped"
	// KindNoBackoff is a consumer broken on purpose, not in AllKinds: bare
	// with a store of its own and no pause at all: whenever a request fails
	// or a WATCH ends, it asks again at once (LISTs again at once on a
	// 410). The fault scorecard's own test holds the scorecard to calling
	// it stormed.
	KindNoBackoff = "nobackoff"
)

// AllKinds is every consumer, in report order.
var AllKinds = []string{KindRaw, KindRawWatchList, KindInformer, KindInformerList, KindInformerStripped, KindControllerRuntime, KindBare}

// Kinds is every consumer kind the harness runs, in report order (NewConsumer
// builds BenchKinds and KindNoBackoff too).
func Kinds() []string { return slices.Clone(AllKinds) }

// BenchKinds are the delivery benchmark's own kinds, which NewConsumer
// builds too.
var BenchKinds = []string{KindRawGeneric, KindInformerFastDecode, KindControllerRuntimeStripped}

// consumer is one way of keeping up with the MyResources of a namespace.
type consumer interface {
	// run consumes until ctx ends; synced is closed after the initial sync.
	run(ctx context.Context, synced chan<- struct{})
	// storeLen is the number of cached objects (-1 without a cache).
	storeLen() int
	// queued is the number of keys waiting for a worker (0 without a queue).
	queued() int
	// lists is the number of (re)lists completed, if the consumer can tell
	// (-1 if not: the harness then infers it from the events, see relisted).
	lists() int64
	// dump is the cache as key → resourceVersion (nil without a cache).
	dump() map[string]string
}

type object = *v1alpha1.MyResource

// ---- raw: this project's watcher + store + queue ----

// rawConsumer is raw for T, *v1alpha1.MyResource (the binary's) or
// *genericResource (raw-generic).
type rawConsumer[T watcher.Object] struct {
	store *store.Store[T]
	w     *watcher.Watcher[T]
	ctrl  *reconcile.Controller[T]
}

// genericResource is MyResource without its own decoder (a defined type
// keeps the fields, and the methods of the embedded TypeMeta and
// ObjectMeta, but not MyResource's DecodeJSONFrom): the watcher decodes
// it with the generic decoder, metajson.Plain.
type genericResource v1alpha1.MyResource

// noopReconciler reads the object from the cache, as a reconciler would, and
// does nothing else: the harness times the machinery, not a reconcile.
type noopReconciler[T watcher.Object] struct{ store *store.Store[T] }

func (n noopReconciler[T]) Reconcile(_ context.Context, key string) error {
	n.store.Get(key)
	return nil
}

func (noopReconciler[T]) Deleted(context.Context, store.Delta[T]) error { return nil }

func newRaw[T watcher.Object](cfg *rest.Config, ns string, rec *recorder, watchList bool, dropEvery int, drop []string, wire codec.Wire) (consumer, error) {
	c, err := client.New(cfg)
	if err != nil {
		return nil, err
	}
	r := &rawConsumer[T]{store: store.New[T]()}
	r.store.Share() // as the controller's store: its reconciler writes to no cached object
	if len(drop) > 0 {
		r.store.SetTransformKeepingLabels(store.DropAnnotations[T](drop...))
	}
	r.ctrl = &reconcile.Controller[T]{Queue: queue.New(nil), Reconciler: noopReconciler[T]{r.store}}
	var src watcher.Source = watcher.RESTSource{Client: c.REST(), Resource: v1alpha1.Resource, Namespace: ns}
	if dropEvery > 0 {
		src = droppingSource{Source: src, every: dropEvery}
	}
	var cdc watcher.Codec[T] = codec.JSON[T]{GVK: v1alpha1.GroupVersionKind, SharesLabels: r.store.SharesLabels}
	if wire == codec.WireCBOR {
		src, cdc, _ = codec.NewCBOR(src, v1alpha1.GroupVersionKind, cdc)
	}
	r.w = watcher.New(src, r.store, watcher.Options[T]{
		WatchList: watchList,
		Codec:     cdc,
		Handler: func(d store.Delta[T]) {
			typ := byte(EvAdd)
			switch d.Type {
			case store.Updated:
				typ = EvUpdate
			case store.Deleted:
				typ = EvDelete
			}
			rec.event(typ, d.Object.GetResourceVersion(), d.Key)
			r.ctrl.OnDelta(d)
		},
	})
	return r, nil
}

func (r *rawConsumer[T]) run(ctx context.Context, synced chan<- struct{}) {
	var wg sync.WaitGroup
	wg.Go(func() { r.w.Run(ctx) })
	select {
	case <-r.w.Synced():
		close(synced)
		r.ctrl.Run(ctx, nil, 2)
	case <-ctx.Done():
	}
	wg.Wait()
}

func (r *rawConsumer[T]) storeLen() int { return r.store.Len() }
func (r *rawConsumer[T]) queued() int   { return r.ctrl.Queue.Len() }
func (r *rawConsumer[T]) lists() int64  { return int64(r.w.Position().Lists) }

func (r *rawConsumer[T]) dump() map[string]string {
	out := map[string]string{}
	for _, o := range r.store.List() {
		out[store.KeyOf(o)] = o.GetResourceVersion()
	}
	return out
}

// ---- informer: client-go SharedIndexInformer + workqueue, sample-controller style ----

type informerConsumer struct {
	informer cache.SharedIndexInformer
	queue    workqueue.TypedRateLimitingInterface[string]
}

// newInformer builds the informer consumer; strip drops every object's
// managedFields before it is cached (informer-stripped), fast decodes
// MyResources with their own decoder (informer-fastdecode).
func newInformer(cfg *rest.Config, ns string, rec *recorder, drop []string, strip, fast bool) (consumer, error) {
	c, err := newInformerClient(cfg, fast)
	if err != nil {
		return nil, err
	}
	lw := cache.NewListWatchFromClient(c, v1alpha1.Resource, ns, fields.Everything())
	inf := cache.NewSharedIndexInformer(lw, &v1alpha1.MyResource{}, 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	if t := cacheTransform(drop, strip); t != nil {
		if err := inf.SetTransform(t); err != nil {
			return nil, err
		}
	}
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	enqueue := func(typ byte, obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		o, ok := obj.(object)
		if !ok {
			return
		}
		key := store.KeyOf(o)
		rec.event(typ, o.ResourceVersion, key)
		q.Add(key)
	}
	_, err = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { enqueue(EvAdd, obj) },
		UpdateFunc: func(old, obj any) {
			if old.(object).ResourceVersion == obj.(object).ResourceVersion {
				enqueue(EvResync, obj)
				return
			}
			enqueue(EvUpdate, obj)
		},
		DeleteFunc: func(obj any) { enqueue(EvDelete, obj) },
	})
	if err != nil {
		return nil, err
	}
	return &informerConsumer{informer: inf, queue: q}, nil
}

func (i *informerConsumer) run(ctx context.Context, synced chan<- struct{}) {
	defer i.queue.ShutDown()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { i.informer.RunWithContext(ctx) })
	if !cache.WaitForCacheSync(ctx.Done(), i.informer.HasSynced) {
		return
	}
	close(synced)
	for range 2 {
		wg.Go(func() {
			for {
				key, shutdown := i.queue.Get()
				if shutdown {
					return
				}
				_, _, _ = i.informer.GetIndexer().GetByKey(key)
				i.queue.Forget(key)
				i.queue.Done(key)
			}
		})
	}
	<-ctx.Done()
	i.queue.ShutDown()
}

func (i *informerConsumer) storeLen() int { return len(i.informer.GetIndexer().ListKeys()) }
func (i *informerConsumer) queued() int   { return i.queue.Len() }
func (i *informerConsumer) lists() int64  { return -1 }

func (i *informerConsumer) dump() map[string]string {
	out := map[string]string{}
	for _, obj := range i.informer.GetIndexer().List() {
		o := obj.(object)
		out[store.KeyOf(o)] = o.ResourceVersion
	}
	return out
}

// cacheTransform is what an informer (or controller-runtime's cache) applies
// to every object before it reaches the indexer: the same annotation trim as
// the raw store's (store.DropAnnotations) if drop is set, and with strip
// controller-runtime's own helper that drops managedFields. Nil if neither.
func cacheTransform(drop []string, strip bool) cache.TransformFunc {
	var steps []cache.TransformFunc
	if strip {
		steps = append(steps, crcache.TransformStripManagedFields())
	}
	if len(drop) > 0 {
		trim := store.DropAnnotations[object](drop...)
		steps = append(steps, func(obj any) (any, error) {
			if o, ok := obj.(object); ok {
				trim(o)
			}
			return obj, nil
		})
	}
	if len(steps) == 0 {
		return nil
	}
	return func(obj any) (any, error) {
		for _, step := range steps {
			var err error
			if obj, err = step(obj); err != nil {
				return nil, err
			}
		}
		return obj, nil
	}
}

// ---- bare: LIST + WATCH with client-go's decoder, no cache, no queue ----

type bareConsumer struct {
	c        *client.Client
	ns       string
	rec      *recorder
	pageSize int64
	// pause is the wait after a failed request (bare: 1 s; nobackoff: none,
	// which is its bug).
	pause time.Duration
	// keep: key → resourceVersion, kept by nobackoff (nil for bare, which
	// caches nothing).
	mu   sync.Mutex
	keep map[string]string
}

func newBare(cfg *rest.Config, ns string, rec *recorder, pause time.Duration, keep bool) (consumer, error) {
	c, err := client.New(cfg)
	if err != nil {
		return nil, err
	}
	b := &bareConsumer{c: c, ns: ns, rec: rec, pageSize: 500, pause: pause}
	if keep {
		b.keep = map[string]string{}
	}
	return b, nil
}

// event hands one event to the recorder and, if b keeps a store, applies it.
func (b *bareConsumer) event(typ byte, rv, key string) {
	if b.keep != nil {
		b.mu.Lock()
		if typ == EvDelete {
			delete(b.keep, key)
		} else {
			b.keep[key] = rv
		}
		b.mu.Unlock()
	}
	b.rec.event(typ, rv, key)
}

func (b *bareConsumer) list(ctx context.Context) (string, error) {
	opts := metav1.ListOptions{Limit: b.pageSize}
	seen := map[string]bool{}
	for {
		l, err := b.c.List(ctx, b.ns, opts)
		if err != nil {
			return "", err
		}
		for i := range l.Items {
			o := &l.Items[i]
			seen[store.KeyOf(o)] = true
			b.event(EvAdd, o.ResourceVersion, store.KeyOf(o))
		}
		if l.Continue == "" {
			// A relist deletes what is gone from the store it keeps.
			for key, rv := range b.dump() {
				if !seen[key] {
					b.event(EvDelete, rv, key)
				}
			}
			return l.ResourceVersion, nil
		}
		opts = metav1.ListOptions{Limit: b.pageSize, Continue: l.Continue}
	}
}

func (b *bareConsumer) run(ctx context.Context, synced chan<- struct{}) {
	rv, needList, first := "", true, true
	for ctx.Err() == nil {
		if needList {
			var err error
			if rv, err = b.list(ctx); err != nil {
				sleep(ctx, b.pause)
				continue
			}
			needList = false
			if first {
				close(synced)
				first = false
			}
		}
		w, err := b.c.REST().Get().Namespace(b.ns).Resource(v1alpha1.Resource).
			VersionedParams(&metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}, metav1.ParameterCodec).
			Param("watch", "true").Watch(ctx)
		if err != nil {
			needList = apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
			sleep(ctx, b.pause)
			continue
		}
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				err := apierrors.FromObject(ev.Object)
				needList = apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
				break
			}
			o, ok := ev.Object.(object)
			if !ok {
				continue
			}
			rv = o.ResourceVersion
			switch ev.Type {
			case watch.Added:
				b.event(EvAdd, rv, store.KeyOf(o))
			case watch.Modified:
				b.event(EvUpdate, rv, store.KeyOf(o))
			case watch.Deleted:
				b.event(EvDelete, rv, store.KeyOf(o))
			}
		}
		w.Stop()
	}
}

func (b *bareConsumer) storeLen() int {
	if b.keep == nil {
		return -1
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.keep)
}
func (b *bareConsumer) queued() int  { return 0 }
func (b *bareConsumer) lists() int64 { return -1 }

func (b *bareConsumer) dump() map[string]string {
	if b.keep == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.keep)
}

func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// ---- a broken consumer, for the harness's own test ----

// droppingSource loses every n-th watch frame: a consumer built on it must get
// a failing verdict, which proves the verdict is computed from real data.
type droppingSource struct {
	watcher.Source
	every int
}

func (d droppingSource) Watch(ctx context.Context, opts metav1.ListOptions) (io.ReadCloser, error) {
	body, err := d.Source.Watch(ctx, opts)
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	go func() {
		defer body.Close()
		r := bufio.NewReaderSize(body, 64<<10)
		for n := 1; ; n++ {
			line, err := r.ReadBytes('\n')
			if len(line) > 0 && (n%d.every != 0 || bytes.Contains(line, []byte(`"BOOKMARK"`))) {
				if _, werr := pw.Write(line); werr != nil {
					return
				}
			}
			if err != nil {
				pw.CloseWithError(err)
				return
			}
		}
	}()
	return struct {
		io.Reader
		io.Closer
	}{pr, closerFunc(func() error { pr.Close(); return body.Close() })}, nil
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// newConsumer builds the consumer of the given kind, asking for wire (""
// is JSON): with CBOR, raw and raw-watchlist through codec.NewCBOR,
// the informer kinds through cfg's Accept header (which client-go sends
// only with KUBE_FEATURE_ClientsAllowCBOR=true in the environment:
// startConsumer sets it); controller-runtime and bare cannot ask
// (CanAsk) and refuse it.
func newConsumer(kind string, cfg *rest.Config, ns string, rec *recorder, dropEvery int, drop []string, wire codec.Wire) (consumer, error) {
	if wire == "" {
		wire = codec.WireJSON
	}
	if !CanAsk(kind, wire) {
		return nil, fmt.Errorf("consumer %s cannot ask for %s", kind, wire)
	}
	if wire == codec.WireCBOR && !strings.HasPrefix(kind, KindRaw) {
		cfg.AcceptContentTypes = codec.AcceptCBOR
	}
	switch kind {
	case KindRaw:
		return newRaw[object](cfg, ns, rec, false, dropEvery, drop, wire)
	case KindRawWatchList:
		return newRaw[object](cfg, ns, rec, true, dropEvery, drop, wire)
	case KindRawGeneric:
		return newRaw[*genericResource](cfg, ns, rec, false, dropEvery, drop, wire)
	case KindInformer, KindInformerList:
		// informer-list runs with KUBE_FEATURE_WatchListClient=false in its
		// environment (client-go reads its feature gates from there).
		return newInformer(cfg, ns, rec, drop, false, false)
	case KindInformerStripped:
		return newInformer(cfg, ns, rec, drop, true, false)
	case KindInformerFastDecode:
		return newInformer(cfg, ns, rec, drop, true, true)
	case KindControllerRuntime:
		return newControllerRuntime(cfg, ns, rec, drop, false)
	case KindControllerRuntimeStripped:
		return newControllerRuntime(cfg, ns, rec, drop, true)
	case KindBare:
		return newBare(cfg, ns, rec, time.Second, false)
	case KindNoBackoff:
		return newBare(cfg, ns, rec, 0, true)
	}
	return nil, fmt.Errorf("unknown consumer kind %q", kind)
}

// CanAsk says whether a consumer of kind can ask for wire: every kind for
// JSON; for CBOR raw, raw-watchlist and the informer kinds (whose client-go
// needs KUBE_FEATURE_ClientsAllowCBOR=true). controller-runtime's cache and
// bare's client-go decoding are not wired for it here: they read JSON.
func CanAsk(kind string, wire codec.Wire) bool {
	if wire != codec.WireCBOR {
		return true
	}
	switch kind {
	case KindRaw, KindRawWatchList, KindRawGeneric, KindInformer, KindInformerList, KindInformerStripped:
		return true
	}
	return false
}

// ---- the consumers, for callers outside this package ----

// Consumer is one consumer of a kind (Kinds), the same code the harness runs
// in its consumer processes, built by NewConsumer for a caller outside this
// package: a fault scorecard, say, that puts every kind through the same
// faults and compares what each ends up holding with the server.
//
//	c, err := compare.NewConsumer(compare.KindRaw, cfg, "ns", compare.ConsumerConfig{})
//	synced := make(chan struct{})
//	go c.Run(ctx, synced)
//	<-synced
//	... c.Dump() against a LIST of the server ...
type Consumer struct {
	c   consumer
	rec *recorder
}

// ConsumerConfig configures NewConsumer; its zero value is the harness's
// default consumer.
type ConsumerConfig struct {
	// DropAnnotations are trimmed from every object the consumer caches
	// (the raw store's SetTransform, an informer's or controller-runtime's
	// cache transform; bare caches nothing).
	DropAnnotations []string
	// OnEvent, if set, hears every handler call: its type (EvAdd, EvUpdate,
	// EvDelete, EvResync), the object's resourceVersion and key, and when
	// (unix ns). It runs on the consumer's event-handler goroutine, as a
	// handler's own work would: what it takes, the handler takes (the
	// fault scorecard's slow-consumer fault blocks in it on purpose).
	OnEvent func(typ byte, rv, key string, at int64)
	// Wire is the encoding the consumer asks for (default JSON). CBOR: raw
	// and raw-watchlist through codec.NewCBOR; the informer kinds
	// through an Accept header preferring CBOR, which client-go sends only
	// with its ClientsAllowCBOR feature gate on (KUBE_FEATURE_ClientsAllowCBOR=true
	// in the process's environment; otherwise it asks for JSON). The other
	// kinds refuse it (CanAsk).
	Wire codec.Wire
	// EventsPath, if set, receives every handler call, one line each:
	// "T RV AT KEY" (T: EvAdd, EvUpdate, EvDelete or EvResync; AT: unix
	// ns), as the harness's consumers record theirs; Close writes it out.
	EventsPath string
}

// EventCounts are the handler calls a consumer has made, by type.
type EventCounts struct{ Adds, Updates, Deletes, Resyncs int64 }

// NewConsumer builds a consumer of kind watching namespace ns with cfg
// (which it copies; cfg's QPS and Burst are its client-side limits).
//
// client-go reads its WatchListClient feature gate once per process from
// the environment (KUBE_FEATURE_WatchListClient): in one process, informer
// and informer-list are the same consumer, and informer-stripped and
// controller-runtime follow the same gate. The harness runs each kind in a
// process of its own for that reason (startConsumer).
func NewConsumer(kind string, cfg *rest.Config, ns string, cc ConsumerConfig) (*Consumer, error) {
	rec := discardRecorder()
	if cc.EventsPath != "" {
		var err error
		if rec, err = newRecorder(cc.EventsPath); err != nil {
			return nil, err
		}
	}
	rec.onEvent = cc.OnEvent
	cfg = rest.CopyConfig(cfg)
	c, err := newConsumer(kind, cfg, ns, rec, 0, cc.DropAnnotations, cc.Wire)
	if err != nil {
		rec.close()
		return nil, err
	}
	return &Consumer{c: c, rec: rec}, nil
}

// Close writes out the events recorded to ConsumerConfig.EventsPath; call
// it once Run has returned.
func (c *Consumer) Close() error { return c.rec.close() }

// Run consumes until ctx ends; synced is closed after the initial sync.
func (c *Consumer) Run(ctx context.Context, synced chan<- struct{}) { c.c.run(ctx, synced) }

// StoreLen is the number of cached objects (-1 for bare, which caches none).
func (c *Consumer) StoreLen() int { return c.c.storeLen() }

// Queued is the number of keys waiting for a worker.
func (c *Consumer) Queued() int { return c.c.queued() }

// Lists is the number of (re)lists completed, -1 if the kind cannot tell.
func (c *Consumer) Lists() int64 { return c.c.lists() }

// Dump is the cache as key → resourceVersion (nil for bare).
func (c *Consumer) Dump() map[string]string { return c.c.dump() }

// Events are the handler calls so far.
func (c *Consumer) Events() EventCounts {
	return EventCounts{Adds: c.rec.count(EvAdd), Updates: c.rec.count(EvUpdate), Deletes: c.rec.count(EvDelete), Resyncs: c.rec.count(EvResync)}
}
