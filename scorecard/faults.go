package scorecard

import (
	"context"
	"math"
	"net/http"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"rawwatch/faultproxy"
	"rawwatch/internal/controlplane"
	"rawwatch/watcher"
)

// stage is what a fault acts on: the control plane, the apiserver the
// client reaches through the proxy, and the proxy.
type stage struct {
	cp    *controlplane.ControlPlane
	api   *controlplane.APIServer
	proxy *faultproxy.Proxy
	// snapshot is etcd's, taken by prepare (etcd-restore).
	snapshot string
	// client is the client's process (slow-consumer makes its handler slow).
	client *process
	// kube reaches the apiserver straight; ns is the client's namespace.
	kube kubernetes.Interface
	ns   string
}

// Fault is one named fault: what it does, and what in a real cluster
// produces it.
type Fault struct {
	Name, What, Story string
	// Upstream: issues and pull requests where an anchor's behaviour under
	// the fault is known.
	Upstream []string
	// Recorded: the exchanges of testdata/wire the proxy's answers are
	// held to (faultproxy.Replays, compared by faultproxy's tests),
	// recorded from kube-apiserver in the situation the fault stands for.
	Recorded []string
	// RawRequests: why the raw clients send more requests here than
	// client-go's, where their design makes them (the page prints it in
	// the fault's section).
	RawRequests string
	// Contrast: exchanges of testdata/wire recorded from kube-apiserver
	// that the proxy does not replay: what it answers instead of the
	// fault, or the real server making the fault itself.
	Contrast []string
	// prepare runs before the client starts (optional); start begins the
	// fault (it may block: the writes go on meanwhile); stop ends it
	// (default: the proxy heals).
	prepare, start, stop func(context.Context, *stage) error
	// Initial: the fault begins before the client starts, which then makes
	// its initial sync into it (every other fault meets a client synced
	// and watching).
	Initial bool
	// Duration, if set, is how long the fault lasts whatever the run's
	// (freeze must outlast a watchdog).
	Duration time.Duration
	// Shared: the fault acts on the apiserver or etcd that every client
	// reaches (a restart, a restore), so its clients meet it one after the
	// other; every other fault acts on one client's proxy or handler, and
	// its clients meet it side by side.
	Shared bool
}

// SlowHandler is how long each handler call blocks during slow-consumer:
// two events a second's worth of work while three arrive.
const SlowHandler = 500 * time.Millisecond

func proxyFault(on func(*faultproxy.Proxy)) func(context.Context, *stage) error {
	return func(_ context.Context, s *stage) error { on(s.proxy); return nil }
}

// failing answers every request with f and cuts the open streams, or they
// would carry on as if nothing happened.
func failing(f faultproxy.Failure) func(context.Context, *stage) error {
	return proxyFault(func(p *faultproxy.Proxy) { p.Fail(f); p.CutWatches() })
}

// compactBehindTheClient cuts the client's streams and makes the proxy
// answer as kube-apiserver whose watch cache's window begins after every
// resourceVersion the client saw: its resume is too old; a WATCH from a
// relist's resourceVersion is served. The point is a write made after the
// cut (a ConfigMap beside the client's objects, which it does not watch),
// so that the server has reached it; until it is made, every resume is too
// old, as it is.
func compactBehindTheClient(ctx context.Context, s *stage) error {
	s.proxy.CompactedAt(math.MaxInt64)
	s.proxy.CutWatches()
	cm, err := s.kube.CoreV1().ConfigMaps(s.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "compaction-point"}}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	point, err := strconv.ParseInt(cm.ResourceVersion, 10, 64)
	if err != nil {
		return err
	}
	s.proxy.CompactedAt(point)
	return nil
}

// FreezeFor is how long freeze lasts: past the raw watcher's silence limit
// by the moment its probe and new WATCH take (well under a second) and a
// busy machine's margin, so that its watchdog, not the fault's end, brings
// it back; and short enough that client-go's own watch timeout (5 min at
// the least) ends no frozen stream before the recovery window does, so that
// a client without a watchdog is still stuck when the window ends.
const FreezeFor = watcher.DefaultSilenceLimit + 10*time.Second

// watchListFallback is what raw-watchlist sends when WatchLists fail.
const watchListFallback = "raw-watchlist asks with a WatchList, as informer does; one that ends, or is cut, before its " +
	"initial-events-end bookmark makes it list (a LIST and a WATCH) until a stream runs healthy: a request more than " +
	"informer-list, which never asks for a WatchList."

