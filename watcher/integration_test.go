package watcher_test

import (
	"context"
	"io"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"rawwatch/api/v1alpha1"
	"rawwatch/codec"
	"rawwatch/faultproxy"
	"rawwatch/internal/controlplane"
	"rawwatch/internal/testkit"
	"rawwatch/observe"
	"rawwatch/stats"
	"rawwatch/store"
	"rawwatch/watcher"
)

func TestMain(m *testing.M) { testkit.Main(m) }

type object = *v1alpha1.MyResource

// recorder keeps what the watcher told its handler and observer.
type recorder struct {
	testkit.Deltas[object]
	mu             sync.Mutex
	watchRVs       []string
	watchInitial   []bool
	replaced       int
	lastRelistDel  int
	probesAnswered int // probes that got an answer (a refused one never reached the server)
	waits          []wait
}

// wait is one backoff the loop chose, with the error class behind it.
type wait struct {
	d     time.Duration
	class watcher.ErrorClass
}

// Observe records the backoffs and the watches started.
func (r *recorder) Observe(e observe.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch e := e.(type) {
	case watcher.BackoffStarted:
		r.waits = append(r.waits, wait{e.Delay, e.Class})
	case watcher.WatchStarted:
		r.watchRVs = append(r.watchRVs, e.RV)
		r.watchInitial = append(r.watchInitial, e.InitialEvents)
	case watcher.Probed:
		if e.Err == nil {
			r.probesAnswered++
		}
	}
}

// backoffs returns the waits chosen for errors of class c.
func (r *recorder) backoffs(c watcher.ErrorClass) []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []time.Duration
	for _, w := range r.waits {
		if w.class == c {
			out = append(out, w.d)
		}
	}
	return out
}

type running struct {
	w     *watcher.Watcher[object]
	store *store.Store[object]
	rec   *recorder
	stats *stats.Counter
}

// fastBackoff keeps the tests quick; the shape (exponential, capped) is the default's.
var fastBackoff = watcher.Backoff{Initial: 50 * time.Millisecond, Max: 500 * time.Millisecond, Factor: 2, Jitter: 0.5, ResetAfter: 2 * time.Minute}

// watchingViaProxy starts a watcher of ns through a fault proxy in front of
// cp's apiserver, and waits until its watch is open.
func watchingViaProxy(t *testing.T, cp *controlplane.ControlPlane, ns string) (*faultproxy.Proxy, *running) {
	t.Helper()
	proxy, cfg := testkit.Proxy(t, cp, cp.APIServer)
	r := start(t, cfg, ns, watcher.Options[object]{})
	testkit.Eventually(t, 10*time.Second, func() bool { return proxy.OpenWatches() == 1 }, "no watch open")
	return proxy, r
}

// start runs a watcher on one namespace through cfg until the test ends.
func start(t *testing.T, cfg *rest.Config, ns string, opts watcher.Options[object]) *running {
	t.Helper()
	return startLogging(t, cfg, ns, opts, klog.Background())
}

// startLogging is start with the watcher's log going to logger.
func startLogging(t *testing.T, cfg *rest.Config, ns string, opts watcher.Options[object], logger klog.Logger) *running {
	t.Helper()
	return startWire(t, cfg, ns, opts, logger, codec.WireJSON)
}

// startWire is startLogging asking for wire, decoding with package codec's
// codecs for CBOR.
func startWire(t *testing.T, cfg *rest.Config, ns string, opts watcher.Options[object], logger klog.Logger, wire codec.Wire) *running {
	t.Helper()
	c := testkit.Client(t, cfg)
	r := &running{store: store.New[object](), rec: &recorder{}, stats: &stats.Counter{}}
	opts.Handler = r.rec.Handle
	if opts.Observer == nil {
		opts.Observer = r.rec
	}
	opts.Observer = observe.Fanout{r.stats, opts.Observer}
	opts.Codec = watcher.JSONCodec[object]{GVK: v1alpha1.GroupVersionKind}
	if opts.Backoff == (watcher.Backoff{}) {
		opts.Backoff = fastBackoff
	}
	var src watcher.Source = watcher.RESTSource{Client: c.REST(), Resource: v1alpha1.Resource, Namespace: ns}
	if wire == codec.WireCBOR {
		src, opts.Codec, _ = codec.NewCBOR(src, v1alpha1.GroupVersionKind, opts.Codec)
	}
	r.w = watcher.New(src, r.store, opts)
	testkit.RunSynced(t, r.w, logger)
	return r
}

