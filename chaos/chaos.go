// Package chaos runs the whole controller through a storm of faults while
// its objects churn, then checks that it lost nothing.
//
// The set-up, all real processes on loopback:
//
//	churner ──writes──▶ apiserver ─┐
//	                               ├── etcd (compacted every ~10 s)
//	controller ──▶ fault proxy ──▶ apiserver, watch cache off (restarted once)
//	               cuts a WATCH every ~2 s, sends a 410 ERROR event every ~10 s,
//	               cuts its streams and refuses connections for 1 s around each compaction
//
// With the watch cache off, every WATCH and LIST goes to etcd, so after a
// compaction a re-WATCH from an old resourceVersion gets a real 410 from the
// server, not only the proxy's. The churner writes through another apiserver
// so that it knows exactly what it did.
//
// The faults come in this order over the run's Duration:
//
//	0 ────────── 30% ────────── 50% ─────── 60% ──────── 75% ────────── 100%
//	periodic: cuts, 410s, compactions │ flap-cut │ flap-error │   freeze    │
//	             apiserver restart
//
// The last three are persistent faults, each alone for its share of the run:
// every stream cut after its first frame; every stream ended by a 500 ERROR
// event after its first event; streams that stay open and pass nothing. A
// watcher that takes a stream that delivered something for a healthy one
// storms through the first two; one without a watchdog hangs in the third.
// The verdict holds the watcher to its request budget over the whole run:
// the LISTs and WATCHes it made in any minute, counted on its own transport
// (refused connections included), within the bound its backoff promises
// (40 a minute for the real one; see package watcher).
//
// The short run compresses the watcher's backoff and watchdog ×15 (Config.
// Compress: the backoff's cap is 2 s, its reset after 8 s calm, the silence
// limit 10 s): the faults of a 60 s run then meet the watcher at every step
// of its backoff, as they would over 15 minutes, and the frozen phase outlasts
// the watchdog. Its periodic 410s and compactions come every ~6 s, so that
// each happens a few times before the persistent faults. The full run
// (cmd/chaos) keeps the watcher's timing real.
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
// and, while the faults lasted, that the watcher kept to its request budget
// (sharded runs: and each replica's ring to its bound on requests on Leases).
//
// Run returns a Report with the counts (events, relists, watch restarts,
// retries...) and the verdict; cmd/chaos prints it and exits non-zero on any
// loss.
//
// Budget measures the request budget fault by fault instead: each persistent
// fault alone for a fixed time against the same wiring (but the apiserver's
// watch cache on, as in production), with the watcher's real backoff: its
// LISTs and WATCHes a minute against the bound, then whether the store
// caught up once the fault was lifted (cmd/chaos --budget).
package chaos

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"rawwatch/app"
	"rawwatch/client"
	"rawwatch/faultproxy"
	"rawwatch/internal/controlplane"
	"rawwatch/observe"
	"rawwatch/reconcile"
	"rawwatch/reconcile/myresource"
	"rawwatch/ring"
	"rawwatch/shard"
	"rawwatch/sharding"
	"rawwatch/store"
	"rawwatch/watcher"
)

