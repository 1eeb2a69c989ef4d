// Package leader runs work only while this process holds a lease, so that of
// several replicas of the controller exactly one reconciles at a time.
//
// The election itself is client-go's tools/leaderelection on a
// coordination.k8s.io Lease, the mechanism kube-controller-manager and
// controller-runtime use: the holder renews the Lease every RetryPeriod; if it
// cannot renew for RenewDeadline it gives up; a candidate takes over a Lease
// that nobody renewed for LeaseDuration. This package adds the ordering that
// library leaves to its caller, and gets wrong with ReleaseOnCancel (which
// clears the Lease as soon as renewing stops, while the caller's work may
// still run):
//
//	shutdown (SIGTERM)                         lost lease (renewals failed)
//	────────────────────────────────────       ──────────────────────────────────────────
//	work ctx ends: take no new keys            renewals fail for RenewDeadline: give up
//	keep renewing while in-flight work ends    work ctx AND abort ctx end: in-flight
//	work has stopped                             reconciles are cancelled at once
//	stop renewing                              work has stopped (well inside the margin
//	release the Lease (one try, bounded):        LeaseDuration - RenewDeadline)
//	  a standby takes over at once             never release: a standby takes over
//	Run returns nil                              once the Lease expires
//	                                           Run returns ErrLost: the process exits
//
// The Lease is freed only by this process, only after its work has stopped,
// and never after a failed renewal: at no instant do two replicas work. The
// margin LeaseDuration - RenewDeadline (5 s by default) is how long aborted
// work has to stop before a standby may start; a reconcile honours its
// context, so it stops within one request.
//
// Renewals use their own client: a copy of the rest.Config with its own
// client-side rate limiter and a request timeout of RenewDeadline/2, so a
// busy reconciler or one hung connection cannot make the leader miss its
// deadline.
//
// A lease is not a lock with fencing: if the leader's process freezes longer
// than LeaseDuration (a stopped VM, a debugger), a new leader may start while
// the old one, thawing, still finishes the request it was in.
package leader

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"rawwatch/observe"
)

// ErrLost is returned by Run when the lease was lost while leading.
var ErrLost = errors.New("leader election lost: stopped the workers; exiting so that a restart rejoins as a candidate")

// Defaults of the durations: client-go's and controller-runtime's.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// The events an Elector reports to Config.Observer.
type (
	// Leading: this process (Identity) started (true) or stopped (false) leading.
	Leading struct {
		Identity string
		Leading  bool
	}
	// NewLeader: the lease is held by Identity, possibly this process.
	NewLeader struct{ Identity string }
)

// Config describes the election.
type Config struct {
	// Namespace and Name of the Lease.
	Namespace, Name string
	// Identity of this candidate; default hostname_UUID (in a pod, the
	// hostname is the pod's name).
	Identity string
	// LeaseDuration, RenewDeadline, RetryPeriod: see the package doc. Zero
	// means the default; they must satisfy LeaseDuration > RenewDeadline >
	// 1.2 × RetryPeriod. The Lease stores whole seconds.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Observer hears Leading and NewLeader (optional).
	Observer observe.Observer
	// EventRecorder, when set, records LeaderElection Events on the Lease.
	EventRecorder resourcelock.EventRecorder
}

// Validate fills in defaults and checks the durations.
func (c *Config) Validate() error {
	if c.Namespace == "" || c.Name == "" {
		return errors.New("leader election needs the Lease's namespace and name")
	}
	if c.LeaseDuration == 0 {
		c.LeaseDuration = DefaultLeaseDuration
	}
	if c.RenewDeadline == 0 {
		c.RenewDeadline = DefaultRenewDeadline
	}
	if c.RetryPeriod == 0 {
		c.RetryPeriod = DefaultRetryPeriod
	}
	switch {
	case c.LeaseDuration < time.Second || c.LeaseDuration%time.Second != 0:
		return fmt.Errorf("lease duration %s must be a whole number of seconds (the Lease stores seconds)", c.LeaseDuration)
	case c.LeaseDuration <= c.RenewDeadline:
		return fmt.Errorf("lease duration %s must be longer than the renew deadline %s", c.LeaseDuration, c.RenewDeadline)
	case c.RetryPeriod <= 0 || c.RenewDeadline <= time.Duration(leaderelection.JitterFactor*float64(c.RetryPeriod)):
		return fmt.Errorf("renew deadline %s must be longer than %.1f × the retry period %s", c.RenewDeadline, leaderelection.JitterFactor, c.RetryPeriod)
	}
	if c.Identity == "" {
		host, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("leader election identity: %w", err)
		}
		c.Identity = host + "_" + string(uuid.NewUUID())
	}
	return nil
}

