package watcher_test

import (
	"context"
	"fmt"
	"io"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr/funcr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"rawwatch/api/v1alpha1"
	"rawwatch/internal/fakeapi"
	"rawwatch/observe"
	"rawwatch/stats"
	"rawwatch/store"
	"rawwatch/watcher"
)

// Tests of the whole loop (Watcher.Run) against package fakeapi's in-memory
// server, in virtual time: a minute of backoff costs no real time, and a
// loop that never waits is caught by a request cap instead of hanging.

// sim is one watcher running against a fake server inside a synctest bubble.
type sim struct {
	t     *testing.T
	srv   *fakeapi.Server
	w     *watcher.Watcher[object]
	store *store.Store[object]
	obs   *simObserver
	stats *stats.Counter
	start time.Time
	// stormed is closed when the request cap was hit (the loop was cancelled).
	stormed chan struct{}
}

// simObserver records backoffs and deltas.
type simObserver struct {
	mu     sync.Mutex
	waits  []simWait
	deltas []store.Delta[object]
}

type simWait struct {
	at    time.Time
	d     time.Duration
	class watcher.ErrorClass
}

func (o *simObserver) Observe(e observe.Event) {
	if b, ok := e.(watcher.BackoffStarted); ok {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.waits = append(o.waits, simWait{time.Now(), b.Delay, b.Class})
	}
}

func (o *simObserver) handle(d store.Delta[object]) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.deltas = append(o.deltas, d)
}

func (o *simObserver) backoffs() []simWait {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]simWait(nil), o.waits...)
}

// capped is a Source that cancels the loop after max requests: a loop that
// never waits would otherwise spin forever without virtual time moving.
type capped struct {
	*fakeapi.Server
	mu     sync.Mutex
	n, max int
	cancel context.CancelFunc
	hit    chan struct{}
}

func (c *capped) count() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n++; c.n == c.max {
		close(c.hit)
		c.cancel()
	}
}

func (c *capped) List(ctx context.Context, opts metav1.ListOptions) (io.ReadCloser, error) {
	c.count()
	return c.Server.List(ctx, opts)
}

func (c *capped) Watch(ctx context.Context, opts metav1.ListOptions) (io.ReadCloser, error) {
	c.count()
	return c.Server.Watch(ctx, opts)
}

// runSim seeds srv with n objects, runs a watcher on it with opts, calls
// body, then stops the watcher; everything inside one synctest bubble.
// setup, if any, shapes the server before the watcher starts.
func runSim(t *testing.T, n int, opts watcher.Options[object], body func(s *sim), setup ...func(*fakeapi.Server)) {
	runSimVia(t, n, opts, nil, body, setup...)
}

// runSimVia is runSim with the watcher's Source wrapped by via (nil: none).
func runSimVia(t *testing.T, n int, opts watcher.Options[object], via func(watcher.Source) watcher.Source, body func(s *sim), setup ...func(*fakeapi.Server)) {
	synctest.Test(t, func(t *testing.T) {
		srv := fakeapi.New()
		for i := range n {
			srv.Put("ns", fmt.Sprintf("obj-%d", i), "hello")
		}
		for _, f := range setup {
			f(srv)
		}
		ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), funcr.New(func(string, string) {}, funcr.Options{})))
		src := &capped{Server: srv, max: 1000, cancel: cancel, hit: make(chan struct{})}
		s := &sim{t: t, srv: srv, store: store.New[object](), obs: &simObserver{}, stats: &stats.Counter{}, start: time.Now(), stormed: src.hit}
		opts.Handler = s.obs.handle
		opts.Observer = observe.Fanout{s.obs, s.stats, opts.Observer} // the test's own, besides the sim's
		opts.Codec = watcher.JSONCodec[object]{GVK: v1alpha1.GroupVersionKind}
		var through watcher.Source = src
		if via != nil {
			through = via(src)
		}
		s.w = watcher.New(through, s.store, opts)
		done := make(chan struct{})
		go func() { s.w.Run(ctx); close(done) }()
		defer func() { cancel(); <-done }() // also after a t.Fatal in body
		body(s)
	})
}

// waitSynced waits (in virtual time) for the first list, at most d.
func (s *sim) waitSynced(d time.Duration) bool {
	select {
	case <-s.w.Synced():
		return true
	case <-time.After(d):
		return false
	case <-s.stormed:
		return false
	}
}

