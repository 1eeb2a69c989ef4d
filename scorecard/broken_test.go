package scorecard

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"rawwatch/api/v1alpha1"
	"rawwatch/client"
	"rawwatch/compare"
	"rawwatch/store"
)

// Clients broken on purpose, each for one rule of the verdict, and the
// tests that hold each to the verdict it deserves against the real control
// plane (the anchors beside them, held). They run in the client processes,
// which are this test binary run again.
const (
	kindFixed400ms    = "broken-fixed-400ms"    // retries every 400 ms
	kindFixed1s       = "broken-fixed-1s"       // retries every second (as client-go's RetryWatcher)
	kindRecoveryStorm = "broken-recovery-storm" // retries every 5 s, then lists 60 times once the server answers again
	kindDeaf          = "broken-deaf"           // the raw watcher, its handler deaf: it hears nothing at all
	kindForgetful     = "broken-forgetful"      // the raw watcher, its handler deaf to creates and updates once synced
	kindUndeleting    = "broken-undeleting"     // the raw watcher, its handler deaf to deletions once synced
	kindGhost         = "broken-ghost"          // the raw watcher, its handler hearing every deletion followed by a re-ADD
	kindStuck         = "broken-stuck"          // lists once, then only re-reports what it listed, every second
	kindCrasher       = "broken-crasher"        // the raw watcher, its process exiting at its first failed request
	kindLateCrasher   = "broken-late-crasher"   // the raw watcher, its process exiting 2 s after it hears again from the server
	kindLateStorm     = "broken-late-storm"     // the raw watcher, listing 40 times at once 1 s after it hears again from the server
	kindHanger        = "broken-hanger"         // the raw watcher, its process stuck (answering nothing, never exiting) from its first failed request
)

// runCells runs faults against kinds for d and returns each kind's row.
func runCells(t *testing.T, faults []string, kinds []string, d time.Duration) map[string]Row {
	t.Helper()
	cp := shared.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Options{ControlPlane: cp, Faults: faults, Kinds: kinds, Duration: d, OutDir: t.TempDir(), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]Row{}
	for _, row := range rep.Rows {
		t.Logf("%s %s: %s %s %+v", row.Fault, row.Kind, row.Verdict, row.Why, row.Measure)
		if row.Err != "" {
			t.Fatalf("%s: %s", row.Kind, row.Err)
		}
		rows[row.Kind] = row
	}
	return rows
}

func expect(t *testing.T, rows map[string]Row, want map[string]string) {
	t.Helper()
	for kind, verdict := range want {
		if row := rows[kind]; row.Verdict != verdict {
			t.Errorf("%s under %s: %s (%s), want %s", kind, row.Fault, row.Verdict, row.Why, verdict)
		}
	}
}

// Under the default fault's length of refused connections, a client that
// retries at a fixed interval (400 ms, or a second as client-go's
// RetryWatcher) is stormed, and so is one with no backoff at all, and one
// that waits calmly through the fault but lists 60 times at once when the
// server answers again (counted: the requests of the recovery); the raw
// watcher beside them, side by side, is held: its neighbours' storms add
// load, never requests of its own.
func TestAFixedIntervalRetryOrARecoveryStormIsStormed(t *testing.T) {
	rows := runCells(t, []string{"refuse"}, []string{kindFixed400ms, kindFixed1s, kindRecoveryStorm, KindNoBackoff, compare.KindRaw}, 20*time.Second)
	expect(t, rows, map[string]string{kindFixed400ms: Stormed, kindFixed1s: Stormed, kindRecoveryStorm: Stormed, KindNoBackoff: Stormed, compare.KindRaw: Held})
}