// The initial LIST of 1,200 objects with page size 100 takes 12 pages, and
// the store ends with every object.
func TestInitialListIsPaginated(t *testing.T) {
	cp, ns, c := testkit.Parallel(t)
	testkit.Objects(t, c, ns, "obj", 1200)
	proxy, cfg := testkit.Proxy(t, cp, cp.APIServer)
	r := start(t, cfg, ns, watcher.Options[object]{PageSize: 100})

	st := r.stats.Counts()
	if st.ListPages < 12 || proxy.Counts().Lists < 12 {
		t.Errorf("list took %d pages (%d LIST requests seen by the proxy), want at least 12", st.ListPages, proxy.Counts().Lists)
	}
	if n := r.store.Len(); n != 1200 {
		t.Errorf("store holds %d objects, want 1200", n)
	}
	if n := r.rec.Count(store.Added); n != 1200 {
		t.Errorf("initial list produced %d Added deltas, want 1200", n)
	}
	if st.Lists != 1 || st.Relists != 0 {
		t.Errorf("lists %d relists %d, want 1 and 0", st.Lists, st.Relists)
	}
}

// Create, update and delete each reach the store and the handler, in order.
func TestWatchDeliversEvents(t *testing.T) {
	cp, ns, c := testkit.Parallel(t)
	r := start(t, cp.Config(), ns, watcher.Options[object]{})
	ctx := context.Background()
	key := ns + "/x"

	created := testkit.Create(t, c, ns, "x", "one")
	testkit.Eventually(t, 30*time.Second, func() bool { _, ok := r.rec.Find(key, store.Added); return ok }, "no Added delta")

	created.Spec.Message = "two"
	updated, err := c.Update(ctx, created)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, func() bool {
		d, ok := r.rec.Find(key, store.Updated)
		return ok && d.Object.Spec.Message == "two" && d.Old.Spec.Message == "one"
	}, "no Updated delta with old and new objects")
	if got, _ := r.store.Get(key); got.ResourceVersion != updated.ResourceVersion {
		t.Errorf("store has resourceVersion %s, want %s", got.ResourceVersion, updated.ResourceVersion)
	}

	if err := c.Delete(ctx, ns, "x", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, func() bool { _, ok := r.rec.Find(key, store.Deleted); return ok }, "no Deleted delta")
	if d, _ := r.rec.Find(key, store.Deleted); d.FinalStateUnknown {
		t.Error("a DELETED event carries the final state; it must not be marked unknown")
	}
	if _, ok := r.store.Get(key); ok {
		t.Error("deleted object still in the store")
	}
}

// Bookmarks move the watcher's resourceVersion forward even when no event of
// ours happens: writes elsewhere advance the cluster's RV, and the bookmark
// brings it to us, so a re-watch starts from a recent RV.
func TestBookmarksAdvanceTheResourceVersion(t *testing.T) {
	cp, ns, _ := testkit.Parallel(t)
	other := testkit.Namespace(t, cp.Config())
	// This apiserver sends a bookmark shortly before a watch's timeoutSeconds
	// ends (and every minute): a 15 s watch gets one within about 13 s.
	r := start(t, cp.Config(), ns, watcher.Options[object]{WatchTimeoutMin: 15 * time.Second, WatchTimeoutMax: 15 * time.Second})
	listRV := r.w.ResourceVersion()

	written := testkit.Create(t, testkit.Client(t, cp.Config()), other, "elsewhere", "hi")
	testkit.Eventually(t, 45*time.Second, func() bool { return r.stats.Counts().Bookmarks > 0 }, "no bookmark received")

	st := r.stats.Counts()
	if st.Events != 0 {
		t.Fatalf("the watched namespace had %d events; the test needs none", st.Events)
	}
	if !rvAtLeast(st.LastBookmarkRV, written.ResourceVersion) {
		t.Errorf("bookmark RV %s is older than a write made before it (%s)", st.LastBookmarkRV, written.ResourceVersion)
	}
	if rv := r.w.ResourceVersion(); !rvAtLeast(rv, st.LastBookmarkRV) || rv == listRV {
		t.Errorf("watcher RV %s did not advance from the list's %s to the bookmark's %s", rv, listRV, st.LastBookmarkRV)
	}
}