// sleep lets virtual time pass, unless the loop stormed into the cap.
func (s *sim) sleep(d time.Duration) {
	select {
	case <-time.After(d):
	case <-s.stormed:
	}
}

// count returns how many requests of kind were made in [from, to).
// breakStreams waits for the first sync, then puts fault on and cuts the
// open stream; it returns when.
func (s *sim) breakStreams(fault fakeapi.Mode) time.Time {
	if !s.waitSynced(time.Minute) {
		s.t.Fatal("no sync")
	}
	s.srv.SetFault(fault)
	from := time.Now()
	s.srv.Cut()
	return from
}

// forceRelistUnder waits for the first sync, then makes the watcher relist
// while fault is on: the watch is cut and cannot resume (the server
// refuses) while etcd compacts past its resourceVersion, so the next WATCH
// gets a 410. It returns when fault went on.
func (s *sim) forceRelistUnder(fault fakeapi.Mode) time.Time {
	if !s.waitSynced(time.Minute) {
		s.t.Fatal("no sync")
	}
	s.srv.SetFault(fakeapi.Refuse)
	s.srv.Cut()
	s.srv.Put("ns", "obj-0", "changed")
	s.srv.Compact()
	s.srv.Put("ns", "obj-1", "changed")
	s.sleep(time.Second)
	s.srv.SetFault(fault)
	return time.Now()
}

func (s *sim) count(kind string, from, to time.Time) int {
	n := 0
	for _, r := range s.srv.Requests() {
		if r.Kind == kind && !r.At.Before(from) && r.At.Before(to) {
			n++
		}
	}
	return n
}

// A stream that delivers one frame and then breaks is not
// healthy. Through a proxy that cuts every WATCH after its first frame, the
// loop backs off: at most a dozen WATCHes in the first minute (the backoff's
// bound), where a loop that calls such a stream healthy re-watches at once,
// forever.
func TestFlappingStreamsAreNotHealthy(t *testing.T) {
	runSim(t, 3, watcher.Options[object]{}, func(s *sim) {
		from := s.breakStreams(fakeapi.CutAfterFirstFrame)
		s.sleep(time.Minute)
		if n := s.count("WATCH", from, from.Add(time.Minute)); n > 12 {
			s.t.Errorf("%d WATCHes in the first minute of streams cut after one frame, want at most 12", n)
		}
		s.srv.SetFault(fakeapi.Healthy)
	})
}

// The scorecard's garble in virtual time: event frames cut short
// (fakeapi.CutFrames) while objects change and one is deleted. Each stream
// breaks at its first cut event, at once (the frame reader notices the cut),
// and the loop re-watches from its last resourceVersion after the backoff,
// as after any broken stream: at least one WATCH for every few writes, at
// most a dozen in the first minute (the backoff's bound), and no relist.
// Once the fault ends, the next WATCH replays what was cut: the store
// equals the server's, the deleted key gone.
func TestCutFramesRewatchWithinTheBackoff(t *testing.T) {
	runSim(t, 3, watcher.Options[object]{}, func(s *sim) {
		from := s.breakStreams(fakeapi.CutFrames)
		for i := range 12 {
			s.srv.Put("ns", fmt.Sprintf("obj-%d", i%2), fmt.Sprintf("write %d", i))
			s.sleep(5 * time.Second)
		}
		s.srv.Delete("ns", "obj-2")
		watches, lists := s.count("WATCH", from, from.Add(time.Minute)), s.count("LIST", s.start, from.Add(time.Minute))
		if watches < 3 || watches > 12 || lists != 1 {
			s.t.Errorf("%d WATCHes in the first minute of cut frames, %d LISTs; want 3 to 12 WATCHes (re-watched after the backoff) and the first LIST alone", watches, lists)
		}
		s.srv.SetFault(fakeapi.Healthy)
		s.sleep(watcher.DefaultBackoff.Max + 5*time.Second)
		if !equalToServer(s) {
			s.t.Errorf("%v after the fault ended, the store (%d objects) differs from the server's (%d)", watcher.DefaultBackoff.Max+5*time.Second, s.store.Len(), len(s.srv.Objects()))
		}
		if _, ok := s.store.Get("ns/obj-2"); ok {
			s.t.Error("the deletion cut short never reached the store")
		}
	})
}