// DefaultMaxConvergence bounds the time from the end of the faults until the
// controller has caught up: the watcher's backoff cap (30 s) plus the time
// to relist and work off what changed meanwhile.
const DefaultMaxConvergence = time.Minute

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
	// CutEvery, ExpireEvery and CompactEvery space the periodic faults
	// (defaults 2 s, 6 s, 6 s); a negative value turns the fault off.
	CutEvery, ExpireEvery, CompactEvery time.Duration
	// NoRestart skips the apiserver restart (at 30% of Duration).
	NoRestart bool
	// NoPhases skips the persistent faults (flap-cut, flap-error, freeze):
	// the periodic faults then last the whole Duration.
	NoPhases bool
	// Compress makes the watcher's backoff and watchdog this many times
	// quicker than their defaults (default 15; 1 keeps them real).
	Compress int
	// Converge is how long the controller has to catch up once the faults
	// stop (default 2 minutes).
	Converge time.Duration
	// MaxConvergence is the verdict's bound on that time (default
	// DefaultMaxConvergence; negative: no bound).
	MaxConvergence time.Duration
	// Replicas > 1 runs that many replicas with --sharding, dividing the
	// objects; one is killed at KillAt and another started at RejoinAt
	// (fractions of Duration; defaults 0.4 and 0.55), with half again the
	// others' lease duration and renew period (rejoinLease); others write
	// to the ring's Leases meanwhile (hands). RingLease and RingRenew time
	// their ring (default the ring's defaults).
	Replicas             int
	KillAt, RejoinAt     float64
	RingLease, RingRenew time.Duration
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
	c.Objects = cmp.Or(c.Objects, 1000)
	def(&c.Duration, time.Minute)
	c.ChurnRate = cmp.Or(c.ChurnRate, 50)
	c.Writers = cmp.Or(c.Writers, 8)
	c.Workers = cmp.Or(c.Workers, 4)
	if c.QPS == 0 {
		c.QPS, c.Burst = 200, 400
	}
	def(&c.CutEvery, 2*time.Second)
	def(&c.ExpireEvery, 6*time.Second)
	def(&c.CompactEvery, 6*time.Second)
	def(&c.Converge, 2*time.Minute)
	if c.KillAt == 0 {
		c.KillAt, c.RejoinAt = 0.4, 0.55
	}
	def(&c.MaxConvergence, DefaultMaxConvergence)
	c.Compress = cmp.Or(c.Compress, 15)
	defaultLogging(&c.Logger, &c.Logf)
}

// Watch is the watcher's options in the run: its defaults, with the backoff
// and the watchdog Compress times quicker.
func (c Config) Watch() watcher.Options[app.Object] {
	n := time.Duration(max(c.Compress, 1))
	b := watcher.DefaultBackoff
	b.Initial, b.Max, b.ResetAfter = b.Initial/n, b.Max/n, b.ResetAfter/n
	return watcher.Options[app.Object]{Backoff: b, SilenceLimit: watcher.DefaultSilenceLimit / n}
}

// rejoinLease and rejoinRenew are the ring's lease duration and renew
// period of the replica started in the killed one's place: half again the
// others' (a rolling update that changes --sharding-lease-duration and
// --sharding-renew-period runs members of both).
func rejoinLease(c Config) time.Duration {
	return cmp.Or(c.RingLease, ring.DefaultLeaseDuration) * 3 / 2
}

func rejoinRenew(c Config) time.Duration {
	return cmp.Or(c.RingRenew, ring.DefaultRenewPeriod) * 3 / 2
}

// restartAt is when the apiserver restarts, as a fraction of Duration.
const restartAt = 0.3

// phase is a persistent fault for a share of the run, from and to being
// fractions of its Duration; What says what it does, for the report. The
// periodic faults stop when the first phase begins.
type phase struct {
	Name, What string
	from, to   float64
	set        func(*faultproxy.Proxy, bool)
}

