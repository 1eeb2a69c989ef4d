package faultproxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// Faults as kube-apiserver answers them. Each stands for a situation in
// which the apiserver was recorded (go generate ./hack/record, into
// testdata/wire), and answers as it did there: the same status, headers,
// body and silence, byte for byte but the numbers (recorded_test.go holds
// each to its recording).
//
//	fault                       method                   the situation recorded
//	────────────────────────────────────────────────────────────────────────────────────────
//	410 inside a 200 stream     CompactedAt              a WATCH from a resourceVersion older
//	                                                     than the watch cache's window
//	silence, or 504 after 3 s   TooLargeRV               a WATCH, or a LIST, from a
//	                                                     resourceVersion the server has not reached
//	429, text, Retry-After      Throttle                 API Priority and Fairness rejecting
//	                                                     the client's priority level
//	ADDED for every object,     IgnoreSendInitialEvents  a WatchList to a server that does not
//	  no bookmark ending them                            implement it (the recording: the same
//	                                                     WATCH without it, to kube-apiserver
//	                                                     without its WatchList feature)

// Replays names, for each of these faults, the recordings of testdata/wire
// its answers are held to: recorded_test.go asks the proxy what each asked
// kube-apiserver and compares the answers.
var Replays = map[string][]string{
	"CompactedAt":             {"fault-watch-compacted-cached.json", "fault-compaction-under-watch-cached.json"},
	"TooLargeRV":              {"fault-watch-future-cached.json", "fault-list-future-cached.json", "fault-watchlist-future-cached.json"},
	"Throttle":                {"fault-throttled-list.json", "fault-throttled-watch.json"},
	"IgnoreSendInitialEvents": {"fault-legacy-watch-gate-off.json"},
}

// apiserverHeaders are the headers kube-apiserver sets on the answers the
// proxy makes itself (its API Priority and Fairness headers carry the UIDs
// of the flow schema and priority level that served the request; any UID
// will do).
func apiserverHeaders(h http.Header) {
	h.Set("Cache-Control", "no-cache, private")
	h.Set("X-Kubernetes-Pf-Flowschema-Uid", "6c4ab60e-5d35-4c5d-90a7-0a8c1a3b8f11")
	h.Set("X-Kubernetes-Pf-Prioritylevel-Uid", "2f1d9d05-5b7e-46c1-9b79-4f3a4f2c7e22")
}

// CompactedAt, while rv > 0, answers every WATCH from a resourceVersion
// older than rv the way kube-apiserver answers one from before its watch
// cache's window (compacted away, or before the cache started): 200, one
// ERROR event carrying 410 Expired "too old resource version: RV (rv)", the
// end of the stream. A WATCH from rv or after it passes, as the server
// serves it (fault-compaction-under-watch-cached.json: a WATCH from the
// compaction point is served); so do a WatchList, a LIST, a WATCH from ""
// or "0". Streams already open go on, as they do across a compaction: cut
// them to make the client resume. rv should be one the server has reached
// (a LIST answers no older one): a client's relist then watches on.
// CompactedAt(0) ends it.
func (p *Proxy) CompactedAt(rv int64) { p.compactedAt.Store(rv) }

// compactedAnswer answers r, a WATCH from a resourceVersion older than the
// compaction point, if CompactedAt is on.
func (p *Proxy) compactedAnswer(w http.ResponseWriter, r *http.Request, k Kind) bool {
	at := p.compactedAt.Load()
	if at <= 0 || k != Watch || !fromRV(r) || sendsInitialEvents(r) {
		return false
	}
	rv, err := strconv.ParseInt(r.URL.Query().Get("resourceVersion"), 10, 64)
	if err != nil || rv >= at {
		return false
	}
	p.count.failed.Add(1)
	apiserverHeaders(w.Header())
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: %d (%d)","reason":"Expired","code":410}}`+"\n", rv, at)
	return true
}

// Throttle, while on, answers every request the way API Priority and
// Fairness answers one of a priority level it sheds (an overloaded
// apiserver): 429, the plain-text message, Retry-After. A WATCH too: its
// initialization is a request like any other.
func (p *Proxy) Throttle(on bool) { p.throttled.Store(on) }

// ThrottledMessage is the body of APF's 429.
const ThrottledMessage = "Too many requests, please try again later.\n"

func (p *Proxy) throttleAnswer(w http.ResponseWriter) bool {
	if !p.throttled.Load() {
		return false
	}
	p.count.failed.Add(1)
	apiserverHeaders(w.Header())
	w.Header().Set("Retry-After", "1")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusTooManyRequests)
	io.WriteString(w, ThrottledMessage)
	return true
}