// While the loop is away, obj-0 is deleted and created again, and the
// relist after the 410 lists the new obj-0 as an item that does not decode
// (its metadata readable). The stored obj-0 is the old
// object, gone from the server: the relist hands its Deleted delta
// (FinalStateUnknown) and leaves the key out, the item reported skipped,
// instead of keeping the old object as if current. The new obj-0 comes in
// with its next write that decodes.
func TestRelistedUndecodableItemOfAnotherUIDDeletesTheOldObject(t *testing.T) {
	runSim(t, 3, watcher.Options[object]{}, func(s *sim) {
		if !s.waitSynced(time.Minute) {
			s.t.Fatal("no sync")
		}
		old, _ := s.store.Get("ns/obj-0")
		s.srv.SetFault(fakeapi.Refuse)
		s.srv.Cut()
		s.srv.Delete("ns", "obj-0")
		s.srv.Put("ns", "obj-0", "born again")
		s.srv.Compact()
		s.srv.Put("ns", "obj-1", "changed")
		s.sleep(time.Second)
		s.srv.SetFault(fakeapi.Garble) // the relist's obj-0 item does not decode
		s.sleep(watcher.DefaultBackoff.Max + 10*time.Second)
		if st := s.stats.Counts(); st.Relists != 1 || st.Skipped == 0 {
			s.t.Fatalf("%d relists, %d skipped; want the relist after the 410, with its obj-0 item skipped", st.Relists, st.Skipped)
		}
		if got, ok := s.store.Get("ns/obj-0"); ok && got.UID == old.UID {
			s.t.Errorf("after the relist listed obj-0 undecodable under a new UID, the store still holds the old obj-0 (UID %s) as if current", old.UID)
		}
		s.obs.mu.Lock()
		var deleted bool
		for _, d := range s.obs.deltas {
			deleted = deleted || d.Type == store.Deleted && d.Object != nil && d.Object.UID == old.UID && d.FinalStateUnknown
		}
		s.obs.mu.Unlock()
		if !deleted {
			s.t.Errorf("no Deleted delta (FinalStateUnknown) for the old obj-0, UID %s", old.UID)
		}
		s.srv.SetFault(fakeapi.Healthy)
		s.srv.Put("ns", "obj-0", "decodable again")
		s.sleep(5 * time.Second)
		if !equalToServer(s) {
			s.t.Error("the store differs from the server after the new obj-0's next write")
		}
	}, func(srv *fakeapi.Server) {
		srv.GarbleItem = func(o *v1alpha1.MyResource) bool { return o.Name == "obj-0" }
	})
}

// An ERROR event after one event relists, but not in a storm:
// only the first relist is immediate; the next ones wait out the backoff.
func TestErrorAfterOneEventDoesNotStormRelists(t *testing.T) {
	runSim(t, 3, watcher.Options[object]{}, func(s *sim) {
		from := s.breakStreams(fakeapi.ErrorAfterFirstEvent)
		s.sleep(time.Minute)
		lists := s.count("LIST", from, from.Add(time.Minute))
		if lists > 12 {
			s.t.Errorf("%d LISTs in the first minute of streams that send an ERROR after one frame, want at most 12", lists)
		}
		if lists == 0 {
			s.t.Errorf("no relist after ERROR events")
		}
	})
}

