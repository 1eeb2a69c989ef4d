// Package chaos runs the whole controller through a storm of faults while
// its objects churn, then checks that it lost nothing.
//
// The set-up, all real processes on loopback:
//
//	churner ──writes──▶ apiserver ─┐
//	                               ├── etcd (compacted every ~10 s)
//	controller ──▶ fault proxy ──▶ apiserver, watch cache off (restarted once)
//	               cuts a WATCH every ~2 s, sends a 410 ERROR event every ~10 s,
//	               refuses connections for 1 s around each compaction
//
// With the watch cache off, every WATCH and LIST goes to etcd, so after a
// compaction a re-WATCH from an old resourceVersion gets a real 410 from the
// server, not only the proxy's. The churner writes through another apiserver
// so that it knows exactly what it did.
//
// When the churn stops, the faults stop, and the controller has a while to
// catch up. The verdict then checks four things, each a way a controller can
// lose data:
//
//   - its store equals a fresh LIST (same keys, UIDs and resourceVersions):
//     no missed event, no ghost left behind by a missed deletion;
//   - every object's status.observedGeneration equals its metadata.generation
//     (and phase is Processed): no change went unreconciled;
//   - every deletion the churner made reached the reconciler, with the UID of
//     the object deleted (a re-created name is another object);
//   - no key was ever reconciled by two workers at once.
//
// Run returns a Report with the counts (events, relists, watch restarts,
// retries...) and the verdict; cmd/chaos prints it and exits non-zero on any
// loss.
package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"rawwatch/client"
	"rawwatch/faultproxy"
	"rawwatch/internal/app"
	"rawwatch/internal/controlplane"
	"rawwatch/observe"
	"rawwatch/reconcile"
	"rawwatch/store"
	"rawwatch/watcher"
)

// Config describes a chaos run. Zero values take the defaults of the short
// run the test suite makes; cmd/chaos's defaults are the full run.
type Config struct {
	// Objects is the population the churn keeps close to (default 1,000).
	Objects int
	// Duration is how long the objects churn under faults (default 60 s).
	Duration time.Duration
	// ChurnRate is the number of changes per second (default 50), made by
	// Writers goroutines (default 8).
	ChurnRate float64
	Writers   int
	// Workers is the controller's reconcile workers (default 4).
	Workers int
	// RetryMax caps the per-key retry delay (default 1000 s, the binary's
	// --retry-max-delay).
	RetryMax time.Duration
	// QPS and Burst are the controller's client-side rate limits (default
	// 200 and 400; the binary's defaults are 50 and 100).
	QPS   float32
	Burst int
	// CutEvery, ExpireEvery and CompactEvery space the faults (defaults 2 s,
	// 10 s, 10 s); a negative value turns the fault off.
	CutEvery, ExpireEvery, CompactEvery time.Duration
	// NoRestart skips the apiserver restart half-way through.
	NoRestart bool
	// Converge is how long the controller has to catch up once the faults
	// stop (default 2 minutes).
	Converge time.Duration
	// Sabotage, when set, gets the proxy before the run starts: a way to
	// break something on purpose and watch the verdict fail.
	Sabotage func(*faultproxy.Proxy)
	// Logger is the controller's logger (default klog's).
	Logger klog.Logger
	// Logf reports progress (optional).
	Logf func(format string, args ...any)
}