// IgnoreSendInitialEvents, while on, answers every WatchList as a server
// that does not implement sendInitialEvents does (an aggregated server
// built without it; kube-apiserver without its WatchList feature, to the
// same WATCH without the parameter): every object as ADDED, then the
// changes, and never the bookmark that ends the initial events; the stream
// stays open. The proxy passes the WatchList on without sendInitialEvents,
// resourceVersionMatch and allowWatchBookmarks (kube-apiserver with the
// feature would make any WATCH from "" a WatchList again, bookmark and all,
// if it may send bookmarks): so such a stream carries no bookmark at all,
// where that server's would carry one a minute, unannotated. Heal cuts the
// streams so answered (the server that answered them is gone).
func (p *Proxy) IgnoreSendInitialEvents(on bool) { p.ignoreInitialEvents.Store(on) }

// ignoringInitialEvents rewrites r if IgnoreSendInitialEvents is on and r is
// a WatchList; true if it did.
func (p *Proxy) ignoringInitialEvents(r *http.Request) bool {
	if !p.ignoreInitialEvents.Load() || !sendsInitialEvents(r) {
		return false
	}
	q := r.URL.Query()
	q.Del("sendInitialEvents")
	q.Del("resourceVersionMatch")
	q.Del("allowWatchBookmarks")
	q.Del("resourceVersion")
	r.URL.RawQuery = q.Encode()
	return true
}

func sendsInitialEvents(r *http.Request) bool { return IsTrue(r.URL.Query(), "sendInitialEvents") }

// TooLargeRV, while on, answers every LIST and WATCH from a resourceVersion
// (but "0") the way kube-apiserver with its watch cache on answers one from
// a resourceVersion it has not reached (an apiserver of an HA control plane
// whose cache lags the one the client came from, an etcd restored under
// the client): a LIST waits TooLargeWait for the cache to catch up, then
// 504 "Too large resource version" with the ResourceVersionTooLarge cause;
// a WatchList the same, as an ERROR event in a 200 stream; a WATCH is
// answered 200 and then nothing, until the fault ends: then the server has
// caught up, and the stream goes on from the resourceVersion asked for (the
// request passed on). A quorum LIST (from "") passes.
func (p *Proxy) TooLargeRV(on bool) { p.gate(&p.caughtUp, on) }

// TooLargeWait is how long kube-apiserver waits for its watch cache to
// reach a resourceVersion before it answers "Too large resource version".
const TooLargeWait = 3 * time.Second

// tooLarge answers r as TooLargeRV says (answered: the client went away
// meanwhile, too), or holds a WATCH until the fault ends, its status and
// headers sent (held: pass it on).
func (p *Proxy) tooLarge(ctx context.Context, w http.ResponseWriter, r *http.Request, k Kind) (answered, held bool) {
	p.mu.Lock()
	caughtUp := p.caughtUp
	p.mu.Unlock()
	if caughtUp == nil || (k != List && k != Watch) || !fromRV(r) {
		return false, false
	}
	n, _ := strconv.ParseInt(r.URL.Query().Get("resourceVersion"), 10, 64)
	if k == Watch && !sendsInitialEvents(r) {
		// Established at once, then silent until the cache catches up.
		apiserverHeaders(w.Header())
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-caughtUp:
			return false, true
		case <-ctx.Done():
			return true, false
		}
	}
	t := time.NewTimer(TooLargeWait)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return true, false
	}
	p.count.failed.Add(1)
	apiserverHeaders(w.Header())
	w.Header().Set("Content-Type", "application/json")
	status := fmt.Sprintf(`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Timeout: Too large resource version: %d, current: %d",`+
		`"reason":"Timeout","details":{"causes":[{"reason":"ResourceVersionTooLarge","message":"Too large resource version"}],"retryAfterSeconds":1},"code":504}`, n, max(n-1, 0))
	if k == Watch {
		w.WriteHeader(http.StatusOK)
		fmt.Fprintf(w, `{"type":"ERROR","object":%s}`+"\n", status)
		return true, false
	}
	w.Header().Set("Retry-After", "1")
	w.WriteHeader(http.StatusGatewayTimeout)
	io.WriteString(w, status+"\n")
	return true, false
}

// headersSent passes a response on whose status and headers were already
// sent: the held WATCH of TooLargeRV, passed on once the fault ends.
type headersSent struct{ http.ResponseWriter }

func (headersSent) WriteHeader(int) {}

func (h headersSent) Flush() { h.ResponseWriter.(http.Flusher).Flush() }