// An ERROR event after an event that carried the stream on (the scorecard's
// flap-error: one event, then a 500) is a broken stream, not the server's
// word that it cannot go on from there: the loop re-watches from that event
// after the backoff, as after a cut; a second such stream in a row relists
// (so the store stays within two waits of the server:
// TestAnErrorAfterEachEventKeepsTheStoreWithinTwoBackoffCaps). Once the fault ends, the store
// equals the server's.
func TestErrorAfterAnEventRewatchesFromIt(t *testing.T) {
	runSim(t, 3, watcher.Options[object]{}, func(s *sim) {
		from := s.breakStreams(fakeapi.ErrorAfterFirstEvent)
		for i := range 120 { // a write every 500 ms: every WATCH finds a change to carry
			s.srv.Put("ns", fmt.Sprintf("obj-%d", i%3), fmt.Sprintf("v%d", i))
			s.sleep(500 * time.Millisecond)
		}
		// The first list (in virtual time at the fault's start: the sync
		// takes no time), then fewer relists than WATCHes. (How many fewer
		// turns on whether a change was pending when each WATCH opened:
		// without one the ERROR comes first, and relists.)
		lists, watches := s.count("LIST", s.start, time.Now()), s.count("WATCH", from, time.Now())
		if lists-1 >= watches {
			s.t.Errorf("%d LISTs in all, %d WATCHes, through a minute of streams that carry an event and then an ERROR; want fewer relists than WATCHes (re-watch from the event once)", lists, watches)
		}
		if n := s.count("WATCH", from, time.Now()); n == 0 || n > 12 {
			s.t.Errorf("%d WATCHes in a minute of streams that carry an event and then an ERROR, want 1 to 12 (the backoff's)", n)
		}
		s.srv.SetFault(fakeapi.Healthy)
		s.sleep(watcher.DefaultBackoff.Max + 5*time.Second)
		if !equalToServer(s) {
			s.t.Error("the store differs from the server after the fault")
		}
	})
}

// A WatchList that fails during its initial events (an ERROR 500,
// as kube-apiserver sends when etcd cannot report progress) falls back to
// LIST, which works: the watcher syncs.
func TestWatchListFailingDuringInitialEventsFallsBackToList(t *testing.T) {
	runSim(t, 6, watcher.Options[object]{WatchList: true}, func(s *sim) {
		s.srv.SetFault(fakeapi.WatchListFails)
		if !s.waitSynced(time.Minute) {
			s.t.Fatalf("not synced after a minute of failing WatchLists (%d WATCHLIST, %d LIST requests)",
				s.count("WATCHLIST", s.start, time.Now()), s.count("LIST", s.start, time.Now()))
		}
		if n := s.store.Len(); n != 6 {
			s.t.Errorf("store holds %d objects, want 6", n)
		}
	})
}

// The backoff's cap is a true cap: no wait is longer than 30 s,
// jitter included.
func TestBackoffNeverExceedsItsCap(t *testing.T) {
	runSim(t, 1, watcher.Options[object]{}, func(s *sim) {
		s.srv.SetFault(fakeapi.Refuse)
		s.sleep(30 * time.Minute)
		waits := s.obs.backoffs()
		if len(waits) < 30 {
			s.t.Fatalf("only %d backoffs in 30 minutes of refusals", len(waits))
		}
		for _, w := range waits {
			if w.d > 30*time.Second {
				s.t.Errorf("a backoff of %v, above the 30 s cap", w.d)
			}
		}
	})
}

// An expired continue token restarts the list at once, during a
// relist as during the first list; a second expiry in a row backs off.
func TestExpiredContinueTokenRestartsTheRelistAtOnce(t *testing.T) {
	runSim(t, 6, watcher.Options[object]{PageSize: 2}, func(s *sim) {
		// A relist while every continue token expires.
		from := s.forceRelistUnder(fakeapi.ContinueExpires)
		s.sleep(time.Minute)
		// The first request with a continue token since the fault went on
		// (it expires), then the next first page of a list. Probes (one-item
		// LISTs after a WATCH that could not open) are not lists.
		var expired, restart time.Time
		for _, r := range s.srv.Requests() {
			switch {
			case r.Kind != "LIST" || r.At.Before(from):
			case r.Continue && expired.IsZero():
				expired = r.At
			case !r.Continue && r.Limit != 1 && !expired.IsZero():
				restart = r.At
			}
			if !restart.IsZero() {
				break
			}
		}
		if expired.IsZero() || restart.IsZero() {
			s.t.Fatalf("no expired continue token followed by a new list (expired at %v, restart at %v)", expired, restart)
		}
		if d := restart.Sub(expired); d != 0 {
			s.t.Errorf("the relist restarted %v after its continue token expired, want at once", d)
		}
		s.srv.SetFault(fakeapi.Healthy)
	})
}