// Elector campaigns for one Lease. Create it with New, then call Run once.
type Elector struct {
	cfg      Config
	le       *leaderelection.LeaderElector
	lock     *resourcelock.LeaseLock
	watchdog *leaderelection.HealthzAdaptor
	leading  atomic.Bool

	// set by Run, read by the elector's callbacks
	lead         func(work, abort context.Context)
	ctx          context.Context
	log          klog.Logger // Run's context's, named "leader"
	stopElecting context.CancelFunc
	leadDone     chan struct{}
	mu           sync.Mutex
	state        state
	// lost: renewals failed while leading; the Lease must not be released.
	lost bool
}

// ReleaseTimeout bounds the one attempt to release the Lease on shutdown;
// if it fails, a standby takes over when the Lease expires.
const ReleaseTimeout = 5 * time.Second

type state int

const (
	candidate state = iota // not leading (yet)
	working                // lead is running
	finished               // Run is over or stopping: lead must not start
)

// New prepares an election; restCfg is copied (see the package doc).
func New(restCfg *rest.Config, c Config) (*Elector, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(restCfg)
	cfg.Timeout = max(c.RenewDeadline/2, time.Second)
	if cfg.UserAgent == "" {
		cfg.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	cfg.UserAgent += " leader-election"
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	e := &Elector{cfg: c, watchdog: leaderelection.NewLeaderHealthzAdaptor(20 * time.Second)}
	e.lock = &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: c.Namespace, Name: c.Name},
		Client:     kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: c.Identity, EventRecorder: c.EventRecorder},
	}
	e.le, err = leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            e.lock,
		Name:            c.Namespace + "/" + c.Name,
		LeaseDuration:   c.LeaseDuration,
		RenewDeadline:   c.RenewDeadline,
		RetryPeriod:     c.RetryPeriod,
		ReleaseOnCancel: false, // release by hand, only after the work stopped (see the package doc)
		WatchDog:        e.watchdog,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: e.startedLeading,
			OnStoppedLeading: func() {},
			OnNewLeader:      e.newLeader,
		},
	})
	if err != nil {
		return nil, err
	}
	e.watchdog.SetLeaderElection(e.le)
	return e, nil
}

// Identity is this candidate's identity, as written into the Lease.
func (e *Elector) Identity() string { return e.cfg.Identity }

// IsLeader reports whether the work function is running (we lead).
func (e *Elector) IsLeader() bool { return e.leading.Load() }

// Leader is the holder of the Lease as last observed ("" if none yet).
func (e *Elector) Leader() string { return e.le.GetLeader() }

// Check is a liveness check: it fails when this process believes it leads but
// has not renewed the Lease for LeaseDuration plus 20 s (a stuck leader, which
// the kubelet should restart).
func (e *Elector) Check() error { return e.watchdog.Check(nil) }

// Run campaigns until ctx ends. While this process holds the Lease it runs
// lead with two contexts: work ends when lead must stop taking new work (ctx
// ended, or the Lease was lost); abort ends only when the Lease was lost, and
// then work in flight must stop at once (another replica may start it soon).
// lead must return once work is done and its work has stopped.
//
// Run returns nil after ctx ended (having released the Lease if it held it,
// once lead returned), or ErrLost after the Lease was lost and lead returned.
//
// It logs through klog.FromContext(ctx).
func (e *Elector) Run(ctx context.Context, lead func(work, abort context.Context)) error {
	log := klog.LoggerWithName(klog.FromContext(ctx), "leader")
	// The election runs on its own context: ending ctx must not stop the
	// renewals while in-flight work drains.
	electCtx, stopElecting := context.WithCancel(klog.NewContext(context.WithoutCancel(ctx), log))
	defer stopElecting()
	e.mu.Lock()
	e.lead, e.ctx, e.log, e.stopElecting, e.leadDone = lead, ctx, log, stopElecting, make(chan struct{})
	e.mu.Unlock()

	stop := context.AfterFunc(ctx, func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.state != working { // a candidate stops campaigning at once
			e.state = finished
			stopElecting()
		} // a leader's lead sees ctx end, drains, then stops the election
	})
	defer stop()

	log.Info("Campaigning for the leader lease", "lease", e.cfg.Namespace+"/"+e.cfg.Name, "identity", e.cfg.Identity,
		"leaseDuration", e.cfg.LeaseDuration, "renewDeadline", e.cfg.RenewDeadline, "retryPeriod", e.cfg.RetryPeriod)
	e.le.Run(electCtx) // returns when the renewals stop, or when electCtx ends before we lead

	e.mu.Lock()
	wasLeading := e.state == working
	e.state = finished
	e.mu.Unlock()
	if wasLeading {
		<-e.leadDone
	}
	e.mu.Lock()
	lost := e.lost
	e.mu.Unlock()
	switch {
	case lost:
		log.Error(ErrLost, "Lost the leader lease", "lease", e.cfg.Namespace+"/"+e.cfg.Name, "identity", e.cfg.Identity)
		return ErrLost
	case wasLeading:
		// The work has stopped and the renewals with it (client-go's Run has
		// returned, so no renewal is in flight): free the Lease.
		e.release()
	}
	return nil
}

