package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"

	"rawwatch/internal/controlplane"
	"rawwatch/wire"
)

// The situations the faults of package faultproxy stand for, as
// kube-apiserver answers them: each an exchange (wire.Exchange) in its own
// file, named for the situation and the server (cached: its watch cache on,
// as clusters run it; uncached: --watch-cache=false, every LIST and WATCH
// served by etcd).
const (
	// A compaction under a WATCH: the open stream goes on; a WATCH from a
	// resourceVersion compacted away gets one ERROR event, 410.
	CompactionUnderWatchCached   = "fault-compaction-under-watch-cached.json"
	CompactionUnderWatchUncached = "fault-compaction-under-watch-uncached.json"
	WatchCompactedCached         = "fault-watch-compacted-cached.json"
	WatchCompactedUncached       = "fault-watch-compacted-uncached.json"
	// A WATCH from the revision just before the one etcd compacted up to:
	// the next event has lost its previous value.
	WatchCompactedNextUncached = "fault-watch-compacted-next-uncached.json"
	// A resourceVersion the server has not reached.
	WatchFutureCached       = "fault-watch-future-cached.json"
	WatchFutureUncached     = "fault-watch-future-uncached.json"
	ListFutureCached        = "fault-list-future-cached.json"
	ListFutureUncached      = "fault-list-future-uncached.json"
	WatchListFutureCached   = "fault-watchlist-future-cached.json"
	WatchListFutureUncached = "fault-watchlist-future-uncached.json"
	// A restart: how an open WATCH ends, what the starting server answers,
	// what it answers a WATCH from before the restart.
	RestartOpenWatch = "fault-restart-open-watch.json"
	RestartStarting  = "fault-restart-starting-%d.json"
	RestartResume    = "fault-restart-resume.json"
	// A WatchList where sendInitialEvents is not honoured: what a server
	// that does not implement it sends (kube-apiserver without the
	// WatchList feature, to the same WATCH without it: the objects as
	// ADDED, no bookmark ending them), what kube-apiserver with the feature
	// sends to that WATCH (it makes it a WatchList, bookmark and all), and
	// what it does with a WatchList without its watch cache and without
	// the feature.
	LegacyWatchCached    = "fault-legacy-watch-cached.json"
	LegacyWatchGateOff   = "fault-legacy-watch-gate-off.json"
	WatchListUncached    = "fault-watchlist-uncached.json"
	WatchListGateOff     = "fault-watchlist-gate-off.json"
	ThrottledListCached  = "fault-throttled-list.json"
	ThrottledWatchCached = "fault-throttled-watch.json"
)

// servers are the apiservers the fault recordings need, each with an HTTP
// client that asks for no compression.
type server struct {
	name string
	api  *controlplane.APIServer
	http *http.Client
}

func newServer(name string, api *controlplane.APIServer) (*server, error) {
	cfg := api.Config()
	cfg.DisableCompression = true
	c, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	return &server{name: name, api: api, http: c}, nil
}

// exchange makes GET resource?q on s and records the answer, waiting
// window for each next byte of an open stream.
func (r *recorder) exchange(s *server, situation string, q url.Values, window time.Duration, header http.Header) (wire.Exchange, error) {
	u := s.api.URL + namespaced
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		return wire.Exchange{}, err
	}
	req.Header.Set("Accept", "application/json")
	for k, v := range header {
		req.Header[k] = v
	}
	ex := wire.Capture(r.ctx, s.http, req, window)
	ex.Situation, ex.Server = situation, r.version+", "+s.name
	return ex, nil
}

const namespaced = "/apis/example.com/v1alpha1/namespaces/default/myresources"

