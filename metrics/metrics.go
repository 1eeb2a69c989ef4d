// Package metrics exports what the controller does as Prometheus metrics,
// served on /metrics.
//
// Metrics is an observe.Observer of every part: the watcher's events (lists,
// watches, events, bookmarks, relists, backoffs), the queue's (adds, how long
// keys waited), the workers' (reconciles) and leader election's.
// app plugs it in; nothing here does I/O.
//
// The queue metrics carry the names and meaning of client-go's workqueue
// metrics (workqueue_depth, workqueue_adds_total, workqueue_queue_duration_seconds,
// workqueue_work_duration_seconds, workqueue_retries_total, ...), with
// name="myresources", so that dashboards made for informer-based controllers
// work here unchanged and the two can be compared side by side. Everything
// specific to this controller is prefixed rawwatch_.
//
// Each Metrics has its own registry (not Prometheus' global one), so several
// controllers can run in one process, as they do in tests.
package metrics

import (
	"errors"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"rawwatch/freshness"
	"rawwatch/leader"
	"rawwatch/observe"
	"rawwatch/queue"
	"rawwatch/reconcile"
	"rawwatch/ring"
	"rawwatch/sharding"
	"rawwatch/watcher"
)

// QueueName is the value of the name label on the workqueue_* metrics.
const QueueName = "myresources"

// Options say where the gauges that are read at scrape time come from.
// Nil functions leave their gauge out.
type Options struct {
	// Version goes into rawwatch_build_info.
	Version string
	// QueueDepth is the number of keys ready to be handed out (Queue.Len).
	QueueDepth func() int
	// QueueDelayed is the number of keys waiting out a retry delay (Queue.Pending).
	QueueDelayed func() int
	// StoreObjects is the number of objects in the store (Store.Len).
	StoreObjects func() int
}

// Metrics holds the controller's collectors. Create it with New.
type Metrics struct {
	reg *prometheus.Registry

	adds, dedupedAdds, retries   prometheus.Counter
	queueLatency, workDuration   prometheus.Histogram
	reconciles                   *prometheus.CounterVec
	reconcileErrors              prometheus.Counter
	reconcileDuration            *prometheus.HistogramVec
	listPages, lists, relists    prometheus.Counter
	relistDeltas                 *prometheus.CounterVec
	watches, restarts, bookmarks prometheus.Counter
	events, backoffs             *prometheus.CounterVec
	skipped, silentWatches       prometheus.Counter
	outOfShard                   prometheus.Counter
	probes, pauses               prometheus.Counter
	resourceVersion, leader      prometheus.Gauge
	state                        *prometheus.GaugeVec
	deliveryLag                  prometheus.Histogram
	probeStages                  *prometheus.HistogramVec
	probeWrites                  *prometheus.CounterVec
	heard                        atomic.Int64 // when the server last said something (UnixNano)
	ringMembers, shardShare      prometheus.Gauge
	shardSlots, shardWorking     *prometheus.GaugeVec
	handoffs, sweeps             *prometheus.CounterVec
	sweptDeletions               prometheus.Counter
	fenced, reshards, dropped    prometheus.Counter

	mu      sync.Mutex
	working map[int]time.Time // worker → when it took its current key
	listed  bool              // a list completed (the next one is a relist)
	now     func() time.Time
}