// The watchdog: a stream that stays open but sends nothing, not even a
// bookmark, is abandoned after the silence limit and resumed.
func TestSilentWatchIsAbandoned(t *testing.T) {
	runSim(t, 2, watcher.Options[object]{}, func(s *sim) {
		from := s.breakStreams(fakeapi.Freeze)
		s.sleep(10 * time.Second) // the re-watch opens a frozen stream
		s.srv.SetFault(fakeapi.Healthy)
		s.srv.Put("ns", "late", "hello")
		limit := watcher.DefaultSilenceLimit + 30*time.Second
		for time.Since(from) < limit {
			if _, ok := s.store.Get("ns/late"); ok {
				return
			}
			s.sleep(time.Second)
		}
		s.t.Errorf("an object created while the stream was frozen was not seen within %v", limit)
	})
}

// Time travel: the server's data goes back to an older copy (an etcd
// restore) and its resourceVersion with it. The watcher must not wait
// forever on a WATCH from a "future" resourceVersion (accepted, and silent,
// as kube-apiserver's watch cache does): the watchdog abandons it, a probe
// finds the server behind, the watcher relists, and the store ends equal to
// the restored state, with the deletion of the object that exists only in
// its store delivered with that object's UID.
func TestTimeTravelConvergesToTheRestoredState(t *testing.T) {
	runSim(t, 2, watcher.Options[object]{}, func(s *sim) {
		if !s.waitSynced(time.Minute) {
			s.t.Fatal("no sync")
		}
		saved := s.srv.Save()
		s.srv.Put("ns", "c", "born after the snapshot")
		s.srv.Put("ns", "obj-0", "changed after the snapshot")
		s.srv.Delete("ns", "obj-1")
		s.sleep(5 * time.Second)
		c, ok := s.store.Get("ns/c")
		if !ok {
			s.t.Fatal("the watcher did not see c")
		}
		s.srv.Restore(saved, 0)
		limit := watcher.DefaultSilenceLimit + time.Minute
		for from := time.Now(); time.Since(from) < limit; s.sleep(time.Second) {
			if equalToServer(s) {
				break
			}
		}
		if !equalToServer(s) {
			s.t.Fatalf("store differs from the restored server %v after the restore", limit)
		}
		var deleted bool
		for _, d := range s.obs.deltas {
			if d.Type == store.Deleted && d.Object != nil && d.Object.UID == c.UID {
				deleted = true
			}
		}
		if !deleted {
			s.t.Errorf("no Deleted delta with c's UID %s", c.UID)
		}
	})
}

// The same time travel with WATCH timeouts shorter than the silence limit,
// and nothing written after the restore: each WATCH from our "future" runs
// to its timeout with nothing, and the next starts at once. The watchdog
// counts the silence across those streams (Action.Quiet), so the loop still
// asks where the server is within the limit.
func TestTimeTravelIsFoundWithWatchTimeoutsUnderTheSilenceLimit(t *testing.T) {
	runSim(t, 2, watcher.Options[object]{WatchTimeoutMin: time.Minute}, func(s *sim) {
		if !s.waitSynced(time.Minute) {
			s.t.Fatal("no sync")
		}
		saved := s.srv.Save()
		s.srv.Put("ns", "c", "born after the snapshot")
		s.srv.Delete("ns", "obj-1")
		s.sleep(5 * time.Second)
		s.srv.Restore(saved, 0)
		limit := watcher.DefaultSilenceLimit + time.Minute
		for from := time.Now(); time.Since(from) < limit; s.sleep(time.Second) {
			if equalToServer(s) {
				return
			}
		}
		s.t.Fatalf("store differs from the restored server %v after the restore", limit)
	})
}

// equalToServer reports whether the store holds exactly the server's objects.
func equalToServer(s *sim) bool {
	objs := s.srv.Objects()
	if s.store.Len() != len(objs) {
		return false
	}
	for key, o := range objs {
		got, ok := s.store.Get(key)
		if !ok || got.UID != o.UID || got.ResourceVersion != o.ResourceVersion {
			return false
		}
	}
	return true
}