// rvAtLeast compares resourceVersions numerically. (Clients must treat RVs as
// opaque; this test knows they are etcd revisions.)
func rvAtLeast(a, b string) bool {
	return len(a) > len(b) || (len(a) == len(b) && a >= b)
}

// A cut WATCH connection, and a server that refuses connections for a while,
// are followed by a re-WATCH from the last RV: no relist, nothing missed.
func TestBrokenWatchResumesWithoutRelist(t *testing.T) {
	cp, ns, c := testkit.Parallel(t)
	testkit.Objects(t, c, ns, "before", 5)
	proxy, r := watchingViaProxy(t, cp, ns)

	// 1. Cut the stream mid-way.
	rvAtCut := r.w.ResourceVersion()
	if n := proxy.CutWatches(); n != 1 {
		t.Fatalf("cut %d watches, want 1", n)
	}
	testkit.Create(t, c, ns, "after-cut", "hi")
	testkit.Eventually(t, 30*time.Second, func() bool { _, ok := r.rec.Find(ns+"/after-cut", store.Added); return ok },
		"object created after the cut never arrived")

	// 2. Refuse connections for a while: the watcher backs off and retries.
	proxy.Refuse()
	backoffsBefore := r.stats.Counts().Backoffs
	testkit.Create(t, c, ns, "while-down", "hi")
	testkit.Eventually(t, 10*time.Second, func() bool { return r.stats.Counts().Backoffs >= backoffsBefore+2 }, "no backoff while refused")
	if err := proxy.Accept(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, func() bool { _, ok := r.rec.Find(ns+"/while-down", store.Added); return ok },
		"object created while the server was unreachable never arrived")

	st := r.stats.Counts()
	// (Each time the WATCH could not open, the next request was a one-item
	// LIST probing the server's resourceVersion; the proxy sees those that
	// were not refused.)
	r.rec.mu.Lock()
	answered := r.rec.probesAnswered
	r.rec.mu.Unlock()
	if st.Lists != 1 || st.Relists != 0 || proxy.Counts().Lists != 1+int64(answered) || answered == 0 {
		t.Errorf("lists %d relists %d probes %d, %d answered (proxy saw %d LISTs): a broken watch must not cause a relist",
			st.Lists, st.Relists, st.Probes, answered, proxy.Counts().Lists)
	}
	r.rec.mu.Lock()
	rvs := append([]string(nil), r.rec.watchRVs...)
	r.rec.mu.Unlock()
	if len(rvs) < 3 {
		t.Fatalf("watch RVs %v: want the first watch, one after the cut, more after refusal", rvs)
	}
	if rvs[1] != rvAtCut {
		t.Errorf("re-watch after the cut started at %s, want the last RV %s", rvs[1], rvAtCut)
	}
	if n := r.store.Len(); n != 7 {
		t.Errorf("store holds %d objects, want 7", n)
	}
}