var phases = []phase{
	{"flap-cut", "every WATCH cut after its first frame", 0.5, 0.6, (*faultproxy.Proxy).FlapCut},
	{"flap-error", "every WATCH ended by a 500 ERROR event after its first event", 0.6, 0.75, (*faultproxy.Proxy).FlapError},
	{"freeze", "WATCH streams open, passing nothing", 0.75, 1, (*faultproxy.Proxy).Freeze},
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
	st, err := newStage(ctx, cp, "chaos", cfg.Objects, cfg.ChurnRate, cfg.Logf, "--watch-cache=false")
	if err != nil {
		return nil, err
	}
	defer st.close()
	target, proxy, ns, churn := st.target, st.proxy, st.ns, st.churn
	rep.Namespace = ns

	// The controller, as main.go assembles it, through the proxy (with
	// sharding, Replicas of them); each one's transport metered, for the
	// request budget.
	ref := newReferee()
	var sharding *app.Sharding
	if cfg.Replicas > 1 {
		sharding = &app.Sharding{Namespace: ns, LeaseDuration: cfg.RingLease, RenewPeriod: cfg.RingRenew}
	}
	var replicas []*replica
	next := 0
	add := func(wait bool) (*replica, error) {
		name := fmt.Sprintf("r%d", next)
		next++
		var sh *app.Sharding
		if sharding != nil {
			s := *sharding
			s.Identity = name
			if next > cfg.Replicas { // the one started in the killed one's place: a rolling update that changed the ring's flags
				s.LeaseDuration, s.RenewPeriod = rejoinLease(cfg), rejoinRenew(cfg)
			}
			sh = &s
		}
		r, err := newReplica(cfg, target.ConfigVia(proxy.URL), ns, name, sh, ref)
		if err != nil {
			return nil, err
		}
		r.rec.who = name
		replicas = append(replicas, r)
		return r, r.start(ctx, cfg.Logger, wait)
	}
	defer func() {
		for _, r := range replicas {
			if r.stop != nil {
				r.stop()
			}
		}
	}()
	if cfg.Sabotage != nil {
		cfg.Sabotage(proxy)
	}
	for range max(cfg.Replicas, 1) {
		if _, err := add(false); err != nil {
			return nil, err
		}
	}
	for _, r := range replicas {
		if err := waitSynced(ctx, r.app); err != nil {
			return nil, err
		}
	}
	// (The rejoining replica is appended while the faults run: what they
	// use is taken now.)
	first, rec := replicas[0], replicas[0].rec
	var victim *replica
	if len(replicas) > 1 {
		victim = replicas[1]
	}
	rep.InitialSync = time.Since(started)
	var h *hands // writes by others to the ring's Leases
	if cfg.Replicas > 1 {
		if h, err = newHands(target.Config(), ns, cfg.Logf); err != nil {
			return nil, err
		}
	}

	// Churn and faults, together, for cfg.Duration: the periodic faults, then
	// the persistent ones in their phases.
	cfg.Logf("churning %d objects at %.0f changes/s for %v, with faults", cfg.Objects, cfg.ChurnRate, cfg.Duration)
	faultsStart := time.Now()
	chaosCtx, stopChaos := context.WithTimeout(ctx, cfg.Duration)
	periodicCtx := chaosCtx
	if !cfg.NoPhases {
		var stopPeriodic context.CancelFunc
		periodicCtx, stopPeriodic = context.WithTimeout(chaosCtx, at(cfg.Duration, phases[0].from))
		defer stopPeriodic()
	}
	var faults sync.WaitGroup
	every := func(d time.Duration, f func()) {
		if d > 0 {
			faults.Go(func() { faultproxy.Every(periodicCtx, d, f) })
		}
	}
	// A cut finds no stream while the watcher backs off: that is the
	// backoff at work. (A cut that waited for the next stream would cut
	// it before the real 410 after a compaction could reach it.)
	every(cfg.CutEvery, func() { proxy.CutWatches() })
	// The watch may be down when the time comes (refused, backing off,
	// relisting): then the next stream to open gets the 410, once it has
	// been open a moment. (The first stream after a compaction must meet
	// the server's own 410 first.)
	every(cfg.ExpireEvery, func() {
		for periodicCtx.Err() == nil {
			if proxy.OpenWatches() > 0 {
				time.Sleep(200 * time.Millisecond)
				if proxy.ExpireWatches() > 0 {
					return
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	// A compaction alone goes unnoticed: a WATCH that is open keeps going,
	// and one that restarts at once is usually past the compacted revision.
	// It bites a controller that was away for a while: so cut its streams
	// and refuse its connections for a second, let the churn go on,
	// compact, and let it back. Its re-WATCH starts from a resourceVersion
	// etcd no longer has. (Refusing alone left an open stream running
	// through the compaction: under load, make test's short run once met
	// three compactions and not one 410 from the server.)
	every(cfg.CompactEvery, func() {
		proxy.Refuse()
		proxy.CutWatches()
		defer proxy.Accept()
		select {
		case <-periodicCtx.Done():
			return
		case <-time.After(time.Second):
		}
		if _, err := cp.Compact(periodicCtx); err == nil {
			rep.mu.Lock()
			rep.Compactions++
			rep.mu.Unlock()
		}
	})
	if !cfg.NoRestart {
		faults.Go(func() {
			if !sleep(chaosCtx, at(cfg.Duration, restartAt)) {
				return
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
	if cfg.Replicas > 1 {
		faults.Go(func() {
			labels, did := h.run(chaosCtx, cfg.Duration, func() []string { return []string{first.name} })
			rep.mu.Lock()
			defer rep.mu.Unlock()
			rep.HandLabels, rep.Hands = labels, did
		})
		// One replica is killed (as by SIGKILL: it neither finishes its
		// writes nor deletes its Lease), and one started in its place later,
		// a new member as a restarted pod is.
		faults.Go(func() {
			if !sleep(chaosCtx, at(cfg.Duration, cfg.KillAt)) {
				return
			}
			cfg.Logf("killing replica %s", victim.name)
			victim.kill()
			rep.mu.Lock()
			rep.Killed = append(rep.Killed, fmt.Sprintf("%s at %s", victim.name, time.Since(faultsStart).Round(time.Second)))
			rep.mu.Unlock()
			if !sleep(chaosCtx, time.Until(faultsStart.Add(at(cfg.Duration, cfg.RejoinAt)))) {
				return
			}
			r, err := add(false)
			cfg.Logf("started replica %s in its place", r.name)
			rep.mu.Lock()
			defer rep.mu.Unlock()
			rep.Started = append(rep.Started, fmt.Sprintf("%s at %s", r.name, time.Since(faultsStart).Round(time.Second)))
			if err != nil {
				rep.RestartErr = err
			}
		})
	}
	if !cfg.NoPhases {
		for _, ph := range phases {
			faults.Go(func() {
				if !sleep(chaosCtx, time.Until(faultsStart.Add(at(cfg.Duration, ph.from)))) {
					return
				}
				cfg.Logf("%s: %s", ph.Name, ph.What)
				before, begin := proxy.Counts(), time.Now()
				ph.set(proxy, true)
				sleep(chaosCtx, time.Until(faultsStart.Add(at(cfg.Duration, ph.to))))
				ph.set(proxy, false)
				end, after := time.Now(), proxy.Counts()
				rep.mu.Lock()
				defer rep.mu.Unlock()
				rep.Phases = append(rep.Phases, PhaseReport{Name: ph.Name, What: ph.What, From: begin.Sub(faultsStart), To: end.Sub(faultsStart),
					Requests: first.meter.Between(begin, end), Cut: after.Cut - before.Cut, ErrorEvents: after.ErrorEvents - before.ErrorEvents,
					Silent: rec.silentBetween(begin, end)})
			})
		}
	}
	churn.run(chaosCtx, cfg.Writers)
	stopChaos()
	faults.Wait()
	faultsEnd := time.Now()
	if rep.RestartErr != nil {
		return nil, fmt.Errorf("restarting the apiserver: %w", rep.RestartErr)
	}
	if err := proxy.Accept(); err != nil { // (a sabotage stays in force)
		return nil, err
	}

	// Let the controller catch up, then judge.
	cfg.Logf("faults over; waiting up to %v for the controller to converge", cfg.Converge)
	churnEnd := time.Now()
	// The budget of the replica that made the most requests in a minute.
	b := budget{Bound: requestBound(cfg.Watch().Backoff), Busiest: -1}
	for _, r := range replicas {
		if n := r.meter.Busiest(faultsStart, faultsEnd, time.Minute); n > b.Busiest {
			b.Requests, b.Busiest = r.meter.Between(faultsStart, faultsEnd), n
		}
	}
	if cfg.Replicas > 1 {
		b.leases(replicas, faultsStart, faultsEnd, cmp.Or(cfg.RingRenew, ring.DefaultRenewPeriod))
	}
	judge := &judge{list: target.Config(), ns: ns, replicas: replicas, ref: ref, deleted: churn.deletions(), budget: b,
		sharded: cfg.Replicas > 1, lease: max(cmp.Or(cfg.RingLease, ring.DefaultLeaseDuration), rejoinLease(cfg)), outage: rep.RestartTook}
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
	rep.fill(replicas, proxy.Counts(), churn)
	return rep, nil
}

// at is the fraction f of d.
func at(d time.Duration, f float64) time.Duration { return time.Duration(f * float64(d)) }

// sleep waits for d; false means ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// runSynced runs ctrl, logging to logger, and, with wait, waits (at most 2
// minutes) for its first list. stop ends it and waits for it, whatever the
// error; it may be called more than once.
func runSynced(ctx context.Context, ctrl *app.App, logger klog.Logger, wait bool) (stop func(), err error) {
	ctrlCtx, cancel := context.WithCancel(klog.NewContext(ctx, logger))
	done := make(chan struct{})
	go func() { ctrl.Run(ctrlCtx); close(done) }()
	stop = func() { cancel(); <-done }
	if !wait {
		return stop, nil
	}
	return stop, waitSynced(ctx, ctrl)
}

// waitSynced waits (at most 2 minutes) for ctrl's first list.
func waitSynced(ctx context.Context, ctrl *app.App) error {
	select {
	case <-ctrl.Watcher.Synced():
		return nil
	case <-time.After(2 * time.Minute):
		return errors.New("the controller did not sync within 2 minutes")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stage is what a chaos run and a budget measurement stand on: an apiserver
// of their own on cp's etcd, a fault proxy in front of it, a namespace, and
// a churner that writes straight to cp's own apiserver, its objects created.
type stage struct {
	target *controlplane.APIServer
	proxy  *faultproxy.Proxy
	ns     string
	churn  *churner
}

func newStage(ctx context.Context, cp *controlplane.ControlPlane, name string, objects int, rate float64,
	logf func(string, ...any), apiserverArgs ...string) (_ *stage, err error) {
	st := &stage{}
	defer func() {
		if err != nil {
			st.close()
		}
	}()
	if st.target, err = cp.AddAPIServer(ctx, fmt.Sprintf("%s-apiserver-%d", name, rand.IntN(1e6)), apiserverArgs...); err != nil {
		return st, err
	}
	if st.proxy, err = cp.FaultProxy(st.target); err != nil {
		return st, err
	}
	writer, err := client.New(cp.Config())
	if err != nil {
		return st, err
	}
	if st.ns, err = namespace(ctx, cp); err != nil {
		return st, err
	}
	st.churn = newChurner(writer, st.ns, objects, rate)
	logf("creating %d objects in namespace %s", objects, st.ns)
	if err := st.churn.populate(ctx, objects); err != nil {
		return st, fmt.Errorf("creating the objects: %w", err)
	}
	return st, nil
}

func (st *stage) close() {
	if st.proxy != nil {
		st.proxy.Close()
	}
	if st.target != nil {
		st.target.Stop()
	}
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
	status myresource.StatusWriter

	// ref notices a key in two reconciles at once (shared by the replicas);
	// who names this recorder's replica to it.
	ref *referee
	who string
	// byObject: the referee tells objects apart by UID (sharded runs: see
	// objectKey); a single controller is held to one reconcile per key.
	byObject bool

	mu           sync.Mutex
	reconciles   int64
	retries      int64
	longestRetry time.Duration
	conflicts    int64
	writes       int64
	// seenDeleted: deletions handled (Deleted returned nil), and when. A
	// killed replica's stop still drains its queue (a SIGKILL would not):
	// the verdict counts none handled after its kill.
	seenDeleted map[incarnation]time.Time
	// heardDeleted: deletions that reached this replica (a DELETED event,
	// or the gate held, replayed or swept them), handled or not.
	heardDeleted map[incarnation]bool
	// dropped: deletions its gate dropped, and when (it stopped watching
	// their slot before it worked it).
	dropped map[incarnation]time.Time
	unknown int64
	// history is, per key, what the watcher and the reconciler did with it:
	// the story behind a failed check.
	history map[string][]string

	// What the watcher could know. store is the controller's; known holds
	// every object that was ever in it, and when it first was (lastHad:
	// when it last was; a watch that left the object's slot and came back
	// had it again from its list on, see custody); gaps are the stretches of history
	// the watcher jumped over: from the last resourceVersion it had to the
	// resourceVersion of the (re)list that followed. An object created and
	// deleted inside a gap was never visible to any client.
	store   *store.Store[app.Object]
	known   map[incarnation]time.Time
	lastHad map[incarnation]time.Time
	lastRV  int64
	gaps    [][2]int64
	// lists are the watcher's (re)lists: when, at which resourceVersion, and
	// which slots (coverage: the watcher's Covered, read as it reports the
	// list, is the slots listed).
	lists    []listed
	coverage func() shard.SlotSet
	// watching is when the slots its watch follows changed: at each list
	// (as lists), and at each reshard (SetShard: the slots it left are no
	// longer watched from then on, before the relist is in).
	watching []listed

	// silent holds when the watchdog abandoned a stream.
	silent []time.Time
	// owns is, with sharding, when this replica claimed which slots.
	owns ownership
}

func newRecorder(ref *referee) *recorder {
	return &recorder{ref: ref, seenDeleted: map[incarnation]time.Time{}, heardDeleted: map[incarnation]bool{}, dropped: map[incarnation]time.Time{}, history: map[string][]string{},
		known: map[incarnation]time.Time{}, lastHad: map[incarnation]time.Time{}}
}

func (r *recorder) wrap(inner reconcile.Reconciler[app.Object]) reconcile.Reconciler[app.Object] {
	r.inner = inner
	return r
}

func (r *recorder) Deleted(ctx context.Context, d store.Delta[app.Object]) error {
	obj := r.refKey(d.Key, d.Object.GetUID())
	r.ref.enter(obj, r.who)
	err := r.inner.Deleted(ctx, d)
	r.ref.leave(obj)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		r.seenDeleted[incarnation{d.Key, d.Object.UID}] = time.Now()
		if d.FinalStateUnknown {
			r.unknown++
		}
		r.history[d.Key] = append(r.history[d.Key], fmt.Sprintf("reconciled deletion of uid %s (final state unknown: %v)", d.Object.UID, d.FinalStateUnknown))
	}
	return err
}

func (r *recorder) Reconcile(ctx context.Context, key string) error {
	var uid types.UID
	if o, ok := r.store.Get(key); ok {
		uid = o.GetUID()
	}
	obj := r.refKey(key, uid)
	r.ref.enter(obj, r.who)
	r.mu.Lock()
	r.reconciles++
	r.mu.Unlock()
	err := r.inner.Reconcile(ctx, key)
	r.ref.leave(obj)
	return err
}

// Observe routes the events the recorder needs. The watcher's come on its
// goroutine, right after it changed the store.
func (r *recorder) Observe(e observe.Event) {
	switch e := e.(type) {
	case watcher.Received:
		r.EventReceived(e.Type, e.Key, e.RV, e.Object)
	case watcher.Handed:
		if e.Type == store.Deleted && e.FinalStateUnknown {
			r.note(e.Key, "a relist found it deleted")
		}
	case app.DeletionRouted:
		r.note(e.Key, fmt.Sprintf("deletion of uid %s %s", e.UID, e.Route))
		r.mu.Lock()
		r.heardDeleted[incarnation{e.Key, types.UID(e.UID)}] = true
		if e.Route == "dropped" {
			r.dropped[incarnation{e.Key, types.UID(e.UID)}] = time.Now()
		}
		r.mu.Unlock()
	case watcher.BookmarkReceived:
		r.BookmarkReceived(e.RV, e.InitialEventsEnd)
	case watcher.Replaced:
		r.Replaced(e.RV, e.Size, e.Added, e.Updated, e.Deleted)
	case sharding.Resharded:
		r.resharded()
	case reconcile.Finished:
		r.Finished(e.Worker, e.Key, e.Took, e.Err, e.RetryIn)
	case ring.ClaimsChanged:
		r.observeClaims(e)
	case watcher.WatchEnded:
		if errors.Is(e.Err, watcher.ErrSilent) {
			r.mu.Lock()
			r.silent = append(r.silent, time.Now())
			r.mu.Unlock()
		}
	}
}

// silentBetween counts the streams the watchdog abandoned from from to to.
func (r *recorder) silentBetween(from, to time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, t := range r.silent {
		if !t.Before(from) && t.Before(to) {
			n++
		}
	}
	return n
}

// note adds what happened to key to its history.
func (r *recorder) note(key, what string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.history[key] = append(r.history[key], what)
}

func (r *recorder) EventReceived(eventType, key, rv string, o metav1.Object) {
	obj, inStore := r.store.Get(key)
	r.mu.Lock()
	defer r.mu.Unlock()
	uid := ""
	if o != nil {
		uid = " (uid " + string(o.GetUID()) + ")"
	}
	r.history[key] = append(r.history[key], eventType+" event at resourceVersion "+rv+uid)
	if eventType == watcher.Deleted && o != nil {
		r.heardDeleted[incarnation{key, o.GetUID()}] = true
	}
	r.lastRV = revision(rv)
	if inStore {
		r.had(incarnation{key, obj.UID}, time.Now())
	}
}

func (r *recorder) BookmarkReceived(rv string, _ bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastRV = revision(rv)
}

func (r *recorder) Replaced(rv string, _, _, _, _ int) {
	objs := r.store.List()
	slots := shard.All()
	if r.coverage != nil {
		slots = r.coverage()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gaps = append(r.gaps, [2]int64{r.lastRV, revision(rv)})
	r.lastRV = revision(rv)
	now := time.Now()
	r.lists = append(r.lists, listed{at: now, rv: revision(rv), slots: slots})
	r.watching = append(r.watching, r.lists[len(r.lists)-1])
	for _, o := range objs {
		r.had(incarnation{store.KeyOf(o), o.UID}, now)
	}
}

// had records that the store held o at t: the first time, and the last.
// Callers hold mu.
func (r *recorder) had(o incarnation, t time.Time) {
	if _, ok := r.known[o]; !ok {
		r.known[o] = t
	}
	if t.After(r.lastHad[o]) {
		r.lastHad[o] = t
	}
}

// listed is one (re)list of a watcher: when it was in the store, its
// resourceVersion, and the slots it listed.
type listed struct {
	at    time.Time
	rv    int64
	slots shard.SlotSet
}

// listBefore is the last list of slot that was in the store at or before t
// (ok false: none was). Callers hold mu.
func (r *recorder) listBefore(slot int, t time.Time) (l listed, ok bool) {
	for _, x := range r.lists {
		if x.at.After(t) {
			break
		}
		if x.slots.Has(slot) {
			l, ok = x, true
		}
	}
	return l, ok
}

// resharded records a reshard: the watch follows, until its relist is in,
// only the slots of both shards (the watcher's Covered then).
func (r *recorder) resharded() {
	slots := shard.All()
	if r.coverage != nil {
		slots = r.coverage()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.watching = append(r.watching, listed{at: time.Now(), rv: r.lastRV, slots: slots})
}

// watchedAt: the watch followed slot at t (the last list or reshard at or
// before t had it). Callers hold mu.
func (r *recorder) watchedAt(slot int, t time.Time) bool {
	var last *listed
	for i := range r.watching {
		if r.watching[i].at.After(t) {
			break
		}
		last = &r.watching[i]
	}
	return last != nil && last.slots.Has(slot)
}

// watchedThrough: the watch followed slot from from to to (watchedAt
// from, and no list or reshard after it, up to to, left the slot). Callers
// hold mu.
func (r *recorder) watchedThrough(slot int, from, to time.Time) bool {
	if !r.watchedAt(slot, from) {
		return false
	}
	for _, w := range r.watching {
		if w.at.After(from) && !w.at.After(to) && !w.slots.Has(slot) {
			return false
		}
	}
	return true
}

// watchAround describes this watcher's view of slot around deletion d: its
// lists of the slot within a minute of d (offset from d, resourceVersion)
// and the gaps of its watch that contain d's creation. Callers hold mu.
func (r *recorder) watchAround(slot int, d deletion) string {
	var out []string
	for _, x := range r.lists {
		if x.slots.Has(slot) && x.at.Sub(d.At).Abs() <= time.Minute {
			out = append(out, fmt.Sprintf("listed %+.1fs at %d", x.at.Sub(d.At).Seconds(), x.rv))
		}
	}
	for _, g := range r.gaps {
		if g[0] < d.Created && d.Created <= g[1] {
			out = append(out, fmt.Sprintf("watch gap %d–%d", g[0], g[1]))
		}
	}
	if len(out) == 0 {
		return "no list of it within a minute, no gap over its creation"
	}
	return strings.Join(out, ", ")
}

// invisible: an object the watcher never had, created inside a gap (so it
// was deleted before the list that ended the gap, or that list would have
// brought it). Callers hold mu.
func (r *recorder) invisible(d deletion) bool {
	if _, had := r.known[d.incarnation]; had {
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

// defaultLogging fills a run's logging in: klog's logger, and no progress
// lines.
func defaultLogging(l *klog.Logger, logf *func(string, ...any)) {
	if l.GetSink() == nil {
		*l = klog.Background()
	}
	if *logf == nil {
		*logf = func(string, ...any) {}
	}
}