// A paginated list that meets an outage between any two of its pages still
// completes: after the backoff it resumes from the page that failed (its
// continue token serves the same snapshot), instead of starting again from
// the first page and meeting the next outage on the way, for ever.
func TestAListResumesFromThePageThatFailed(t *testing.T) {
	runSim(t, 10, watcher.Options[object]{PageSize: 2}, func(s *sim) {
		// A relist of 5 pages, with every other LIST answered 500.
		from := s.forceRelistUnder(fakeapi.EveryOtherListFails)
		deadline := from.Add(3 * time.Minute)
		for s.stats.Counts().Relists == 0 && time.Now().Before(deadline) {
			s.sleep(time.Second)
		}
		if s.stats.Counts().Relists == 0 {
			s.t.Fatalf("no relist completed in 3 minutes of every other LIST failing (%d first pages, %d LISTs)",
				s.firstPages(from), s.count("LIST", from, time.Now()))
		}
		// (The first page itself may be the one that fails: then it is
		// asked for again, and only then.)
		if n := s.firstPages(from); n > 2 {
			s.t.Errorf("the relist asked for its first page %d times, want at most twice (it resumes from the page that failed)", n)
		}
		s.t.Logf("relisted %v after the fault began, in %d LISTs", time.Since(from), s.count("LIST", from, time.Now()))
		s.srv.SetFault(fakeapi.Healthy)
	})
}

// firstPages counts the LISTs since from that asked for a first page (the
// probes, of one item, not counted).
func (s *sim) firstPages(from time.Time) int {
	n := 0
	for _, r := range s.srv.Requests() {
		if r.Kind == "LIST" && !r.Continue && !r.At.Before(from) && r.Limit != 1 {
			n++
		}
	}
	return n
}

// restoredOnFirstWatch is a fake apiserver that restarts on an etcd restored
// from an older snapshot between the watcher's first LIST and its first
// WATCH: that WATCH is answered as kube-apiserver answers while a process
// that has just started installs its API groups (503 "before all known HTTP
// paths have been installed"), and from then on the server is the restored
// one.
type restoredOnFirstWatch struct {
	*fakeapi.Server
	snap fakeapi.State
	err  error
	mu   sync.Mutex
	done bool
	at   time.Time
}

func (r *restoredOnFirstWatch) Watch(ctx context.Context, opts metav1.ListOptions) (io.ReadCloser, error) {
	r.mu.Lock()
	first := !r.done
	r.done = true
	r.mu.Unlock()
	if first {
		r.Server.Restore(r.snap, 0)
		r.mu.Lock()
		r.at = time.Now()
		r.mu.Unlock()
		return nil, r.err
	}
	return r.Server.Watch(ctx, opts)
}

func (r *restoredOnFirstWatch) restoredAt() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.at
}

// A list at resourceVersion R, then the server restarts on an etcd restored
// to before R and refuses the WATCH from R as a starting server does (503
// "paths not installed", or the watch cache's 429 "(re)initializing"): the
// list was not made since that server started, so the request after the
// first wait relists (or probes), not a WATCH from the future the restored
// cache would accept and leave silent for a silence limit.
func TestTimeTravelBehindAStartingServersRefusalIsFoundAtOnce(t *testing.T) {
	for _, first := range []error{
		apierrors.NewServiceUnavailable("the request has been made before all known HTTP paths have been installed, please try again"),
		apierrors.NewTooManyRequests("storage is (re)initializing", 1),
	} {
		t.Run(first.Error()[:20], func(t *testing.T) { timeTravelBehind(t, first) })
	}
}

func timeTravelBehind(t *testing.T, first error) {
	synctest.Test(t, func(t *testing.T) {
		srv := fakeapi.New()
		srv.WatchCache = true
		for i := range 3 {
			srv.Put("ns", fmt.Sprintf("obj-%d", i), "before the snapshot")
		}
		snap := srv.Save()
		for i := range 3 {
			srv.Put("ns", fmt.Sprintf("born-%d", i), "after the snapshot")
		}
		src := &restoredOnFirstWatch{Server: srv, snap: snap, err: first}
		ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), funcr.New(func(string, string) {}, funcr.Options{})))
		st := store.New[object]()
		w := watcher.New(src, st, watcher.Options[object]{Codec: watcher.JSONCodec[object]{GVK: v1alpha1.GroupVersionKind}})
		done := make(chan struct{})
		go func() { w.Run(ctx); close(done) }()
		defer func() { cancel(); <-done }()

		equal := func() bool {
			objs := srv.Objects()
			if st.Len() != len(objs) {
				return false
			}
			for k, o := range objs {
				if got, ok := st.Get(k); !ok || got.UID != o.UID {
					return false
				}
			}
			return true
		}
		start := time.Now()
		for src.restoredAt().IsZero() || !equal() {
			if time.Since(start) > 10*time.Minute {
				t.Fatal("the store never equalled the restored server")
			}
			time.Sleep(100 * time.Millisecond)
		}
		// The first wait is at most Backoff.Initial; the request after it
		// (a relist, or a probe and then the relist) gets through.
		took := time.Since(src.restoredAt())
		if bound := watcher.DefaultBackoff.Initial + 5*time.Second; took > bound {
			t.Errorf("the store held %d objects the restored server does not have for %s after the restore "+
				"(hidden behind %q to the WATCH after the list); want the time travel found "+
				"at the first request after the %s wait, within %s", 3, took.Round(time.Second), first, watcher.DefaultBackoff.Initial, bound)
		}
	})
}