// A handler that misses what the server did, in a client whose store
// converges, lost data: deaf (it heard nothing at all), deaf to creates and
// updates once synced, or hearing a deleted key added again; a client stuck at its first LIST
// whose handler hears the canary's key again at its old resourceVersion is
// stalled, not following; a client whose process ends is crashed; client-go's
// kinds beside them held.
func TestWhatTheHandlerMissedIsLostDataAndACrashIsCrashed(t *testing.T) {
	rows := runCells(t, []string{"refuse"}, []string{kindDeaf, kindForgetful, kindGhost, kindStuck, kindCrasher, compare.KindControllerRuntime, compare.KindInformerStripped}, 6*time.Second)
	expect(t, rows, map[string]string{kindDeaf: LostData, kindForgetful: LostData, kindGhost: LostData, kindStuck: Stalled, kindCrasher: Crashed,
		compare.KindControllerRuntime: Held, compare.KindInformerStripped: Held})
	if m := rows[kindGhost].Measure; m.Ghosts == 0 {
		t.Errorf("the ghost client's re-ADDs are not counted as ghosts: %+v", m)
	}
	if m := rows[kindForgetful].Measure; m.NotHeard+m.HeardStale == 0 || m.HeardExtra != 0 {
		t.Errorf("the forgetful client: %d never heard, %d stale, %d deletions never heard; want creates and updates missed, no deletion", m.NotHeard, m.HeardStale, m.HeardExtra)
	}
}

// What a client does right after its recovery counts: one whose process
// ends two seconds after it hears from the server again (after the canary,
// which comes with the catch-up) is crashed, and one that lists 40 times at
// once a second after it is stormed; a client stuck from the fault's start,
// its process answering nothing and never ending, is stalled (never
// following), not left unmeasured.
func TestWhatAClientDoesAfterItsRecoveryCountsAndAStuckOneIsStalled(t *testing.T) {
	rows := runCells(t, []string{"refuse"}, []string{kindLateCrasher, kindLateStorm, kindHanger}, 6*time.Second)
	expect(t, rows, map[string]string{kindLateCrasher: Crashed, kindLateStorm: Stormed, kindHanger: Stalled})
	if m := rows[kindLateCrasher].Measure; !m.Converged {
		t.Errorf("the late crasher crashed before its recovery, not after: %+v", m)
	}
	if m := rows[kindHanger].Measure; !m.Hung {
		t.Errorf("the stuck client is not called hung: %+v", m)
	}
}

// After an etcd restore, the objects created since the snapshot vanish:
// a handler deaf to deletions never hears them go, and lost data; the raw
// watcher is held.
func TestAHandlerThatMissesTheObjectsARestoreRemovesLostData(t *testing.T) {
	rows := runCells(t, []string{"etcd-restore"}, []string{kindUndeleting, compare.KindRaw}, 6*time.Second)
	expect(t, rows, map[string]string{kindUndeleting: LostData, compare.KindRaw: Held})
	if m := rows[kindUndeleting].Measure; m.HeardExtra == 0 {
		t.Errorf("no vanished object counted: %+v", m)
	}
}

func init() {
	brokenClients[kindFixed400ms] = func(cfg *rest.Config, ns string, h *handler) (consumer, error) {
		return newFixedRetry(cfg, ns, h, 400*time.Millisecond, 0)
	}
	brokenClients[kindFixed1s] = func(cfg *rest.Config, ns string, h *handler) (consumer, error) {
		return newFixedRetry(cfg, ns, h, time.Second, 0)
	}
	brokenClients[kindRecoveryStorm] = func(cfg *rest.Config, ns string, h *handler) (consumer, error) {
		return newFixedRetry(cfg, ns, h, 5*time.Second, 60)
	}
	once := func(hears func(typ byte) bool) func(cfg *rest.Config, ns string, h *handler) (consumer, error) {
		return func(cfg *rest.Config, ns string, h *handler) (consumer, error) {
			return compare.NewConsumer(compare.KindRaw, cfg, ns, compare.ConsumerConfig{OnEvent: func(typ byte, rv, key string, at int64) {
				if !h.Synced.Load() || hears(typ) {
					h.event(typ, rv, key, at)
				}
			}})
		}
	}
	brokenClients[kindDeaf] = func(cfg *rest.Config, ns string, h *handler) (consumer, error) {
		return compare.NewConsumer(compare.KindRaw, cfg, ns, compare.ConsumerConfig{OnEvent: func(byte, string, string, int64) {}})
	}
	brokenClients[kindForgetful] = once(func(typ byte) bool { return typ == compare.EvDelete })
	brokenClients[kindUndeleting] = once(func(typ byte) bool { return typ != compare.EvDelete })
	brokenClients[kindGhost] = func(cfg *rest.Config, ns string, h *handler) (consumer, error) {
		return compare.NewConsumer(compare.KindRaw, cfg, ns, compare.ConsumerConfig{OnEvent: func(typ byte, rv, key string, at int64) {
			h.event(typ, rv, key, at)
			if typ == compare.EvDelete && h.Synced.Load() {
				h.event(compare.EvAdd, rv, key, time.Now().UnixNano())
			}
		}})
	}
	brokenClients[kindStuck] = newStuck
	brokenClients[kindLateCrasher] = func(cfg *rest.Config, ns string, h *handler) (consumer, error) {
		return afterFailure(cfg, ns, h, 2*time.Second, func(*rest.Config) {
			fmt.Fprintln(os.Stderr, "crashing on purpose 2 s after hearing from the server again")
			os.Exit(3)
		}, nil)
	}
	brokenClients[kindLateStorm] = func(cfg *rest.Config, ns string, h *handler) (consumer, error) {
		return afterFailure(cfg, ns, h, time.Second, func(cfg *rest.Config) {
			c, err := client.New(cfg)
			if err != nil {
				return
			}
			for range 40 {
				_, _ = c.List(context.Background(), ns, metav1.ListOptions{})
			}
		}, nil)
	}
	brokenClients[kindHanger] = func(cfg *rest.Config, ns string, h *handler) (consumer, error) {
		s := &stuckForGood{stuck: make(chan struct{})}
		c, err := afterFailure(cfg, ns, h, 0, nil, s.hang)
		s.consumer = c
		return s, err
	}
	brokenClients[kindCrasher] = func(cfg *rest.Config, ns string, h *handler) (consumer, error) {
		cfg = rest.CopyConfig(cfg)
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
			return roundTripFunc(func(r *http.Request) (*http.Response, error) {
				resp, err := rt.RoundTrip(r)
				if h.Synced.Load() && (err != nil || resp.StatusCode >= 400) {
					fmt.Fprintln(os.Stderr, "crashing on purpose at the first failed request:", err)
					os.Exit(3)
				}
				return resp, err
			})
		})
		return compare.NewConsumer(compare.KindRaw, cfg, ns, compare.ConsumerConfig{OnEvent: h.event})
	}
}