// A watch whose resourceVersion etcd has compacted gets a real 410 from an
// apiserver without watch cache: the watcher relists, the relist replaces
// the store, and an object deleted while the watch was down comes out as a
// Deleted delta carrying its last known state — also when its name was
// re-created meanwhile: that is another object (another UID), so the old one
// is reported deleted and the new one added, never as an update of the old.
func TestCompactedResourceVersionRelistsAndReportsDeletions(t *testing.T) {
	cp, ns, c := testkit.Start(t)
	uncached := testkit.Shared.Uncached(t)
	ctx := context.Background()
	for _, name := range []string{"keep", "change", "gone", "phoenix"} {
		testkit.Create(t, c, ns, name, "v1")
	}
	proxy, cfg := testkit.Proxy(t, cp, uncached)
	r := start(t, cfg, ns, watcher.Options[object]{})
	lastKnownGone, _ := r.store.Get(ns + "/gone")
	oldPhoenix, _ := r.store.Get(ns + "/phoenix")

	// The watcher loses the server; meanwhile the world moves on and etcd
	// compacts away the history the watcher would need to catch up.
	proxy.Refuse()
	if err := c.Delete(ctx, ns, "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	change, _ := c.Get(ctx, ns, "change")
	change.Spec.Message = "v2"
	if _, err := c.Update(ctx, change); err != nil {
		t.Fatal(err)
	}
	testkit.Create(t, c, ns, "fresh", "v1")
	if err := c.Delete(ctx, ns, "phoenix", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	newPhoenix := testkit.Create(t, c, ns, "phoenix", "reborn")
	if _, err := cp.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	if err := proxy.Accept(); err != nil {
		t.Fatal(err)
	}

	testkit.Eventually(t, 30*time.Second, func() bool { return r.stats.Counts().Relists == 1 }, "no relist after the 410")
	d, ok := r.rec.Find(ns+"/gone", store.Deleted)
	if !ok {
		t.Fatal("the object deleted during the gap produced no Deleted delta")
	}
	if !d.FinalStateUnknown || d.Object.UID != lastKnownGone.UID || d.Object.ResourceVersion != lastKnownGone.ResourceVersion {
		t.Errorf("gap deletion: unknown=%v object rv %s; want unknown=true and the last known object (rv %s)",
			d.FinalStateUnknown, d.Object.ResourceVersion, lastKnownGone.ResourceVersion)
	}
	if d, ok := r.rec.Find(ns+"/change", store.Updated); !ok || d.Object.Spec.Message != "v2" {
		t.Errorf("the object changed during the gap: Updated delta %v %+v", ok, d.Object)
	}
	if _, ok := r.rec.Find(ns+"/fresh", store.Added); !ok {
		t.Error("the object created during the gap produced no Added delta")
	}
	if _, ok := r.rec.Find(ns+"/keep", store.Updated); ok {
		t.Error("an unchanged object must produce no delta on relist")
	}
	if d, ok := r.rec.Find(ns+"/phoenix", store.Deleted); !ok || d.Object.UID != oldPhoenix.UID || !d.FinalStateUnknown {
		t.Errorf("re-created name: Deleted delta %v %+v; want the old object (uid %s), final state unknown", ok, d, oldPhoenix.UID)
	}
	if d, ok := r.rec.Find(ns+"/phoenix", store.Added); !ok || d.Object.UID != newPhoenix.UID {
		t.Errorf("re-created name: no Added delta for the new object (uid %s)", newPhoenix.UID)
	}
	if d, ok := r.rec.Find(ns+"/phoenix", store.Updated); ok {
		t.Errorf("re-created name reported as an update of uid %s to uid %s", d.Old.UID, d.Object.UID)
	}
	assertStoreMatchesServer(t, c, ns, r.store)
}

// etcd compacted exactly up to the one change made while the watcher was
// away: the apiserver (without watch cache) still has that change but not
// the object before it, and ends every WATCH from the watcher's RV with an
// ERROR event "etcd event received with PrevKv=nil" — a 500, not a 410.
// The watcher must relist rather than re-watch from that RV forever (the
// fault demo found it doing just that).
func TestErrorEventAfterCompactionAtTheNextChangeRelists(t *testing.T) {
	cp, ns, c := testkit.Start(t)
	uncached := testkit.Shared.Uncached(t)
	ctx := context.Background()
	obj := testkit.Create(t, c, ns, "hello", "v1")
	proxy, cfg := testkit.Proxy(t, cp, uncached)
	r := start(t, cfg, ns, watcher.Options[object]{})
	testkit.Eventually(t, 10*time.Second, func() bool { return proxy.OpenWatches() == 1 }, "no watch open")

	proxy.Refuse()
	obj.Spec.Message = "changed while the watcher was away"
	changed, err := c.Update(ctx, obj)
	if err != nil {
		t.Fatal(err)
	}
	rev, _ := strconv.ParseInt(changed.ResourceVersion, 10, 64)
	if err := cp.CompactTo(ctx, rev); err != nil {
		t.Fatal(err)
	}
	if err := proxy.Accept(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, func() bool {
		got, ok := r.store.Get(ns + "/hello")
		return ok && got.Spec.Message == changed.Spec.Message
	}, "the change made while the watcher was away never reached the store")
	if n := r.stats.Counts().Relists; n != 1 {
		t.Errorf("%d relists, want 1", n)
	}
}

// A paginated LIST whose snapshot etcd compacts between two pages gets 410
// for its continue token; the watcher starts that list over and completes it.
func TestExpiredContinueTokenRestartsTheList(t *testing.T) {
	cp, ns, c := testkit.Start(t)
	uncached := testkit.Shared.Uncached(t)
	ctx := context.Background()
	testkit.Objects(t, c, ns, "obj", 250)
	other := testkit.Namespace(t, cp.Config())
	src := &compactAfterFirstPage{
		Source: watcher.RESTSource{Client: testkit.Client(t, uncached.Config()).REST(), Resource: v1alpha1.Resource, Namespace: ns},
		// A compaction only removes revisions older than the one it compacts
		// to, so write once after the list's snapshot, then compact.
		compact: func(ctx context.Context) error {
			if _, err := c.Create(ctx, testkit.New(other, "newer", "hi")); err != nil {
				return err
			}
			_, err := cp.Compact(ctx)
			return err
		},
	}
	s, counter := store.New[object](), &stats.Counter{}
	w := watcher.New(src, s, watcher.Options[object]{PageSize: 100, Backoff: fastBackoff,
		Codec: watcher.JSONCodec[object]{GVK: v1alpha1.GroupVersionKind}, Observer: counter})
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go w.Run(runCtx)
	select {
	case <-w.Synced():
	case <-time.After(time.Minute):
		t.Fatal("no sync")
	}
	st := counter.Counts()
	if src.expired == 0 {
		t.Fatal("the continue token never expired: the test did not test anything")
	}
	if st.ListPages < 4 || st.Lists != 1 || s.Len() != 250 {
		t.Errorf("pages %d lists %d store %d; want ≥4 pages (1 + a full restart of 3), 1 list, 250 objects", st.ListPages, st.Lists, s.Len())
	}
}

type compactAfterFirstPage struct {
	watcher.Source
	compact func(context.Context) error
	pages   int
	expired int
}

func (s *compactAfterFirstPage) List(ctx context.Context, opts metav1.ListOptions) (io.ReadCloser, error) {
	body, err := s.Source.List(ctx, opts)
	if err != nil {
		if opts.Continue != "" {
			s.expired++
		}
		return nil, err
	}
	s.pages++
	if s.pages == 1 {
		if err := s.compact(ctx); err != nil {
			return nil, err
		}
	}
	return body, nil
}

func assertStoreMatchesServer(t *testing.T, c interface {
	List(context.Context, string, metav1.ListOptions) (*v1alpha1.MyResourceList, error)
}, ns string, s *store.Store[object]) {
	t.Helper()
	list, err := c.List(context.Background(), ns, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != s.Len() {
		t.Errorf("store has %d objects, server %d", s.Len(), len(list.Items))
	}
	for _, item := range list.Items {
		got, ok := s.Get(store.KeyOf(&item))
		if !ok || got.ResourceVersion != item.ResourceVersion {
			t.Errorf("%s: store rv %v, server rv %s", item.Name, got, item.ResourceVersion)
		}
	}
}

// WatchList: the initial state arrives as ADDED events on a WATCH, ends with
// the initial-events-end bookmark, and the same stream carries on with live
// events: no LIST request at all.
func TestWatchListStreamsTheInitialStateAndKeepsTheStream(t *testing.T) {
	cp, ns, c := testkit.Parallel(t)
	testkit.Objects(t, c, ns, "obj", 300)
	proxy, cfg := testkit.Proxy(t, cp, cp.APIServer)
	r := start(t, cfg, ns, watcher.Options[object]{WatchList: true})
	if n := r.store.Len(); n != 300 || r.rec.Count(store.Added) != 300 {
		t.Fatalf("store %d objects, %d Added deltas; want 300", n, r.rec.Count(store.Added))
	}
	testkit.Create(t, c, ns, "live", "hi")
	testkit.Eventually(t, 30*time.Second, func() bool { _, ok := r.rec.Find(ns+"/live", store.Added); return ok }, "live event not delivered")
	st, counts := r.stats.Counts(), proxy.Counts()
	if counts.Lists != 0 || counts.Watches != 1 || st.Watches != 1 || st.Lists != 1 || st.ListPages != 0 {
		t.Errorf("proxy saw %d LISTs and %d WATCHes; watcher stats %+v: want no LIST and one WATCH for sync and live events", counts.Lists, counts.Watches, st)
	}
}

// An apiserver with the WatchList feature off refuses the request; the
// watcher falls back to a paginated LIST and works as usual.
func TestWatchListFallsBackToListWhenTheServerRefuses(t *testing.T) {
	cp, ns, c := testkit.Parallel(t)
	old := testkit.APIServer(t, cp, "apiserver-no-watchlist", "--feature-gates=WatchList=false")
	testkit.Objects(t, c, ns, "obj", 20)
	proxy, cfg := testkit.Proxy(t, cp, old)
	r := start(t, cfg, ns, watcher.Options[object]{WatchList: true, PageSize: 10})
	if n := r.store.Len(); n != 20 {
		t.Fatalf("store %d objects, want 20", n)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return proxy.OpenWatches() == 1 }, "no live watch after the fallback")
	// (A fresh apiserver's watch cache may still be catching up with the
	// list's RV and answer "too large resource version" once: the watcher
	// backs off and watches again, so more than one live WATCH is fine.)
	r.rec.mu.Lock()
	initial := append([]bool(nil), r.rec.watchInitial...)
	r.rec.mu.Unlock()
	if len(initial) < 2 || !initial[0] || slices.Contains(initial[1:], true) {
		t.Errorf("WATCH requests with sendInitialEvents: %v; want the first only", initial)
	}
	// Each list is two LIST pages. A fresh apiserver's watch cache may
	// answer the first WATCH that it is still initializing: the words of a
	// server that has just started, which the watcher answers with one
	// relist (it cannot tell a cache still filling from a restart after
	// its list, which may have gone back in time).
	if counts, st := proxy.Counts(), r.stats.Counts(); counts.Lists != st.ListPages+st.Probes || st.ListPages != 2*st.Lists || st.Lists != 1+st.Relists || st.Relists > 1 {
		t.Errorf("proxy saw %d LISTs (stats %+v): want two LIST pages making each list, and one list (two if the watch cache said it was initializing)", counts.Lists, st)
	}
}

// An apiserver restart starts its watch cache afresh: a WATCH from any older
// resourceVersion gets 410. The watcher must relist once and carry on
// watching — not relist at its old RV, get data as of exactly that RV, and
// expire again forever (the bug the comparison harness found).
func TestAPIServerRestartRelistsOnceAndResumes(t *testing.T) {
	t.Parallel()
	cp := testkit.Shared.Get(t)
	ctx := context.Background()
	a, err := cp.AddAPIServer(ctx, "apiserver-restarted")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	ns := testkit.Namespace(t, cp.Config())
	c := testkit.Client(t, cp.Config())
	testkit.Objects(t, c, ns, "obj", 30)
	r := start(t, a.Config(), ns, watcher.Options[object]{PageSize: 10})
	if err := a.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, func() bool { return r.stats.Counts().Relists >= 1 }, "no relist after the restart")
	testkit.Create(t, c, ns, "after-restart", "hi")
	testkit.Eventually(t, 30*time.Second, func() bool { _, ok := r.rec.Find(ns+"/after-restart", store.Added); return ok },
		"the watch did not resume after the relist")
	if n := r.stats.Counts().Relists; n != 1 {
		t.Errorf("%d relists after one restart, want 1", n)
	}
	assertStoreMatchesServer(t, c, ns, r.store)
}