// Through a stream that breaks with an ERROR after each event (the
// scorecard's flap-error) while the resource changes steadily, a second such
// stream in a row relists, so the store is never more than two backoff caps
// of changes behind the server (client-go's informer relists every time).
func TestAnErrorAfterEachEventKeepsTheStoreWithinTwoBackoffCaps(t *testing.T) {
	runSim(t, 3, watcher.Options[object]{}, func(s *sim) {
		s.breakStreams(fakeapi.ErrorAfterFirstEvent)
		const every = 500 * time.Millisecond
		bound := int64(2 * watcher.DefaultBackoff.Max / every)
		var worst int64
		var worstAt time.Duration
		for i := range int(3 * time.Minute / every) {
			s.srv.Put("ns", fmt.Sprintf("obj-%d", i%3), fmt.Sprintf("v%d", i))
			s.sleep(every)
			var have, at int64
			fmt.Sscan(s.w.ResourceVersion(), &have)
			fmt.Sscan(s.srv.ResourceVersion(), &at)
			if lag := at - have; lag > worst {
				worst, worstAt = lag, time.Duration(i+1)*every
			}
		}
		if worst > bound {
			s.t.Errorf("the store fell %d changes behind the server (%s into a fault of an ERROR after each event, "+
				"a change every %s; %d LISTs, %d WATCHes); want at most %d, two backoff caps of changes",
				worst, worstAt, every, s.count("LIST", s.start, time.Now()), s.count("WATCH", s.start, time.Now()), bound)
		}
	})
}

// lagging is a Source behind which the apiserver that serves WATCHes lags
// the one that serves LISTs (an HA control plane whose watch caches are not
// in step; the scorecard's too-large-rv): while on, a WATCH from a
// resourceVersion is answered as kube-apiserver's watch cache answers one
// from a resourceVersion it has not reached: the stream opens and sends
// nothing until the lag ends, then goes on from there. A LIST from "" (a
// consistent read) and a WatchList pass.
type lagging struct {
	watcher.Source
	mu sync.Mutex
	on bool
}

func (l *lagging) set(on bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.on = on
}

func (l *lagging) lags() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.on
}

func (l *lagging) Watch(ctx context.Context, opts metav1.ListOptions) (io.ReadCloser, error) {
	if !l.lags() || opts.ResourceVersion == "" || opts.ResourceVersion == "0" || opts.SendInitialEvents != nil && *opts.SendInitialEvents {
		return l.Source.Watch(ctx, opts)
	}
	r, w := io.Pipe()
	go func() {
		for l.lags() {
			select {
			case <-ctx.Done():
				w.CloseWithError(ctx.Err())
				return
			case <-time.After(time.Second):
			}
		}
		body, err := l.Source.Watch(ctx, opts)
		if err != nil {
			w.CloseWithError(err)
			return
		}
		defer body.Close()
		_, err = io.Copy(w, body)
		w.CloseWithError(err)
	}()
	return r, nil
}

