package scorecard

import (
	"context"
	"net/http"
	"time"

	"rawwatch/faultproxy"
	"rawwatch/internal/controlplane"
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
}

// Fault is one named fault: what it does, and what in a real cluster
// produces it.
type Fault struct {
	Name, What, Story string
	// Upstream: issues and pull requests where an anchor's behaviour under
	// the fault is known.
	Upstream []string
	// prepare runs before the client starts (optional); start begins the
	// fault (it may block: the writes go on meanwhile); stop ends it
	// (default: the proxy heals).
	prepare, start, stop func(context.Context, *stage) error
	// Initial: the fault begins before the client starts, which then makes
	// its initial sync into it (every other fault meets a client synced
	// and watching).
	Initial bool
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

// Faults are the named faults, in the table's order.
var Faults = []Fault{
	{Name: "flap-cut", What: "every WATCH cut after its first frame; the streams open at the start end with 410, so the client relists into it",
		Story: "A load balancer or NAT in front of the apiserver that drops long-lived connections, or an apiserver crash-looping behind it: " +
			"every watch opens, delivers a frame (often just a bookmark) and breaks. A client that takes \"it delivered something\" for \"it was healthy\" resets its backoff and re-watches at once, forever.",
		start: proxyFault(func(p *faultproxy.Proxy) { p.FlapCut(true); p.ExpireWatches() })},
	{Name: "flap-error", What: "every WATCH ended by a 500 ERROR event after its first event; the streams open at the start end with 410, so the client relists into it",
		Story: "etcd failing under the apiserver, or a watch the apiserver cannot continue (an event with no previous value after a compaction race): " +
			"the stream carries one event, then an ERROR with a 500, then ends.",
		start: proxyFault(func(p *faultproxy.Proxy) { p.FlapError(true); p.ExpireWatches() })},
	{Name: "freeze", What: "WATCH streams open, nothing passed on (held frames go on at the end)",
		Story: "A half-dead TCP connection, a stuck proxy or service mesh sidecar, a node whose network went away without a reset: " +
			"the stream stays open and silent. The client sees no error; only a watchdog of its own, or the server's watch timeout (minutes), ends it.",
		start: proxyFault(func(p *faultproxy.Proxy) { p.Freeze(true) })},
	{Name: "watchlist-end", What: "every WatchList ends cleanly after its first initial event, no initial-events-end bookmark; open streams get 410 (a relist is due)",
		Story: "An aggregated API server (or a proxy in front of one) that does not implement sendInitialEvents: it answers a WatchList as a plain watch and never sends the " +
			"bookmark that marks the end of the initial events. A WatchList client waits for it, and when the stream ends, asks again.",
		Upstream: []string{"https://github.com/kubernetes/kubernetes/issues/140890", "https://github.com/kubernetes/kubernetes/pull/140902"},
		start:    proxyFault(func(p *faultproxy.Proxy) { p.WatchListEnd(true); p.ExpireWatches() })},
	{Name: "watch-410", What: "every WATCH from a resourceVersion answered 410 Gone (the open streams cut; a WatchList from \"\" passes)",
		Story: "Compaction racing the client: etcd compacts its history every 5 minutes, and a client that comes back with an old resourceVersion gets 410; " +
			"a watch cache that restarted, or an apiserver whose cache window is short under heavy writes, answers every resume this way until the client relists.",
		start: failing(faultproxy.Failure{Kinds: faultproxy.Watch, Code: http.StatusGone, FromRV: true})},
	{Name: "too-large-rv", What: "every LIST and WATCH from a resourceVersion answered 504 \"Too large resource version\" after 3 s",
		Story: "An HA control plane whose apiservers' watch caches are not in step: the client's resourceVersion came from a fresher apiserver than the one it now talks to, " +
			"or etcd was restored under it. That apiserver waits 3 s for its cache to catch up, then answers 504 with the ResourceVersionTooLarge cause; when nothing is written, it never catches up.",
		Upstream: []string{"https://github.com/kubernetes/kubernetes/issues/107133", "https://github.com/kubernetes/kubernetes/pull/92537"},
		start:    proxyFault(func(p *faultproxy.Proxy) { p.TooLargeRV(true); p.CutWatches() })},
	{Name: "429", What: "every request answered 429, Retry-After 5 s (the open streams cut)",
		Story: "API Priority and Fairness rejecting the client's flow because the apiserver is overloaded (often by other clients' relists): " +
			"429 with Retry-After. A client that retries sooner than asked adds to the overload it is told about.",
		start: failing(faultproxy.Failure{Code: http.StatusTooManyRequests, RetryAfter: 5 * time.Second})},
	{Name: "500", What: "every request answered 500 (the open streams cut)",
		Story: "etcd unavailable or out of quorum, a crashing admission or conversion webhook, an apiserver bug: every request fails with 500 until it is fixed.",
		start: failing(faultproxy.Failure{Code: http.StatusInternalServerError})},
	{Name: "refuse", What: "connections refused",
		Story: "The apiserver is down: restarting, upgrading, OOM-killed, its node gone, its load balancer with no healthy backend. Every connection is refused at once, so a client without backoff spins as fast as the kernel answers.",
		start: proxyFault(func(p *faultproxy.Proxy) { p.Refuse() })},
	{Name: "garble", What: "every event frame cut in half (not JSON)",
		Story: "A middlebox that mangles long-lived HTTP streams, a broken compression layer, a truncated write from a crashing apiserver: frames that do not parse. " +
			"A client that skips them loses those events; one that re-watches from where it was gets them replayed.",
		start: proxyFault(func(p *faultproxy.Proxy) { p.Garble(true) })},
	{Name: "apiserver-restart", What: "the apiserver killed and started again (the writes fail while it is down)",
		Story: "A rolling upgrade or a crash of the apiserver: every connection drops, and the new process's watch cache starts at the current revision, " +
			"so a client resuming from an older resourceVersion than the cache holds gets 410 and must relist; every client of every controller does so at once.",
		start: func(ctx context.Context, s *stage) error { return s.api.Restart(ctx) }},
	{Name: "initial-flap-cut", Initial: true, What: "every WATCH cut after its first frame from before the client starts: its initial sync meets the fault",
		Story: "A controller that starts, or restarts, while the load balancer in front of the apiserver drops long-lived connections (a rollout during an incident, a crash-looping apiserver). " +
			"A LIST-based client syncs (a LIST is no watch) and then flaps like any watching one; a WatchList client cannot sync at all, its initial events cut after the first, and asks again. " +
			"The issue's first evidence was this case: through a proxy answering every WATCH with one frame and a cut, client-go's informer made 47,700 WATCH requests in 20 s.",
		Upstream: []string{"https://github.com/kubernetes/kubernetes/issues/140890"},
		start:    proxyFault(func(p *faultproxy.Proxy) { p.FlapCut(true) })},
	{Name: "slow-consumer", What: "every call of the client's event handler blocks for 500 ms (the proxy passes everything)",
		Story: "A handler that does its work inline instead of queueing a key: a synchronous call to a slow webhook, a lock held by a long reconcile, a log write to a blocked pipe. " +
			"Events arrive faster than it returns. Where the backlog waits is the client's design: client-go's informer keeps its store current and buffers every notification for the handler, without bound " +
			"(processorListener's pendingNotifications: a stalled handler grows it until the process runs out of memory); this project's watcher calls the handler on the loop that reads the stream, " +
			"so the backlog waits in the stream (TCP, the apiserver's buffer for the watch, which it closes when full, and the client resumes from its resourceVersion).",
		Upstream: []string{"https://github.com/kubernetes/client-go/issues/1326"},
		start:    func(_ context.Context, s *stage) error { return s.client.slow(SlowHandler) },
		stop:     func(_ context.Context, s *stage) error { return s.client.slow(0) }},
	{Name: "etcd-restore", What: "etcd restored from a snapshot taken before the client started (time travel)",
		Story: "An operator restores etcd from a backup without --bump-revision: the resourceVersion goes back, objects created since the snapshot vanish, deleted ones come back, " +
			"and a client holding a newer resourceVersion is in the server's future: its resume asks for a revision that does not exist yet. Until writes pass it, an informer that resumes there waits; once they do, " +
			"it is told of the writes above its resourceVersion only, and the objects the restore changed below it stay wrong in its cache. " +
			"Here the restore restarts the apiserver too (as the etcd documentation asks), so every client's watch ends and the test is what it does on the way back.",
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