// release gives the Lease up, as client-go's release does (holder cleared,
// duration 1 s), if it still names us: one try, bounded by ReleaseTimeout.
func (e *Elector) release() {
	log := e.log
	ctx, cancel := context.WithTimeout(context.Background(), ReleaseTimeout)
	defer cancel()
	rec, _, err := e.lock.Get(ctx)
	if err != nil {
		log.Error(err, "Could not release the leader lease; a standby takes over when it expires", "lease", e.cfg.Namespace+"/"+e.cfg.Name)
		return
	}
	if rec.HolderIdentity != e.cfg.Identity {
		return
	}
	now := metav1.NewTime(time.Now())
	err = e.lock.Update(ctx, resourcelock.LeaderElectionRecord{
		LeaderTransitions: rec.LeaderTransitions, LeaseDurationSeconds: 1, RenewTime: now, AcquireTime: now,
	})
	if err != nil {
		log.Error(err, "Could not release the leader lease; a standby takes over when it expires", "lease", e.cfg.Namespace+"/"+e.cfg.Name)
		return
	}
	log.Info("Released the leader lease", "lease", e.cfg.Namespace+"/"+e.cfg.Name, "identity", e.cfg.Identity)
}

// startedLeading is client-go's OnStartedLeading; lctx ends when the
// renewals stop. While lead runs, only a failed renewal stops them (the
// election's own context is cancelled after lead returns), so lctx ending
// means the Lease is lost.
func (e *Elector) startedLeading(lctx context.Context) {
	e.mu.Lock()
	if e.state != candidate { // shutting down already: do not start work
		e.mu.Unlock()
		return
	}
	e.state = working
	lead, ctx, stopElecting, done := e.lead, e.ctx, e.stopElecting, e.leadDone
	e.mu.Unlock()
	defer close(done)

	abort, abortNow := context.WithCancel(context.WithoutCancel(lctx))
	defer abortNow()
	work, stopWork := context.WithCancel(abort)
	defer stopWork()
	lostLease := context.AfterFunc(lctx, func() {
		e.log.Info("Renewing the leader lease failed: aborting the work in flight; the Lease is left to expire", "identity", e.cfg.Identity)
		abortNow()
	})
	shutdown := context.AfterFunc(ctx, stopWork) // shutdown ends the work, not what is in flight
	defer shutdown()

	e.log.Info("Became the leader: starting the workers", "identity", e.cfg.Identity)
	e.leading.Store(true)
	if e.cfg.Observer != nil {
		e.cfg.Observer.Observe(Leading{Identity: e.cfg.Identity, Leading: true})
	}
	lead(work, abort)
	// Disarm the loss hook before stopping the election (which ends lctx
	// too); if it had already fired, renewals failed: the Lease is lost.
	lost := !lostLease()
	e.mu.Lock()
	e.lost = lost
	e.mu.Unlock()
	e.leading.Store(false)
	if e.cfg.Observer != nil {
		e.cfg.Observer.Observe(Leading{Identity: e.cfg.Identity, Leading: false})
	}
	e.log.Info("Stopped leading: the workers have stopped", "identity", e.cfg.Identity)
	stopElecting() // stop renewing; Run releases the Lease unless it was lost
}

func (e *Elector) newLeader(identity string) {
	if identity == "" {
		return
	}
	if identity != e.cfg.Identity {
		e.log.Info("Another replica leads; standing by with a warm cache", "leader", identity)
	}
	if e.cfg.Observer != nil {
		e.cfg.Observer.Observe(NewLeader{Identity: identity})
	}
}