// The scorecard's too-large-rv in virtual time: for two minutes the
// apiserver that answers WATCHes lags (lagging), while objects change once
// a second. The WATCH after the cut is accepted and sent nothing until the
// lag ends (shorter than the silence limit), then every change since: a
// request or two in the whole lag, and the store in step at once after it.
func TestALaggingWatchCacheIsWaitedOut(t *testing.T) {
	l := &lagging{}
	runSimVia(t, 3, watcher.Options[object]{}, func(src watcher.Source) watcher.Source { l.Source = src; return l }, func(s *sim) {
		if !s.waitSynced(time.Minute) {
			s.t.Fatal("no sync")
		}
		l.set(true)
		s.srv.Cut()
		from := time.Now().Add(time.Nanosecond) // (virtual time: the sync's requests came at this instant)
		for i := range 120 {
			s.srv.Put("ns", fmt.Sprintf("obj-%d", i%3), fmt.Sprintf("write %d", i))
			s.sleep(time.Second)
		}
		if lists, watches := s.count("LIST", from, time.Now()), s.count("WATCH", from, time.Now()); lists > 0 || watches > 2 {
			s.t.Errorf("%d LISTs and %d WATCHes in 2 minutes of a lagging watch cache; want no LIST and at most 2 WATCHes", lists, watches)
		}
		l.set(false)
		s.sleep(5 * time.Second)
		if !equalToServer(s) {
			s.t.Errorf("5s after the lag ended, the store (%d objects at %s) differs from the server's (%d at %s)",
				s.store.Len(), s.w.ResourceVersion(), len(s.srv.Objects()), s.srv.ResourceVersion())
		}
	})
}

// While the apiserver that answers WATCHes lags, etcd is restored from a
// snapshot taken before the lag (the resourceVersion goes back, the objects
// created since vanish): the WATCH from ahead of the restored server sends
// nothing, the watchdog gives it up at the silence limit, the probe finds
// the server behind, and the store becomes the restored server's while the
// lag lasts.
func TestALaggingWatchCacheStillFindsARestore(t *testing.T) {
	l := &lagging{}
	runSimVia(t, 3, watcher.Options[object]{}, func(src watcher.Source) watcher.Source { l.Source = src; return l }, func(s *sim) {
		if !s.waitSynced(time.Minute) {
			s.t.Fatal("no sync")
		}
		saved := s.srv.Save()
		l.set(true)
		s.srv.Cut()
		for i := range 20 {
			s.srv.Put("ns", fmt.Sprintf("new-%d", i), "after the snapshot")
			s.sleep(time.Second)
		}
		s.srv.Restore(saved, 0)
		bound := watcher.DefaultSilenceLimit + watcher.DefaultBackoff.Max + 10*time.Second
		s.sleep(bound)
		if !equalToServer(s) {
			s.t.Errorf("%v after the restore, with the lag on, the store (%d objects at %s) differs from the restored server's (%d at %s)",
				bound, s.store.Len(), s.w.ResourceVersion(), len(s.srv.Objects()), s.srv.ResourceVersion())
		}
		l.set(false)
	})
}

// The scorecard's flap-error with WatchList on: every stream, a WatchList's
// too, ends in an ERROR after its first event. The first relist's WatchList
// fails on its first initial event and the list is made with LIST; the
// relists after it in the same stretch of trouble list with LIST at once
// instead of asking for a WatchList that fails the same way (client-go's
// reflector asks again every time: one request more a relist). After the
// fault, the store catches up within a backoff cap.
func TestFailedWatchListIsNotRetriedUnderTheSameTrouble(t *testing.T) {
	runSim(t, 3, watcher.Options[object]{WatchList: true}, func(s *sim) {
		from := s.breakStreams(fakeapi.ErrorAfterFirstEvent)
		for i := range 120 {
			s.srv.Put("ns", fmt.Sprintf("obj-%d", i%3), fmt.Sprintf("write %d", i))
			s.sleep(time.Second)
		}
		// (from is the instant of the first sync's WatchList: virtual time
		// has not moved since.)
		watchLists, lists := s.count("WATCHLIST", from.Add(time.Nanosecond), time.Now()), s.count("LIST", from, time.Now())
		if watchLists != 1 || lists < 2 {
			s.t.Errorf("%d WatchLists and %d LISTs in 2 minutes of streams that end in an ERROR after their first event; want the first relist's WatchList alone, and LISTs after it", watchLists, lists)
		}
		s.srv.SetFault(fakeapi.Healthy)
		s.sleep(watcher.DefaultBackoff.Max + 5*time.Second)
		if !equalToServer(s) {
			s.t.Errorf("%v after the fault ended, the store (%d objects at %s) differs from the server's (%d at %s)",
				watcher.DefaultBackoff.Max+5*time.Second, s.store.Len(), s.w.ResourceVersion(), len(s.srv.Objects()), s.srv.ResourceVersion())
		}
	})
}