// afterFailure is the raw watcher with its handler, whose transport notes
// a failed request once it synced: then, the first time its handler hears
// an event after one, it runs then after wait (once); or at that failure,
// stuck(), if set.
func afterFailure(cfg *rest.Config, ns string, h *handler, wait time.Duration, then func(cfg *rest.Config), stuck func()) (consumer, error) {
	var failed, done atomic.Bool
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			if h.Synced.Load() && (err != nil || resp.StatusCode >= 400) {
				failed.Store(true)
				if stuck != nil {
					stuck()
				}
			}
			return resp, err
		})
	})
	return compare.NewConsumer(compare.KindRaw, cfg, ns, compare.ConsumerConfig{OnEvent: func(typ byte, rv, key string, at int64) {
		h.event(typ, rv, key, at)
		if then != nil && failed.Load() && done.CompareAndSwap(false, true) {
			time.AfterFunc(wait, func() { then(cfg) })
		}
	}})
}

// stuckForGood, once hang is called, blocks every Dump for good: the
// client's process answers nothing more (its command loop waits on it) and
// never ends, as a deadlocked one.
type stuckForGood struct {
	consumer
	stuck chan struct{}
	once  sync.Once
}

func (s *stuckForGood) hang() { s.once.Do(func() { close(s.stuck) }) }

func (s *stuckForGood) Dump() map[string]string {
	select {
	case <-s.stuck:
		select {} // the process answers nothing more, and never ends
	default:
		return s.consumer.Dump()
	}
}

// fixedRetry lists, then watches from the list's resourceVersion; after
// any failure it waits every, and relists (so that a burst can follow a
// failure: once a LIST succeeds after failing ones, it lists burst times
// more, at once).
type fixedRetry struct {
	c     *client.Client
	ns    string
	h     *handler
	every time.Duration
	burst int
	kept
}

// kept is a broken client's store (key → resourceVersion), and what else
// a client has: no queue, nothing to close.
type kept struct {
	mu    sync.Mutex
	store map[string]string
}

func (k *kept) Dump() map[string]string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return maps.Clone(k.store)
}

func (k *kept) Queued() int  { return 0 }
func (k *kept) Close() error { return nil }

func newFixedRetry(cfg *rest.Config, ns string, h *handler, every time.Duration, burst int) (consumer, error) {
	c, err := client.New(cfg)
	if err != nil {
		return nil, err
	}
	return &fixedRetry{c: c, ns: ns, h: h, every: every, burst: burst, kept: kept{store: map[string]string{}}}, nil
}