// Faults are the named faults, in the table's order.
var Faults = []Fault{
	{Name: "flap-cut", What: "every WATCH cut after its first frame; the streams open at the start end with 410, so the client relists into it",
		Story: "A load balancer or NAT in front of the apiserver that drops long-lived connections, or an apiserver crash-looping behind it: " +
			"every watch opens, delivers a frame (often just a bookmark) and breaks. A client that takes \"it delivered something\" for \"it was healthy\" " +
			"resets its backoff and re-watches at once, forever. No apiserver answers so: the cut is the middlebox's.",
		start: proxyFault(func(p *faultproxy.Proxy) { p.FlapCut(true); p.ExpireWatches() })},
	{Name: "flap-error", What: "every WATCH ended by a 500 ERROR event after its first event; the streams open at the start end with 410, so the client relists into it",
		Story: "etcd failing under the apiserver, or a watch the apiserver cannot continue (an event with no previous value after a compaction race): " +
			"the stream carries one event, then an ERROR with a 500, then ends. The ERROR event is kube-apiserver's shape for an error after a " +
			"watch began (cacher.go: a watch that cannot go on is answered by an ERROR event, not a status); its cause is not reproduced here.",
		RawRequests: "raw relists at once after the 410 that ends a healthy stream (client-go backs off first), and after an ERROR that " +
			"followed progress re-watches from its resourceVersion (a WATCH; client-go relists: a LIST and a WATCH), relisting at the " +
			"second in a row. Its backoff steps are client-go's; where the fault's end falls among them decides a retry more or less.",
		start: proxyFault(func(p *faultproxy.Proxy) { p.FlapError(true); p.ExpireWatches() })},
	{Name: "freeze", Duration: FreezeFor,
		What: "the WATCH streams open at the start silent for good (not even their end passes); new ones pass",
		Story: "A stuck proxy or service-mesh sidecar that lost the streams it carried: the connection stays up (HTTP/2 pings answered), the " +
			"streams stay open and silent. The client sees no error; only a watchdog of its own, or its own watch timeout (client-go's: 5 to 10 " +
			"minutes), ends them. The fault lasts longer than the raw watcher's silence limit. A dead TCP connection is another fault: " +
			"client-go's transport finds it within a minute by its HTTP/2 pings.",
		start: proxyFault(func(p *faultproxy.Proxy) { p.StallWatches() })},
	{Name: "watchlist-end", What: "every WatchList ends cleanly after its first initial event, no initial-events-end bookmark; open streams get 410 (a relist is due)",
		Story: "The aggregated API server of kubernetes/kubernetes#140890: it accepted a WatchList, sent some initial events and closed the stream " +
			"without the bookmark that ends them. A WatchList client waits for it, and when the stream ends, asks again. kube-apiserver never " +
			"answers so: with its watch cache off, etcd serves the WatchList, bookmark and all; without the WatchList feature it refuses it (422), " +
			"and the client lists.",
		Upstream:    []string{"https://github.com/kubernetes/kubernetes/issues/140890", "https://github.com/kubernetes/kubernetes/pull/140902"},
		Contrast:    []string{"fault-watchlist-uncached.json", "fault-watchlist-gate-off.json"},
		RawRequests: watchListFallback,
		start:       proxyFault(func(p *faultproxy.Proxy) { p.WatchListEnd(true); p.ExpireWatches() })},
	{Name: "watchlist-ignored", What: "every WatchList answered as a plain WATCH from \"\": every object ADDED, no bookmark ending them, the stream open; open streams get 410 (a relist is due)",
		Story: "A server that ignores sendInitialEvents (an aggregated server that does not implement it, as in cozystack/cozystack#2786) answers " +
			"a WatchList as a plain watch: every object as ADDED, then the changes, and never the bookmark that ends the initial events. The " +
			"proxy passes the WatchList on without sendInitialEvents and resourceVersionMatch, so the bytes are kube-apiserver's own answer to " +
			"that WATCH. A WatchList client waits for the bookmark; when the fault ends the proxy cuts those streams (the server is replaced).",
		Upstream:    []string{"https://github.com/cozystack/cozystack/pull/2786", "https://github.com/kubernetes/kubernetes/issues/140890"},
		Recorded:    []string{"fault-legacy-watch-gate-off.json"},
		Contrast:    []string{"fault-legacy-watch-cached.json"},
		RawRequests: watchListFallback,
		start:       proxyFault(func(p *faultproxy.Proxy) { p.IgnoreSendInitialEvents(true); p.ExpireWatches() })},
	{Name: "watch-410", What: "the open streams cut; every WATCH from a resourceVersion before the cut answered as after a compaction: 200, an ERROR event 410, the end; a WATCH from a relist's resourceVersion served",
		Story: "Compaction racing the client: a connection drop makes the client resume, and its resourceVersion is older than the server " +
			"holds (etcd compacts every 5 minutes; a watch cache keeps a short window under heavy writes, and a restarted one begins at its " +
			"start): kube-apiserver establishes the watch, sends one ERROR event with 410 and ends it (cacher.go: once the request is accepted, " +
			"errors are ERROR events), until the client relists. A compaction alone does not end an open watch (recorded).",
		RawRequests: "raw resumes a cut stream from its resourceVersion with a WATCH before it relists, as after any cut (client-go relists " +
			"after a watch that ends in an error). Here that WATCH meets the 410 and a LIST and a WATCH follow: a request more than " +
			"informer-list (a LIST and a WATCH), two more than a WatchList client (one WatchList; raw-watchlist sends the WATCH, then a WatchList). " +
			"Where the server still holds the resourceVersion (flap-cut, garble) the resume is one WATCH in place of client-go's LIST and WATCH.",
		Recorded: []string{"fault-watch-compacted-cached.json", "fault-compaction-under-watch-cached.json"},
		Contrast: []string{"fault-watch-compacted-uncached.json"},
		start:    compactBehindTheClient},
	{Name: "too-large-rv", What: "the open streams cut; every WATCH from a resourceVersion established and silent until the fault ends, every LIST and WatchList from one answered 504 \"Too large resource version\" after 3 s",
		Story: "An HA control plane whose apiservers' watch caches are not in step: after a failover the client's resourceVersion came from a " +
			"fresher apiserver than the one it now talks to. kube-apiserver establishes a WATCH from a resourceVersion it has not reached and " +
			"sends nothing until its cache gets there (cacher.go); a LIST or a WatchList waits 3 s for it, then answers 504 with the " +
			"ResourceVersionTooLarge cause. When the fault ends the cache has caught up and the held WATCHes go on from where they asked.",
		Upstream: []string{"https://github.com/kubernetes/kubernetes/issues/107133", "https://github.com/kubernetes/kubernetes/pull/92537"},
		Recorded: []string{"fault-watch-future-cached.json", "fault-list-future-cached.json", "fault-watchlist-future-cached.json"},
		start:    proxyFault(func(p *faultproxy.Proxy) { p.TooLargeRV(true); p.CutWatches() })},
	{Name: "429", What: "the open streams cut; every request answered as API Priority and Fairness sheds a priority level: 429, Retry-After 1",
		Story: "API Priority and Fairness rejecting the client's flow because the apiserver is overloaded (often by other clients' relists): " +
			"429, a plain-text message, Retry-After. A WATCH's initialization is a request like any other; an established watch is left " +
			"alone, so the proxy cuts them to make the clients come back into it. A client that retries sooner than asked adds to the " +
			"overload it is told about.",
		Recorded: []string{"fault-throttled-list.json", "fault-throttled-watch.json"},
		start:    proxyFault(func(p *faultproxy.Proxy) { p.Throttle(true); p.CutWatches() })},
	{Name: "500", What: "every request answered 500 (the open streams cut)",
		Story: "etcd unavailable or out of quorum, a crashing admission or conversion webhook, an apiserver bug: every request fails with 500 " +
			"until it is fixed. Not recorded: what kube-apiserver answers depends on the cause (with its watch cache on it still serves " +
			"WATCHes and LISTs from \"0\" while etcd is away).",
		start: failing(faultproxy.Failure{Code: http.StatusInternalServerError})},
	{Name: "refuse", What: "connections refused",
		Story: "The apiserver is down: restarting, upgrading, OOM-killed, its node gone, its load balancer with no healthy backend. Every " +
			"connection is refused at once, so a client without backoff spins as fast as the kernel answers.",
		RawRequests: "after a WATCH that could not open, raw retries with a LIST of one item (a probe: is the server behind its " +
			"resourceVersion, restored from a backup?) and, once one answers, resumes with a WATCH from its resourceVersion: two requests " +
			"where a WatchList client's last is one WatchList, which sends every object again.",
		start: proxyFault(func(p *faultproxy.Proxy) { p.Refuse() })},
	{Name: "garble", What: "every event frame cut in half (not JSON)",
		Story: "A middlebox that mangles long-lived HTTP streams, a broken compression layer, a truncated write: frames that do not parse. " +
			"No apiserver sends them. A client that skips them loses those events; one that re-watches from where it was gets them replayed.",
		start: proxyFault(func(p *faultproxy.Proxy) { p.Garble(true) })},
	{Name: "apiserver-restart", Shared: true, What: "the apiserver killed and started again (the writes fail while it is down)",
		Story: "A rolling upgrade or a crash of the apiserver, the real one: every connection drops, the starting process refuses connections, " +
			"then answers 503 while it installs its APIs and 429 while a watch cache fills (recorded), and the new watch cache starts at the " +
			"current revision, so a client resuming from an older resourceVersion than the cache holds gets 410 and must relist; every client " +
			"of every controller does so at once.",
		RawRequests: "told the apiserver is starting, raw relists from etcd (resourceVersion \"\"), which answers while the new watch " +
			"cache fills; the WATCH after it may meet the cache's 429 and is asked again after its backoff (the Retry-After at least). " +
			"That LIST is a request a WatchList client does not send: its one request does the work of both, and meets the 429 itself; " +
			"informer-list's LISTs, served from the cache, meet it too.",
		Contrast: []string{"fault-restart-open-watch.json", "fault-restart-resume.json"},
		start:    func(ctx context.Context, s *stage) error { return s.api.Restart(ctx) }},
	{Name: "initial-flap-cut", Initial: true, What: "every WATCH cut after its first frame from before the client starts: its initial sync meets the fault",
		Story: "A controller that starts, or restarts, while the load balancer in front of the apiserver drops long-lived connections (a rollout during an incident, a crash-looping apiserver). " +
			"A LIST-based client syncs (a LIST is no watch) and then flaps like any watching one; a WatchList client cannot sync at all, its initial events cut after the first, and asks again.",
		Upstream: []string{"https://github.com/kubernetes/kubernetes/issues/140890"},
		start:    proxyFault(func(p *faultproxy.Proxy) { p.FlapCut(true) })},
	{Name: "slow-consumer", What: "every call of the client's event handler blocks for 500 ms (the proxy passes everything)",
		Story: "A handler that does its work inline instead of queueing a key: a synchronous call to a slow webhook, a lock held by a long reconcile, a log write to a blocked pipe. " +
			"Events arrive faster than it returns. Where the backlog waits is the client's design: client-go's informer keeps its store current and buffers every notification for the handler, without bound " +
			"(processorListener's pendingNotifications); this project's watcher calls the handler on the loop that reads the stream, " +
			"so the backlog waits in the stream (TCP, the apiserver's buffer for the watch, which it closes when full, and the client resumes from its resourceVersion).",
		Upstream: []string{"https://github.com/kubernetes/client-go/issues/1326"},
		start:    func(_ context.Context, s *stage) error { return s.client.slow(SlowHandler) },
		stop:     func(_ context.Context, s *stage) error { return s.client.slow(0) }},
	{Name: "etcd-restore", Shared: true, What: "etcd restored from a snapshot taken before the client started (time travel)",
		Story: "An operator restores etcd from a backup without --bump-revision: the resourceVersion goes back, objects created since the snapshot vanish, deleted ones come back, " +
			"and a client holding a newer resourceVersion is in the server's future. Until writes pass it, an informer that resumes there waits; once they do, " +
			"it is told of the writes above its resourceVersion only, and the objects the restore changed below it stay wrong in its cache. " +
			"Here the restore restarts the apiserver too (as the etcd documentation asks), so every client's watch ends; the handler must hear every " +
			"object that vanished deleted and every one that came back added.",
		Upstream: []string{"https://github.com/kubernetes/kubernetes/issues/107457", "https://github.com/kubernetes/kubernetes/issues/118501"},
		prepare: func(ctx context.Context, s *stage) error {
			var err error
			s.snapshot, err = s.cp.Snapshot(ctx)
			return err
		},
		stop: func(ctx context.Context, s *stage) error {
			if err := s.cp.Restore(ctx, s.snapshot); err != nil {
				return err
			}
			return s.proxy.Heal()
		}},
}

// FaultNames lists Faults' names, in order.
func FaultNames() []string {
	var out []string
	for _, f := range Faults {
		out = append(out, f.Name)
	}
	return out
}

func faultNamed(name string) (Fault, bool) {
	for _, f := range Faults {
		if f.Name == name {
			return f, true
		}
	}
	return Fault{}, false
}