func (r *recorder) keep(name string, ex wire.Exchange) {
	b, _ := json.MarshalIndent(ex, "", "  ")
	r.exchanges[name] = append(b, '\n')
	r.logf("%s: %d %s, %q", name, ex.Status, ex.End, truncate(ex.Body, 120))
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// currentRV is the resourceVersion of a fresh LIST of s.
func (r *recorder) currentRV(s *server) (int64, error) {
	ex, err := r.exchange(s, "", url.Values{"limit": {"1"}}, time.Second, nil)
	if err != nil {
		return 0, err
	}
	var l struct {
		Metadata struct{ ResourceVersion string }
	}
	if err := json.Unmarshal([]byte(ex.Body), &l); err != nil {
		return 0, fmt.Errorf("LIST: %d %q: %w", ex.Status, ex.Body, err)
	}
	return strconv.ParseInt(l.Metadata.ResourceVersion, 10, 64)
}

func (r *recorder) patch(s *server, name, message string) error {
	return r.send(s, http.MethodPatch, s.api.URL+namespaced+"/"+name, "application/merge-patch+json",
		fmt.Sprintf(`{"spec":{"message":%q}}`, message), http.StatusOK)
}

// send makes a write and checks its status.
func (r *recorder) send(s *server, method, u, contentType, body string, want int) error {
	req, err := http.NewRequestWithContext(r.ctx, method, u, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", contentType)
	resp, err := s.http.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: %s", method, u, resp.Status)
	}
	return nil
}

func watchFrom(rv int64) url.Values {
	return url.Values{"watch": {"true"}, "allowWatchBookmarks": {"true"}, "resourceVersion": {strconv.FormatInt(rv, 10)}}
}

// faults records every situation; cached is the control plane's apiserver.
func (r *recorder) faults(cp *controlplane.ControlPlane) error {
	cached, err := newServer("watch cache on", cp.APIServer)
	if err != nil {
		return err
	}
	api, err := cp.AddAPIServer(r.ctx, "apiserver-nocache", "--watch-cache=false")
	if err != nil {
		return err
	}
	uncached, err := newServer("--watch-cache=false", api)
	if err != nil {
		return err
	}
	for _, step := range []func() error{
		// First, while the objects are the samples as applied (the proxy's
		// test compares with them).
		func() error { return r.watchListIgnored(cp, cached, uncached) },
		func() error { return r.compaction(cp, cached, uncached) },
		func() error { return r.future(cached, uncached) },
		func() error { return r.throttled(cp, cached) },
		func() error { return r.restart(cached) }, // last: it restarts the cached apiserver
	} {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// compaction: a WATCH open across a compaction, and a WATCH from a
// resourceVersion compacted away (uncached: etcd's compaction; cached: the
// watch cache's window, which etcd's compaction does not move).
func (r *recorder) compaction(cp *controlplane.ControlPlane, cached, uncached *server) error {
	for _, s := range []struct {
		srv  *server
		name string
	}{{uncached, CompactionUnderWatchUncached}, {cached, CompactionUnderWatchCached}} {
		rv, err := r.currentRV(s.srv)
		if err != nil {
			return err
		}
		var ex wire.Exchange
		var wg sync.WaitGroup
		wg.Go(func() {
			ex, err = r.exchange(s.srv, "a WATCH open while etcd compacts its history up to the current revision; then one object is changed", watchFrom(rv), 4*time.Second, nil)
		})
		time.Sleep(time.Second)
		if _, cerr := cp.Compact(r.ctx); cerr != nil {
			return cerr
		}
		if perr := r.patch(cached, "hello", "changed after a compaction "+s.srv.name); perr != nil {
			return perr
		}
		wg.Wait()
		if err != nil {
			return err
		}
		if ex.Status != http.StatusOK || !strings.Contains(ex.Body, `"MODIFIED"`) || ex.End != "silent" {
			return fmt.Errorf("%s: %d %s %q; want the stream open, the change delivered", s.name, ex.Status, ex.End, ex.Body)
		}
		r.keep(s.name, ex)
	}
	// Compacted up to the next write: etcd still has that write, not the
	// value before it, and the apiserver cannot make its event.
	old, err := r.currentRV(uncached)
	if err != nil {
		return err
	}
	if err := r.patch(cached, "hello", "written just before a compaction"); err != nil {
		return err
	}
	if _, err := cp.Compact(r.ctx); err != nil {
		return err
	}
	ex, err := r.exchange(uncached, "a WATCH from the revision just before the one etcd compacted up to (the next event's previous value is gone)", watchFrom(old), 3*time.Second, nil)
	if err != nil {
		return err
	}
	if ex.Status != http.StatusOK || !strings.Contains(ex.Body, `"type":"ERROR"`) || ex.End != "eof" {
		return fmt.Errorf("%s: %d %s %q; want an ERROR event and the end", WatchCompactedNextUncached, ex.Status, ex.End, ex.Body)
	}
	r.keep(WatchCompactedNextUncached, ex)
	// Compacted well past: two writes after the resourceVersion asked for.
	if old, err = r.currentRV(uncached); err != nil {
		return err
	}
	for i := range 2 {
		if err := r.patch(cached, "hello", fmt.Sprintf("written before a compaction (%d)", i)); err != nil {
			return err
		}
	}
	if _, err := cp.Compact(r.ctx); err != nil {
		return err
	}
	for _, s := range []struct {
		srv  *server
		name string
		rv   int64
		what string
	}{
		{uncached, WatchCompactedUncached, old, "a WATCH from a resourceVersion etcd compacted away"},
		{cached, WatchCompactedCached, 1, "a WATCH from a resourceVersion older than the watch cache's window"},
	} {
		ex, err := r.exchange(s.srv, s.what, watchFrom(s.rv), 3*time.Second, nil)
		if err != nil {
			return err
		}
		if ex.Status != http.StatusOK || !strings.Contains(ex.Body, `"code":410`) || ex.End != "eof" {
			return fmt.Errorf("%s: %d %s %q; want an ERROR event, 410, and the end", s.name, ex.Status, ex.End, ex.Body)
		}
		r.keep(s.name, ex)
	}
	return nil
}

// future: a LIST, a WATCH and a WatchList from a resourceVersion far ahead
// of the server's (a lagging apiserver of an HA control plane, an etcd
// restored under the client).
func (r *recorder) future(cached, uncached *server) error {
	for _, s := range []struct {
		srv                    *server
		watch, list, watchList string
	}{
		{cached, WatchFutureCached, ListFutureCached, WatchListFutureCached},
		{uncached, WatchFutureUncached, ListFutureUncached, WatchListFutureUncached},
	} {
		rv, err := r.currentRV(s.srv)
		if err != nil {
			return err
		}
		future := strconv.FormatInt(rv+1000, 10)
		ex, err := r.exchange(s.srv, "a WATCH from a resourceVersion the server has not reached", watchFrom(rv+1000), 5*time.Second, nil)
		if err != nil {
			return err
		}
		r.keep(s.watch, ex)
		ex, err = r.exchange(s.srv, "a LIST from a resourceVersion the server has not reached",
			url.Values{"limit": {"500"}, "resourceVersion": {future}}, 5*time.Second, nil)
		if err != nil {
			return err
		}
		r.keep(s.list, ex)
		ex, err = r.exchange(s.srv, "a WatchList from a resourceVersion the server has not reached",
			url.Values{"watch": {"true"}, "allowWatchBookmarks": {"true"}, "sendInitialEvents": {"true"},
				"resourceVersionMatch": {"NotOlderThan"}, "resourceVersion": {future}}, 5*time.Second, nil)
		if err != nil {
			return err
		}
		r.keep(s.watchList, ex)
	}
	return nil
}

// watchListIgnored: what a server that does not implement sendInitialEvents
// sends to a WatchList's WATCH without it (every object as ADDED, the
// changes, no bookmark ending the initial events), what kube-apiserver with
// the WatchList feature sends to that WATCH, and what it does with a
// WatchList without its watch cache and without the feature.
func (r *recorder) watchListIgnored(cp *controlplane.ControlPlane, cached, uncached *server) error {
	api, err := cp.AddAPIServer(r.ctx, "apiserver-nowatchlist", "--feature-gates=WatchList=false")
	if err != nil {
		return err
	}
	defer api.Stop()
	off, err := newServer("--feature-gates=WatchList=false", api)
	if err != nil {
		return err
	}
	plain := url.Values{"watch": {"true"}, "allowWatchBookmarks": {"true"}}
	ex, err := r.exchange(off, "a WATCH from resourceVersion \"\" to a server without the WatchList feature: what a server that does not implement sendInitialEvents answers a WatchList with", plain, 3*time.Second, nil)
	if err != nil {
		return err
	}
	if ex.Status != http.StatusOK || strings.Contains(ex.Body, wire.InitialEventsEnd) || !strings.Contains(ex.Body, `"ADDED"`) {
		return fmt.Errorf("%s: %d %q; want the objects ADDED and no initial-events-end bookmark", LegacyWatchGateOff, ex.Status, ex.Body)
	}
	r.keep(LegacyWatchGateOff, ex)
	if ex, err = r.exchange(cached, "a WATCH from resourceVersion \"\" to kube-apiserver with the WatchList feature: it serves it as a WatchList", plain, 3*time.Second, nil); err != nil {
		return err
	}
	r.keep(LegacyWatchCached, ex)
	watchList := url.Values{"watch": {"true"}, "allowWatchBookmarks": {"true"}, "sendInitialEvents": {"true"}, "resourceVersionMatch": {"NotOlderThan"}}
	if ex, err = r.exchange(uncached, "a WatchList served by etcd", watchList, 3*time.Second, nil); err != nil {
		return err
	}
	r.keep(WatchListUncached, ex)
	if ex, err = r.exchange(off, "a WatchList to a server without the WatchList feature", watchList, 3*time.Second, nil); err != nil {
		return err
	}
	r.keep(WatchListGateOff, ex)
	return nil
}

// throttledUser's requests go to a priority level of API Priority and
// Fairness with no seats and no queue: every one is rejected, as every
// request of an overloaded level is (the admin recording it impersonates
// the user).
const throttledUser = "scorecard-throttled"

var throttledObjects = []string{`{"apiVersion":"flowcontrol.apiserver.k8s.io/v1","kind":"PriorityLevelConfiguration",
 "metadata":{"name":"scorecard-overloaded"},
 "spec":{"type":"Limited","limited":{"nominalConcurrencyShares":0,"lendablePercent":0,"borrowingLimitPercent":0,"limitResponse":{"type":"Reject"}}}}`,
	`{"apiVersion":"flowcontrol.apiserver.k8s.io/v1","kind":"FlowSchema",
 "metadata":{"name":"scorecard-overloaded"},
 "spec":{"priorityLevelConfiguration":{"name":"scorecard-overloaded"},"matchingPrecedence":100,"distinguisherMethod":{"type":"ByUser"},
  "rules":[{"subjects":[{"kind":"User","user":{"name":"` + throttledUser + `"}}],
   "resourceRules":[{"verbs":["*"],"apiGroups":["*"],"resources":["*"],"namespaces":["*"],"clusterScope":true}],
   "nonResourceRules":[{"verbs":["*"],"nonResourceURLs":["*"]}]}]}}`,
	`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding","metadata":{"name":"scorecard-throttled"},
 "roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"cluster-admin"},
 "subjects":[{"apiGroup":"rbac.authorization.k8s.io","kind":"User","name":"` + throttledUser + `"}]}`}

var throttledPaths = []string{"/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations",
	"/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"}

// throttled: a LIST and a WATCH of a client whose priority level rejects
// every request (API Priority and Fairness, as an overloaded apiserver
// answers a flow it sheds).
func (r *recorder) throttled(cp *controlplane.ControlPlane, cached *server) error {
	for i, obj := range throttledObjects {
		if err := r.send(cached, http.MethodPost, cached.api.URL+throttledPaths[i], "application/json", obj, http.StatusCreated); err != nil {
			return err
		}
	}
	as := http.Header{"Impersonate-User": {throttledUser}}
	// A level with no seats still serves one request when nothing else
	// runs in it: keep it busy with others' LISTs, as an overload does.
	busy, stop := context.WithCancel(r.ctx)
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	for range 16 {
		wg.Go(func() {
			for busy.Err() == nil {
				req, _ := http.NewRequestWithContext(busy, http.MethodGet, cached.api.URL+namespaced, nil)
				req.Header = as.Clone()
				if resp, err := cached.http.Do(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		})
	}
	rv, err := r.currentRV(cached)
	if err != nil {
		return err
	}
	for _, c := range []struct {
		name, what string
		q          url.Values
	}{
		{ThrottledListCached, "a LIST of a client whose priority level is overloaded and sheds load (API Priority and Fairness, no queue)", url.Values{"limit": {"500"}}},
		{ThrottledWatchCached, "a WATCH of a client whose priority level is overloaded and sheds load", watchFrom(rv)},
	} {
		// APF's configuration reaches its dispatcher within seconds.
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
			ex, err := r.exchange(cached, c.what, c.q, 2*time.Second, as)
			if err != nil {
				return err
			}
			if ex.Status == http.StatusTooManyRequests {
				r.keep(c.name, ex)
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: no 429 within a minute: %d %q", c.name, ex.Status, truncate(ex.Body, 200))
			}
		}
	}
	return nil
}

// restart: a WATCH open while the apiserver is killed and started again;
// what the starting apiserver answers a WATCH from before the restart
// (every distinct answer, in order); and what it answers once ready.
func (r *recorder) restart(cached *server) error {
	rv, err := r.currentRV(cached)
	if err != nil {
		return err
	}
	var open wire.Exchange
	var wg sync.WaitGroup
	wg.Go(func() {
		open, _ = r.exchange(cached, "a WATCH open while the apiserver is killed", watchFrom(rv), 20*time.Second, nil)
	})
	time.Sleep(time.Second)
	// A client of its own, so that no connection outlives the restart.
	poll, err := newServer(cached.name, cached.api)
	if err != nil {
		return err
	}
	stop := make(chan struct{})
	var seen []wire.Exchange
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			ex, err := r.exchange(poll, "a WATCH from before the restart, while the apiserver starts", watchFrom(rv), 500*time.Millisecond, nil)
			if err != nil {
				continue
			}
			ex.Waited = 0 // how long a refused connection takes is not the server's
			if len(seen) == 0 || !sameAnswer(seen[len(seen)-1], ex) {
				seen = append(seen, ex)
			}
		}
	})
	if err := cached.api.Restart(r.ctx); err != nil {
		return err
	}
	close(stop)
	wg.Wait()
	r.keep(RestartOpenWatch, open)
	for i, ex := range seen {
		r.keep(fmt.Sprintf(RestartStarting, i+1), ex)
	}
	ex, err := r.exchange(cached, "a WATCH from before the restart, once the apiserver is ready again", watchFrom(rv), 3*time.Second, nil)
	if err != nil {
		return err
	}
	r.keep(RestartResume, ex)
	return nil
}

// sameAnswer: the same status, body shape and end (or the same error).
func sameAnswer(a, b wire.Exchange) bool {
	if a.Status == 0 || b.Status == 0 {
		return a.Status == b.Status && wire.Mask(a.Err) == wire.Mask(b.Err)
	}
	return a.Status == b.Status && wire.Mask(a.Body) == wire.Mask(b.Body) && a.End == b.End
}