// New creates the collectors and registers them, with Go runtime and process
// metrics, in a new registry.
func New(opts Options) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), working: map[int]time.Time{}, now: time.Now}
	queue := prometheus.Labels{"name": QueueName}
	counter := func(name, help string, labels prometheus.Labels) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels})
		m.reg.MustRegister(c)
		return c
	}
	counterVec := func(name, help string, label string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{label})
		m.reg.MustRegister(c)
		return c
	}
	gaugeFunc := func(name, help string, labels prometheus.Labels, f func() float64) {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels}, f))
	}
	intFunc := func(name, help string, labels prometheus.Labels, f func() int) {
		if f != nil {
			gaugeFunc(name, help, labels, func() float64 { return float64(f()) })
		}
	}
	// client-go's workqueue buckets: 10 ns to 100 s, by factors of ten.
	queueBuckets := prometheus.ExponentialBuckets(10e-9, 10, 11)

	// The queue.
	intFunc("workqueue_depth", "Keys ready to be handed to a worker.", queue, opts.QueueDepth)
	m.adds = counter("workqueue_adds_total", "Adds that made a key dirty (deduped adds are not counted).", queue)
	m.dedupedAdds = counter("rawwatch_queue_deduped_adds_total", "Adds absorbed because the key was already waiting.", queue)
	m.retries = counter("workqueue_retries_total", "Keys re-added after a failed reconcile (rate-limited).", queue)
	m.queueLatency = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "workqueue_queue_duration_seconds",
		Help: "How long a key waited in the queue before a worker took it.", ConstLabels: queue, Buckets: queueBuckets})
	m.workDuration = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "workqueue_work_duration_seconds",
		Help: "How long a worker held a key (from Get to the end of its reconcile).", ConstLabels: queue, Buckets: queueBuckets})
	m.reg.MustRegister(m.queueLatency, m.workDuration)
	intFunc("rawwatch_queue_delayed", "Keys waiting out a retry delay before they are added again.", queue, opts.QueueDelayed)
	gaugeFunc("workqueue_unfinished_work_seconds", "Seconds the keys being processed now have been in progress, summed.", queue,
		func() float64 { sum, _ := m.inFlight(); return sum })
	gaugeFunc("workqueue_longest_running_processor_seconds", "Seconds the longest-running reconcile in progress has taken so far.", queue,
		func() float64 { _, longest := m.inFlight(); return longest })

	// The reconciler.
	m.reconciles = counterVec("rawwatch_reconcile_total", "Reconciles by result: success, error or conflict (a 409, retried quietly).", "result")
	m.reconcileErrors = counter("rawwatch_reconcile_errors_total", "Reconciles that returned an error (conflicts included).", nil)
	m.reconcileDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "rawwatch_reconcile_duration_seconds",
		Help: "How long one reconcile took, by result.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}, []string{"result"})
	m.reg.MustRegister(m.reconcileDuration)

	// The watcher.
	m.listPages = counter("rawwatch_list_pages_total", "LIST requests that returned a page.", nil)
	m.lists = counter("rawwatch_lists_total", "Completed lists, the first one included.", nil)
	m.relists = counter("rawwatch_relists_total", "Completed lists after the first: a watch could not resume (410 Gone).", nil)
	m.relistDeltas = counterVec("rawwatch_relist_deltas_total", "Changes relists found, by type (Deleted: gone while the watch was down).", "type")
	m.watches = counter("rawwatch_watch_requests_total", "WATCH requests made.", nil)
	m.restarts = counter("rawwatch_watch_restarts_total", "WATCH requests that resumed a stream that ended (no relist).", nil)
	m.events = counterVec("rawwatch_watch_events_total", "Watch events applied to the store, by type.", "type")
	m.bookmarks = counter("rawwatch_watch_bookmarks_total", "BOOKMARK events: the resourceVersion moved, no object changed.", nil)
	m.backoffs = counterVec("rawwatch_backoffs_total", "Waits before retrying a failed LIST or WATCH, by error class.", "class")
	m.skipped = counter("rawwatch_skipped_objects_total", "List items and watch events that could not be decoded.", nil)
	m.outOfShard = counter("rawwatch_shard_client_filtered_objects_total", "Objects the server sent outside this replica's shard (it dropped the shard selector), left out on the client: received and decoded for nothing.", nil)
	m.pauses = counter("rawwatch_worker_pauses_total", "Reconciles that failed because the server was away (unreachable, 5xx, 429, timeout): every worker paused instead of charging the key a retry.", nil)
	m.probes = counter("rawwatch_watch_probes_total", "One-item LISTs asking the server for its resourceVersion, after a silent stream or before re-watching after a WATCH that could not open.", nil)
	m.silentWatches = counter("rawwatch_watch_silent_total", "WATCH streams the watchdog abandoned: open, but no event or bookmark for longer than the silence limit (counted with the silent streams before it, back to back).", nil)
	m.resourceVersion = prometheus.NewGauge(prometheus.GaugeOpts{Name: "rawwatch_resource_version",
		Help: "The resourceVersion the store is synced to, as a number (etcd's revision)."})
	m.state = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rawwatch_watcher_state",
		Help: "1 for the state the list-then-watch loop is in, 0 for the others."}, []string{"state"})
	m.reg.MustRegister(m.resourceVersion, m.state)
	for s := watcher.Listing; s <= watcher.Stopped; s++ {
		m.state.WithLabelValues(s.String()).Set(0)
	}
	m.state.WithLabelValues(watcher.Listing.String()).Set(1)
	intFunc("rawwatch_store_objects", "Objects in the store.", nil, opts.StoreObjects)

	// Freshness (package freshness says what each measures).
	m.heard.Store(m.now().UnixNano())
	gaugeFunc("rawwatch_watch_silence_seconds", "Seconds since the server last said anything about the resource: a list page, a watch event or a bookmark.", nil,
		func() float64 { return m.now().Sub(time.Unix(0, m.heard.Load())).Seconds() })
	m.deliveryLag = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "rawwatch_watch_event_delivery_lag_seconds",
		Help:    "For ADDED and MODIFIED events: arrival minus the write time the server records in the object (its latest managedFields time; whole seconds, so up to 1 s long; includes clock skew).",
		Buckets: []float64{0.5, 1, 1.5, 2, 3, 5, 10, 30, 60, 300}})
	m.probeStages = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "rawwatch_freshness_probe_seconds",
		Help:    "Time from a heartbeat write (--freshness-probe) to each stage: event (frame decoded), store (applied), reconcile (reconciled).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12)}, []string{"stage"})
	m.probeWrites = counterVec("rawwatch_freshness_probe_writes_total", "Heartbeats the freshness probe wrote, by result (ok, error).", "result")
	m.reg.MustRegister(m.deliveryLag, m.probeStages)

	// Sharding (package ring).
	m.ringMembers = prometheus.NewGauge(prometheus.GaugeOpts{Name: "rawwatch_ring_members",
		Help: "Replicas this one sees in the ring (itself included while its Lease renewals succeed)."})
	m.shardShare = prometheus.NewGauge(prometheus.GaugeOpts{Name: "rawwatch_shard_share",
		Help: "Share of the hash space whose objects this replica reconciles (its Working slots)."})
	m.shardSlots = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rawwatch_shard_slots",
		Help: "This replica's slots (of 256) by handoff state: working, pending (claimed, not confirmed), releasing (waiting for reconciles in flight and a sweep), target (its share by the membership), given (let go, its new owner named until it takes them), custody (given to it, not its share), lingering (watched until their claimants have seen its cover withdrawn)."}, []string{"state"})
	m.shardWorking = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rawwatch_shard_working_info",
		Help: "Always 1; the slots label lists the slots this replica reconciles (\"0-12,40\")."}, []string{"slots"})
	m.handoffs = counterVec("rawwatch_shard_handoffs_total", "Slots this replica started (taken) or stopped (given) reconciling.", "direction")
	m.fenced = counter("rawwatch_shard_fenced_total", "Times this replica dropped every claim because it could not renew its ring Lease in time.", nil)
	m.reshards = counter("rawwatch_shard_changes_total", "Times the watcher moved to another shard (each followed by a list of it).", nil)
	m.dropped = counter("rawwatch_shard_dropped_objects_total", "Objects dropped from the store because their slot moved to another replica (not deletions).", nil)
	m.sweeps = counterVec("rawwatch_shard_sweeps_total", "LISTs of slots being handed over, made to find the deletions the watch has not brought yet, by result (ok, error).", "result")
	m.sweptDeletions = counter("rawwatch_shard_swept_deletions_total", "Deletions found by those sweeps (handled before the slot is let go).", nil)
	m.reg.MustRegister(m.ringMembers, m.shardShare, m.shardSlots, m.shardWorking)

	// The process.
	m.leader = prometheus.NewGauge(prometheus.GaugeOpts{Name: "rawwatch_leader",
		Help: "1 while this process holds the leader lease and runs the workers (always 1 without leader election)."})
	build := prometheus.NewGauge(prometheus.GaugeOpts{Name: "rawwatch_build_info", Help: "Always 1; the labels say what is running.",
		ConstLabels: prometheus.Labels{"version": opts.Version, "go_version": runtime.Version()}})
	build.Set(1)
	m.reg.MustRegister(m.leader, build, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry is where the collectors are registered (add your own there).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in Prometheus' exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Observe moves the metrics an event concerns (events of packages watcher,
// queue, reconcile and leader; others are ignored).
func (m *Metrics) Observe(e observe.Event) {
	switch e := e.(type) {
	case queue.Added:
		if e.Deduped {
			m.dedupedAdds.Inc()
		} else {
			m.adds.Inc()
		}
	case queue.Got:
		m.queueLatency.Observe(e.Waited.Seconds())
	case leader.Leading:
		m.leader.Set(map[bool]float64{true: 1}[e.Leading])
	case reconcile.Started:
		m.mu.Lock()
		m.working[e.Worker] = m.now()
		m.mu.Unlock()
	case reconcile.Finished:
		m.finished(e)
	case reconcile.Paused:
		m.pauses.Inc()
	case watcher.StateChanged:
		m.state.WithLabelValues(e.From.String()).Set(0)
		m.state.WithLabelValues(e.To.String()).Set(1)
		// A WATCH that follows a WATCH (at once, or after backing off)
		// resumes a stream; one that follows a list is the first of its kind.
		if e.To == watcher.Watching && (e.From == watcher.Watching || e.From == watcher.BackingOff) {
			m.restarts.Inc()
		}
	case watcher.ListPage:
		m.listPages.Inc()
		m.heard.Store(m.now().UnixNano())
	case watcher.Replaced:
		m.replaced(e)
	case watcher.WatchStarted:
		m.watches.Inc()
	case watcher.Received:
		m.events.WithLabelValues(e.Type).Inc()
		m.setRV(e.RV)
		if !e.Arrived.IsZero() {
			m.heard.Store(e.Arrived.UnixNano())
		}
		if !e.Written.IsZero() && !e.Arrived.IsZero() {
			m.deliveryLag.Observe(max(0, e.Arrived.Sub(e.Written).Seconds()))
		}
	case watcher.BookmarkReceived:
		m.bookmarks.Inc()
		m.setRV(e.RV)
		m.heard.Store(m.now().UnixNano())
	case freshness.Measured:
		m.probeStages.WithLabelValues(string(e.Stage)).Observe(e.Took.Seconds())
	case freshness.Beat:
		m.probeWrites.WithLabelValues(map[bool]string{true: "ok", false: "error"}[e.Err == nil]).Inc()
	case watcher.WatchEnded:
		if errors.Is(e.Err, watcher.ErrSilent) {
			m.silentWatches.Inc()
		}
	case watcher.Probed:
		m.probes.Inc()
	case watcher.BackoffStarted:
		m.backoffs.WithLabelValues(e.Class.String()).Inc()
	case watcher.Skipped:
		m.skipped.Inc()
	case sharding.OutOfShard:
		m.outOfShard.Inc()
	case sharding.Swept:
		if e.Err != nil {
			m.sweeps.WithLabelValues("error").Inc()
		} else {
			m.sweeps.WithLabelValues("ok").Inc()
			m.sweptDeletions.Add(float64(e.Deleted))
		}
	case sharding.Resharded:
		m.reshards.Inc()
		m.dropped.Add(float64(e.Dropped))
	case ring.MembersChanged:
		m.ringMembers.Set(float64(len(e.Members)))
	case ring.ClaimsChanged:
		m.claims(e)
	}
}

func (m *Metrics) claims(e ring.ClaimsChanged) {
	c := e.Claims
	for state, slots := range map[string]int{"working": c.Working.Len(), "pending": c.Pending.Len(),
		"releasing": c.Releasing.Len(), "target": c.Target.Len(), "given": c.Given.Len(), "custody": c.Custody.Len(),
		"lingering": c.Lingering.Len()} {
		m.shardSlots.WithLabelValues(state).Set(float64(slots))
	}
	m.shardShare.Set(c.Working.Set().Fraction())
	m.handoffs.WithLabelValues("taken").Add(float64(c.Working.Minus(e.Before.Working).Len()))
	m.handoffs.WithLabelValues("given").Add(float64(e.Before.Working.Minus(c.Working).Len()))
	if e.Fenced {
		m.fenced.Inc()
	}
	if c.Working != e.Before.Working {
		m.shardWorking.Reset()
		m.shardWorking.WithLabelValues(c.Working.String()).Set(1)
	}
}

func (m *Metrics) finished(e reconcile.Finished) {
	m.mu.Lock()
	started, ok := m.working[e.Worker]
	delete(m.working, e.Worker)
	now := m.now()
	m.mu.Unlock()
	if ok {
		m.workDuration.Observe(now.Sub(started).Seconds())
	}
	result := "success"
	switch {
	case apierrors.IsConflict(e.Err):
		result = "conflict"
	case e.Err != nil:
		result = "error"
	}
	if e.Err != nil {
		m.reconcileErrors.Inc()
	}
	m.reconciles.WithLabelValues(result).Inc()
	m.reconcileDuration.WithLabelValues(result).Observe(e.Took.Seconds())
	if e.RetryIn > 0 {
		m.retries.Inc()
	}
}

// inFlight sums and maximises the age of the reconciles in progress.
func (m *Metrics) inFlight() (sum, longest float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	for _, started := range m.working {
		age := now.Sub(started).Seconds()
		sum += age
		longest = max(longest, age)
	}
	return sum, longest
}

func (m *Metrics) replaced(e watcher.Replaced) {
	m.lists.Inc()
	m.mu.Lock()
	relist := m.listed
	m.listed = true
	m.mu.Unlock()
	if relist {
		m.relists.Inc()
		m.relistDeltas.WithLabelValues("Added").Add(float64(e.Added))
		m.relistDeltas.WithLabelValues("Updated").Add(float64(e.Updated))
		m.relistDeltas.WithLabelValues("Deleted").Add(float64(e.Deleted))
	}
	m.setRV(e.RV)
}

// setRV records a resourceVersion. They are opaque strings by the API's
// contract; etcd's are integers, and anything else is left out.
func (m *Metrics) setRV(rv string) {
	if n, err := strconv.ParseUint(rv, 10, 64); err == nil {
		m.resourceVersion.Set(float64(n))
	}
}