func (f *fixedRetry) Run(ctx context.Context, synced chan<- struct{}) {
	first, failed := true, false
	for ctx.Err() == nil {
		if failed {
			pause(ctx, f.every)
		}
		l, err := f.c.List(ctx, f.ns, metav1.ListOptions{})
		if err != nil {
			failed = true
			continue
		}
		if failed {
			for range f.burst {
				_, _ = f.c.List(ctx, f.ns, metav1.ListOptions{})
			}
		}
		f.replace(l.Items)
		if first {
			close(synced)
			first = false
		}
		f.watch(ctx, l.ResourceVersion)
		failed = true // a stream that ended, for whatever reason
	}
}

// watch follows a WATCH from rv until it ends.
func (f *fixedRetry) watch(ctx context.Context, rv string) {
	w, err := f.c.REST().Get().Namespace(f.ns).Resource(v1alpha1.Resource).
		VersionedParams(&metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}, metav1.ParameterCodec).
		Param("watch", "true").Watch(ctx)
	if err != nil {
		return
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		o, ok := ev.Object.(*v1alpha1.MyResource)
		if !ok || ev.Type == watch.Bookmark {
			continue
		}
		key := store.KeyOf(o)
		f.mu.Lock()
		switch ev.Type {
		case watch.Added:
			f.store[key] = o.ResourceVersion
		case watch.Modified:
			f.store[key] = o.ResourceVersion
		case watch.Deleted:
			delete(f.store, key)
		}
		f.mu.Unlock()
		f.h.event(map[watch.EventType]byte{watch.Added: compare.EvAdd, watch.Modified: compare.EvUpdate, watch.Deleted: compare.EvDelete}[ev.Type],
			o.ResourceVersion, key, time.Now().UnixNano())
	}
}

// replace makes items the store, telling the handler what changed.
func (f *fixedRetry) replace(items []v1alpha1.MyResource) {
	f.mu.Lock()
	old := f.store
	f.store = map[string]string{}
	for i := range items {
		f.store[store.KeyOf(&items[i])] = items[i].ResourceVersion
	}
	now := maps.Clone(f.store)
	f.mu.Unlock()
	for key, rv := range now {
		if old[key] != rv {
			f.h.event(compare.EvAdd, rv, key, time.Now().UnixNano())
		}
	}
	for key, rv := range old {
		if _, ok := now[key]; !ok {
			f.h.event(compare.EvDelete, rv, key, time.Now().UnixNano())
		}
	}
}

func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// stuck lists once and opens one WATCH it never reads; every second its
// handler hears every key again at the resourceVersion it listed (a
// relist's re-report of unchanged objects): the canary's key too, never at
// the canary's resourceVersion.
type stuck struct {
	c  *client.Client
	ns string
	h  *handler
	kept
}

func newStuck(cfg *rest.Config, ns string, h *handler) (consumer, error) {
	c, err := client.New(cfg)
	if err != nil {
		return nil, err
	}
	return &stuck{c: c, ns: ns, h: h}, nil
}

func (s *stuck) Run(ctx context.Context, synced chan<- struct{}) {
	var l *v1alpha1.MyResourceList
	for {
		var err error
		if l, err = s.c.List(ctx, s.ns, metav1.ListOptions{}); err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		pause(ctx, time.Second)
	}
	listed := map[string]string{}
	for i := range l.Items {
		listed[store.KeyOf(&l.Items[i])] = l.Items[i].ResourceVersion
	}
	s.mu.Lock()
	s.store = listed
	s.mu.Unlock()
	close(synced)
	body, err := s.c.REST().Get().Namespace(s.ns).Resource(v1alpha1.Resource).
		VersionedParams(&metav1.ListOptions{ResourceVersion: l.ResourceVersion}, metav1.ParameterCodec).Param("watch", "true").Stream(ctx)
	if err == nil {
		defer body.Close()
	} else if !apierrors.IsResourceExpired(err) {
		fmt.Fprintln(os.Stderr, "stuck: the WATCH:", err)
	}
	for ctx.Err() == nil {
		for key, rv := range listed {
			s.h.event(compare.EvResync, rv, key, time.Now().UnixNano())
		}
		pause(ctx, time.Second)
	}
}