func (c *Config) defaults() {
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if c.Objects == 0 {
		c.Objects = 1000
	}
	def(&c.Duration, time.Minute)
	if c.ChurnRate == 0 {
		c.ChurnRate = 50
	}
	if c.Writers == 0 {
		c.Writers = 8
	}
	if c.Workers == 0 {
		c.Workers = 4
	}
	if c.QPS == 0 {
		c.QPS, c.Burst = 200, 400
	}
	def(&c.CutEvery, 2*time.Second)
	def(&c.ExpireEvery, 10*time.Second)
	def(&c.CompactEvery, 10*time.Second)
	def(&c.Converge, 2*time.Minute)
	if c.Logger.GetSink() == nil {
		c.Logger = klog.Background()
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
}

// Run makes one chaos run on cp: it starts an apiserver of its own (watch
// cache off) and a fault proxy, runs the controller through them in a new
// namespace, churns, injects faults, waits for convergence and returns the
// report. An error means the run could not be carried out; a loss is in the
// report's verdict.
func Run(ctx context.Context, cp *controlplane.ControlPlane, cfg Config) (*Report, error) {
	cfg.defaults()
	rep := &Report{Config: cfg}
	started := time.Now()

	cfg.Logf("starting an apiserver with its watch cache off")
	target, err := cp.AddAPIServer(ctx, fmt.Sprintf("chaos-apiserver-%d", rand.IntN(1e6)), "--watch-cache=false")
	if err != nil {
		return nil, err
	}
	defer target.Stop()
	proxy, err := cp.FaultProxy(target)
	if err != nil {
		return nil, err
	}
	defer proxy.Close()

	writer, err := client.New(cp.Config())
	if err != nil {
		return nil, err
	}
	ns, err := namespace(ctx, cp)
	if err != nil {
		return nil, err
	}
	rep.Namespace = ns
	churn := newChurner(writer, ns, cfg.Objects, cfg.ChurnRate)
	cfg.Logf("creating %d objects in namespace %s", cfg.Objects, ns)
	if err := churn.populate(ctx, cfg.Objects); err != nil {
		return nil, fmt.Errorf("creating the objects: %w", err)
	}

	// The controller, as main.go assembles it, through the proxy.
	ctrlCfg := target.ConfigVia(proxy.URL)
	ctrlCfg.QPS, ctrlCfg.Burst = cfg.QPS, cfg.Burst
	rec := newRecorder()
	ctrl, err := app.New(app.Options{
		Config: ctrlCfg, Namespace: ns, Workers: cfg.Workers, RetryMax: cfg.RetryMax,
		Observer:       rec,
		WrapReconciler: rec.wrap,
		WrapStatusWriter: func(w reconcile.StatusWriter) reconcile.StatusWriter {
			rec.status = w
			return rec
		},
	})
	if err != nil {
		return nil, err
	}
	rec.store = ctrl.Store
	if cfg.Sabotage != nil {
		cfg.Sabotage(proxy)
	}
	ctrlCtx, stopCtrl := context.WithCancel(klog.NewContext(ctx, cfg.Logger))
	ctrlDone := make(chan error, 1)
	go func() { ctrlDone <- ctrl.Run(ctrlCtx) }()
	defer func() { stopCtrl(); <-ctrlDone }()
	select {
	case <-ctrl.Watcher.Synced():
	case <-time.After(2 * time.Minute):
		return nil, errors.New("the controller did not sync within 2 minutes")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	rep.InitialSync = time.Since(started)

	// Churn and faults, together, for cfg.Duration.
	cfg.Logf("churning %d objects at %.0f changes/s for %v, with faults", cfg.Objects, cfg.ChurnRate, cfg.Duration)
	chaosCtx, stopChaos := context.WithTimeout(ctx, cfg.Duration)
	var faults sync.WaitGroup
	every := func(d time.Duration, f func()) {
		if d > 0 {
			faults.Go(func() { faultproxy.Every(chaosCtx, d, f) })
		}
	}
	every(cfg.CutEvery, func() { proxy.CutWatches() })
	// The watch may be down when the time comes (refused, backing off,
	// relisting): then the next stream to open gets the 410.
	every(cfg.ExpireEvery, func() {
		for proxy.ExpireWatches() == 0 && chaosCtx.Err() == nil {
			time.Sleep(50 * time.Millisecond)
		}
	})
	// A compaction alone goes unnoticed: a WATCH that is open keeps going,
	// and one that restarts at once is usually past the compacted revision.
	// It bites a controller that was away for a while: so refuse its
	// connections for a second, let the churn go on, compact, and let it
	// back. Its re-WATCH starts from a resourceVersion etcd no longer has.
	every(cfg.CompactEvery, func() {
		proxy.Refuse()
		defer proxy.Accept()
		select {
		case <-chaosCtx.Done():
			return
		case <-time.After(time.Second):
		}
		if _, err := cp.Compact(chaosCtx); err == nil {
			rep.mu.Lock()
			rep.Compactions++
			rep.mu.Unlock()
		}
	})
	if !cfg.NoRestart {
		faults.Go(func() {
			select {
			case <-chaosCtx.Done():
				return
			case <-time.After(cfg.Duration / 2):
			}
			cfg.Logf("restarting the apiserver")
			begin := time.Now()
			err := target.Restart(context.WithoutCancel(chaosCtx))
			rep.mu.Lock()
			defer rep.mu.Unlock()
			rep.Restarts++
			rep.RestartTook = time.Since(begin)
			rep.RestartErr = err
		})
	}
	churn.run(chaosCtx, cfg.Writers)
	stopChaos()
	faults.Wait()
	if rep.RestartErr != nil {
		return nil, fmt.Errorf("restarting the apiserver: %w", rep.RestartErr)
	}
	if err := proxy.Accept(); err != nil { // (a sabotage stays in force)
		return nil, err
	}

	// Let the controller catch up, then judge.
	cfg.Logf("faults over; waiting up to %v for the controller to converge", cfg.Converge)
	churnEnd := time.Now()
	judge := &judge{list: target.Config(), ns: ns, ctrl: ctrl, rec: rec, deleted: churn.deletions()}
	poll := time.Second + time.Duration(cfg.Objects/5000)*time.Second
	for {
		v, err := judge.verdict(ctx)
		if err != nil {
			return nil, err
		}
		rep.Verdict = v
		if v.converged() || time.Since(churnEnd) > cfg.Converge {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(poll):
		}
	}
	rep.ConvergedIn = time.Since(churnEnd)
	rep.Total = time.Since(started)
	rep.fill(ctrl, proxy.Counts(), rec, churn)
	return rep, nil
}

func namespace(ctx context.Context, cp *controlplane.ControlPlane) (string, error) {
	kube, err := kubernetes.NewForConfig(cp.Config())
	if err != nil {
		return "", err
	}
	name := fmt.Sprintf("chaos-%d", rand.IntN(1e6))
	_, err = kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	return name, err
}

// recorder wraps the reconciler, the status writer and the workers'
// observer: it sees every reconcile, and notices a key in two at once.
type recorder struct {
	inner  reconcile.Reconciler[app.Object]
	status reconcile.StatusWriter

	mu           sync.Mutex
	busy         map[string]bool
	overlaps     []string
	reconciles   int64
	retries      int64
	longestRetry time.Duration
	conflicts    int64
	writes       int64
	seenDeleted  map[incarnation]bool
	unknown      int64
	// history is, per key, what the watcher and the reconciler did with it:
	// the story behind a failed check.
	history map[string][]string

	// What the watcher could know. store is the controller's; known holds
	// every object that was ever in it; gaps are the stretches of history
	// the watcher jumped over: from the last resourceVersion it had to the
	// resourceVersion of the (re)list that followed. An object created and
	// deleted inside a gap was never visible to any client.
	store  *store.Store[app.Object]
	known  map[incarnation]bool
	lastRV int64
	gaps   [][2]int64
}

func newRecorder() *recorder {
	return &recorder{busy: map[string]bool{}, seenDeleted: map[incarnation]bool{}, history: map[string][]string{},
		known: map[incarnation]bool{}}
}

func (r *recorder) wrap(inner reconcile.Reconciler[app.Object]) reconcile.Reconciler[app.Object] {
	r.inner = inner
	return r
}

// enter and leave bracket a call for key, noticing a key in two at once.
func (r *recorder) enter(key string) {
	if r.busy[key] {
		r.overlaps = append(r.overlaps, key)
	}
	r.busy[key] = true
}

func (r *recorder) Deleted(ctx context.Context, d store.Delta[app.Object]) error {
	r.mu.Lock()
	r.enter(d.Key)
	r.mu.Unlock()
	err := r.inner.Deleted(ctx, d)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.busy[d.Key] = false
	if err == nil {
		r.seenDeleted[incarnation{d.Key, d.Object.UID}] = true
		if d.FinalStateUnknown {
			r.unknown++
		}
		r.history[d.Key] = append(r.history[d.Key], fmt.Sprintf("reconciled deletion of uid %s (final state unknown: %v)", d.Object.UID, d.FinalStateUnknown))
	}
	return err
}

func (r *recorder) Reconcile(ctx context.Context, key string) error {
	r.mu.Lock()
	r.enter(key)
	r.reconciles++
	r.mu.Unlock()
	err := r.inner.Reconcile(ctx, key)
	r.mu.Lock()
	r.busy[key] = false
	r.mu.Unlock()
	return err
}

// Observe routes the events the recorder needs. The watcher's come on its
// goroutine, right after it changed the store.
func (r *recorder) Observe(e observe.Event) {
	switch e := e.(type) {
	case watcher.Received:
		r.EventReceived(e.Type, e.Key, e.RV)
	case watcher.BookmarkReceived:
		r.BookmarkReceived(e.RV, e.InitialEventsEnd)
	case watcher.Replaced:
		r.Replaced(e.RV, e.Size, e.Added, e.Updated, e.Deleted)
	case reconcile.Finished:
		r.Finished(e.Worker, e.Key, e.Took, e.Err, e.RetryIn)
	}
}

func (r *recorder) EventReceived(eventType, key, rv string) {
	obj, inStore := r.store.Get(key)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.history[key] = append(r.history[key], eventType+" event at resourceVersion "+rv)
	r.lastRV = revision(rv)
	if inStore {
		r.known[incarnation{key, obj.UID}] = true
	}
}

func (r *recorder) BookmarkReceived(rv string, _ bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastRV = revision(rv)
}

func (r *recorder) Replaced(rv string, _, _, _, _ int) {
	objs := r.store.List()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gaps = append(r.gaps, [2]int64{r.lastRV, revision(rv)})
	r.lastRV = revision(rv)
	for _, o := range objs {
		r.known[incarnation{store.KeyOf(o), o.UID}] = true
	}
}

// invisible: an object the watcher never had, created inside a gap (so it
// was deleted before the list that ended the gap, or that list would have
// brought it). Callers hold mu.
func (r *recorder) invisible(d deletion) bool {
	if r.known[d.incarnation] {
		return false
	}
	for _, g := range r.gaps {
		if g[0] < d.Created && d.Created <= g[1] {
			return true
		}
	}
	return false
}

func (r *recorder) UpdateStatus(ctx context.Context, obj app.Object) (app.Object, error) {
	out, err := r.status.UpdateStatus(ctx, obj)
	if err == nil {
		r.mu.Lock()
		r.writes++
		r.mu.Unlock()
	}
	return out, err
}

func (r *recorder) Finished(_ int, _ string, _ time.Duration, err error, retryIn time.Duration) {
	if err == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if retryIn > 0 {
		r.retries++
		r.longestRetry = max(r.longestRetry, retryIn)
	}
	if apierrors.IsConflict(err) {
		r.conflicts++
	}
}
