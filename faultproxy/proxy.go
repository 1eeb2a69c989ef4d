// Package faultproxy is an HTTPS reverse proxy that sits between a client and
// the API server and misbehaves on purpose, so that a controller's recovery
// can be shown against a real server. Every fault is one a real cluster
// produces sooner or later:
//
//	fault                        method           what a real cluster does that looks like it
//	────────────────────────────────────────────────────────────────────────────────────────────
//	cut WATCH streams mid-way    CutWatches       a load balancer or apiserver restart drops them
//	410 inside a stream          ExpireWatches    the history was compacted: ERROR event, then EOF
//	410 as the response          Fail(Gone...)    a LIST/WATCH at a compacted resourceVersion
//	500 / 429 with Retry-After   Fail(...)        an overloaded server, priority and fairness
//	slow responses               Delay            a busy server, a far-away one
//	connection refused           Refuse/RefuseFor the apiserver is down or restarting
//	                                              (and whenever the real one is: the proxy
//	                                              then refuses too, never answers 502)
//	an event nobody can decode   InjectFrame      a buggy conversion webhook, a version skew
//	lost events                  Drop             a buggy watch cache (a controller cannot
//	                                              notice; only a relist repairs it)
//
// and faults that last until switched off, to see what a client does when a
// fault does not go away: how often it retries, whether it notices at all:
//
//	every stream cut after       FlapCut          a load balancer that drops long-lived
//	  one frame                                   connections, a crash-looping apiserver
//	every stream ends in a 500   FlapError        etcd failing under the apiserver, a
//	  ERROR after one event                       watch the server cannot continue
//	streams open, nothing sent   Freeze           a half-dead connection, a stuck proxy
//	every WatchList fails        WatchListFail    a server that cannot finish the initial
//	  after one initial event                     events (too big, too slow, restarting)
//	every WatchList ends, no     WatchListEnd     an aggregated server that ignores
//	  bookmark, after one event                   sendInitialEvents
//	every event frame cut in     Garble           a middlebox mangling a long-lived stream
//	  half
//	streams open now silent for  StallWatches     a stuck intermediary that lost them
//	  good
//
// and the faults kube-apiserver makes, each held to a recording of what it
// answered in that situation (recorded.go): CompactedAt, TooLargeRV, Throttle,
// IgnoreSendInitialEvents.
//
// Faults happen on demand (call the methods; Handler exposes them over HTTP
// for a demo) or on a schedule (Every). Counts says what the proxy saw and
// did, so a test can assert on it: how many LISTs, how many requests during
// a storm, how many 410s came from the server rather than from the proxy.
// Meter says when: LISTs and WATCHes a minute over any stretch of time, and
// the busiest minute, to hold a client to a request budget.
//
// Point a client at Proxy.URL instead of the apiserver; everything else
// (credentials, TLS trust) stays the same, because the proxy presents a
// certificate the client already trusts and passes requests through unchanged.
// WATCH responses are passed on frame by frame (the apiserver sends one JSON
// object per line), which is what lets the proxy add, drop or end frames at a
// frame boundary.
package faultproxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy is a fault-injecting reverse proxy. Create it with New.
type Proxy struct {
	// URL is where clients connect (https://127.0.0.1:PORT).
	URL string

	addr  string
	cert  tls.Certificate
	rp    *httputil.ReverseProxy
	count counters

	mu       sync.Mutex
	srv      *http.Server
	ln       net.Listener
	conns    map[net.Conn]struct{}
	streams  map[*stream]struct{}
	refusing bool
	closed   bool
	// listening: srv serves ln; not while refusing, or while the
	// apiserver is down (upstreamDown: it refused a connection, and the
	// proxy refuses them too until it listens again on upstreamHost).
	listening    bool
	upstreamDown bool
	upstreamHost string
	failure      *Failure
	delay        map[Kind]time.Duration
	drop         map[string]bool
	// thaw is open while the proxy is frozen; Freeze(false) closes it.
	thaw chan struct{}
	// caughtUp is open while TooLargeRV is on; TooLargeRV(false) closes it.
	caughtUp chan struct{}

	flapCut, flapError, watchListFail atomic.Bool
	// watchListEnd, garble: the persistent faults of more.go.
	watchListEnd, garble atomic.Bool
	// The faults as kube-apiserver answers them (recorded.go).
	throttled, ignoreInitialEvents atomic.Bool
	compactedAt                    atomic.Int64

	meter *Meter

	closeOnce sync.Once
}

// Kind sorts requests as kube-apiserver does (KindOf).
type Kind int

const (
	// List is a GET of a collection (a LIST, or one page of it).
	List Kind = 1 << iota
	// Watch is a WATCH, in any spelling: a long-lived stream of events.
	Watch
	// Other is everything else: GET of one object, writes, discovery.
	Other
	// All is every request.
	All = List | Watch | Other
)

func (k Kind) String() string {
	var parts []string
	for _, c := range []struct {
		k    Kind
		name string
	}{{List, "list"}, {Watch, "watch"}, {Other, "other"}} {
		if k&c.k != 0 {
			parts = append(parts, c.name)
		}
	}
	if len(parts) == 3 {
		return "all"
	}
	return strings.Join(parts, "+")
}

// Counts is what the proxy saw and did.
type Counts struct {
	// Lists, Watches, Others count the requests that reached the proxy, by
	// Kind, whether passed on or answered with a fault.
	Lists, Watches, Others int64
	// Failed counts requests the proxy answered itself with an error (Fail).
	Failed int64
	// Refused counts Refuse periods (not the times the apiserver was
	// down, when the proxy refuses connections too).
	Refused int64
	// Cut counts WATCH streams cut mid-way (by CutWatches or FlapCut);
	// Expired, streams ended with an injected 410 ERROR event; ErrorEvents,
	// streams ended with an injected 500 ERROR event (FlapError,
	// WatchListFail); Injected, other frames added to streams; Dropped,
	// frames from the server that were not passed on.
	Cut, Expired, ErrorEvents, Injected, Dropped int64
	// Frames counts the watch frames passed on from the server.
	Frames int64
	// OpenWatches is the number of WATCH streams open right now.
	OpenWatches int
	// UpstreamGone counts the 410s the server itself sent: HTTP 410 responses
	// and ERROR events with code 410 (etcd compacted the history we asked for).
	UpstreamGone int64
	// Stalled counts the streams StallWatches silenced.
	Stalled int64
}

// Total is the number of requests that reached the proxy.
func (c Counts) Total() int64 { return c.Lists + c.Watches + c.Others }

type counters struct {
	lists, watches, others, failed, refused atomic.Int64
	cut, expired, injected, dropped, frames atomic.Int64
	errorEvents, upstreamGone, stalled      atomic.Int64
}

// New starts a proxy in front of upstream (an https URL), presenting cert and
// trusting upstreamCAs for the connection onwards.
func New(upstream string, cert tls.Certificate, upstreamCAs *x509.CertPool) (*Proxy, error) {
	target, err := url.Parse(upstream)
	if err != nil {
		return nil, err
	}
	p := &Proxy{cert: cert, conns: map[net.Conn]struct{}{}, streams: map[*stream]struct{}{},
		delay: map[Kind]time.Duration{}, drop: map[string]bool{}, meter: NewMeter(), upstreamHost: target.Host}
	if target.Port() == "" {
		p.upstreamHost = net.JoinHostPort(target.Hostname(), "443")
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = target.Host
			if KindOf(r.In) == Watch {
				// Let the transport ask for and undo compression itself, so
				// that the frames the proxy reads are plain JSON lines.
				r.Out.Header.Del("Accept-Encoding")
			}
		},
		ModifyResponse: p.modifyResponse,
		ErrorHandler:   p.upstreamError,
		FlushInterval:  -1, // pass every watch frame on at once
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: upstreamCAs},
			ForceAttemptHTTP2: true,
		},
		ErrorLog: log.New(io.Discard, "", 0),
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p.addr = ln.Addr().String()
	p.URL = "https://" + p.addr
	p.serve(ln)
	return p, nil
}

func (p *Proxy) serve(ln net.Listener) {
	srv := &http.Server{
		Handler:  http.HandlerFunc(p.handle),
		ErrorLog: log.New(io.Discard, "", 0),
		ConnState: func(c net.Conn, s http.ConnState) {
			p.mu.Lock()
			defer p.mu.Unlock()
			switch s {
			case http.StateNew:
				p.conns[c] = struct{}{}
			case http.StateClosed, http.StateHijacked:
				delete(p.conns, c)
			}
		},
	}
	p.srv, p.ln, p.listening = srv, ln, true
	tlsLn := tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{p.cert}, NextProtos: []string{"h2", "http/1.1"}})
	go func() { _ = srv.Serve(tlsLn) }()
}

// KindOf sorts a request into a Kind as kube-apiserver does (its
// RequestInfoFactory): a GET under the /watch/ prefix, or of a collection
// whose watch parameter is anything but "0" or "false" (in any case), is a
// Watch; any other GET of a collection is a List (a page of one too);
// everything else, a GET of one object, discovery, a write, is Other. The
// scorecard's request log sorts with it too, so that the proxy and the
// client count the same requests the same way.
func KindOf(r *http.Request) Kind {
	if r.Method != http.MethodGet {
		return Other
	}
	parts, ok := resourceParts(r.URL.Path)
	if !ok {
		return Other
	}
	if len(parts) > 0 && parts[0] == "watch" {
		return Watch
	}
	if parts[0] == "namespaces" && len(parts) >= 3 {
		parts = parts[2:] // namespaces/NS/RESOURCE/...
	}
	if len(parts) != 1 {
		return Other // a named object, its subresource, a namespace
	}
	if IsTrue(r.URL.Query(), "watch") {
		return Watch
	}
	return List
}

// IsTrue reads a boolean query parameter as kube-apiserver does: present,
// and neither "0" nor "false" in any case.
func IsTrue(q url.Values, name string) bool {
	v, ok := q[name]
	return ok && len(v) > 0 && v[0] != "0" && !strings.EqualFold(v[0], "false")
}

// resourceParts is what follows the version in a resource request's path
// (/api/V/... or /apis/G/V/...); false for any other path (discovery,
// /version, /openapi).
func resourceParts(path string) ([]string, bool) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		return parts[2:], true
	case len(parts) >= 4 && parts[0] == "apis":
		return parts[3:], true
	}
	return nil, false
}

func (p *Proxy) handle(w http.ResponseWriter, r *http.Request) {
	kind := KindOf(r)
	p.meter.count(r)
	switch kind {
	case Watch:
		p.count.watches.Add(1)
	case List:
		p.count.lists.Add(1)
	default:
		p.count.others.Add(1)
	}
	if !p.wait(r.Context(), kind) {
		return
	}
	if p.throttleAnswer(w) {
		return
	}
	if f, ok := p.takeFailure(r, kind); ok {
		p.count.failed.Add(1)
		f.write(w)
		return
	}
	if p.compactedAnswer(w, r, kind) {
		return
	}
	ignoring := p.ignoringInitialEvents(r)
	if kind != Watch {
		if answered, _ := p.tooLarge(r.Context(), w, r, kind); !answered {
			p.rp.ServeHTTP(w, r)
		}
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	s := newStream(ctx, cancel, sendsInitialEvents(r))
	s.ignoring = ignoring
	p.mu.Lock()
	p.streams[s] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.streams, s)
		p.mu.Unlock()
		cancel()
	}()
	answered, held := p.tooLarge(ctx, w, r, kind)
	if answered {
		return
	}
	if held {
		w = headersSent{w}
	}
	// modifyResponse finds the stream in the context and frames the body.
	// When ctx is cancelled the copy of the upstream body fails and the
	// reverse proxy aborts the response: the client sees its stream cut.
	p.rp.ServeHTTP(w, r.WithContext(context.WithValue(ctx, streamKey{}, s)))
}

// modifyResponse counts the server's own 410s and frames WATCH bodies.
func (p *Proxy) modifyResponse(resp *http.Response) error {
	if resp.StatusCode == http.StatusGone {
		p.count.upstreamGone.Add(1)
	}
	s, ok := resp.Request.Context().Value(streamKey{}).(*stream)
	if ok && resp.StatusCode == http.StatusOK {
		resp.Body = s.frame(resp.Body, p)
	}
	return nil
}

// CutWatches aborts every open WATCH stream, mid-way, and returns how many.
func (p *Proxy) CutWatches() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for s := range p.streams {
		s.cancel()
	}
	p.count.cut.Add(int64(len(p.streams)))
	return len(p.streams)
}

// OpenWatches is the number of WATCH streams currently open through the proxy.
func (p *Proxy) OpenWatches() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.streams)
}

// Refuse closes the listening socket and every connection: until Accept,
// clients get "connection refused", as from a dead server.
func (p *Proxy) Refuse() {
	if p.deafen(&p.refusing) {
		p.count.refused.Add(1)
	}
}

// deafen sets why (refusing, upstreamDown: a reason not to listen) and
// stops listening, unless why is set already or the proxy is closed; it
// tells whether it did. It closes the socket (the server may not have
// started serving it yet, and a connection queued meanwhile would be
// reset, not refused) and every connection.
func (p *Proxy) deafen(why *bool) bool {
	p.mu.Lock()
	if *why || p.closed {
		p.mu.Unlock()
		return false
	}
	*why = true
	listening, srv, ln := p.listening, p.srv, p.ln
	p.listening = false
	p.mu.Unlock()
	if listening {
		_ = ln.Close()
		_ = srv.Close()
	}
	return true
}

// RefuseFor refuses connections for d, then accepts them again.
func (p *Proxy) RefuseFor(d time.Duration) {
	p.Refuse()
	time.AfterFunc(d, func() {
		if err := p.Accept(); err != nil {
			log.Printf("faultproxy: listening again on %s: %v", p.addr, err)
		}
	})
}

// Accept listens again, on the same address, after Refuse (once the
// apiserver listens, if it is down).
func (p *Proxy) Accept() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.refusing || p.closed {
		return nil
	}
	p.refusing = false
	if err := p.listenLocked(); err != nil {
		p.refusing = true
		return err
	}
	return nil
}

// listenLocked listens on the proxy's address unless it listens already,
// refuses, is closed or its apiserver is down.
func (p *Proxy) listenLocked() error {
	if p.listening || p.refusing || p.upstreamDown || p.closed {
		return nil
	}
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return err
	}
	p.serve(ln)
	return nil
}

// upstreamError answers a request the apiserver could not be asked: as a
// dead server answers, with nothing. The request's connection is closed
// (reverse proxies answer 502; no kube-apiserver does). An apiserver that
// refused the connection (killed, restarting) makes the proxy refuse
// them too, every open one closed, until it listens again.
func (p *Proxy) upstreamError(_ http.ResponseWriter, r *http.Request, err error) {
	var op *net.OpError
	if r.Context().Err() == nil && errors.As(err, &op) && op.Op == "dial" {
		p.upstreamGone()
	}
	panic(http.ErrAbortHandler)
}

// upstreamGone stops listening until the apiserver accepts a connection
// again (tried every UpstreamProbe).
func (p *Proxy) upstreamGone() {
	if !p.deafen(&p.upstreamDown) {
		return
	}
	go func() {
		for {
			time.Sleep(UpstreamProbe)
			c, err := net.DialTimeout("tcp", p.upstreamHost, time.Second)
			p.mu.Lock()
			if p.closed {
				p.mu.Unlock()
				return
			}
			if err == nil {
				c.Close()
				p.upstreamDown = false
				if err := p.listenLocked(); err != nil {
					log.Printf("faultproxy: listening again on %s: %v", p.addr, err)
				}
				p.mu.Unlock()
				return
			}
			p.mu.Unlock()
		}
	}()
}

// UpstreamProbe is how often a proxy whose apiserver is down tries it.
const UpstreamProbe = 100 * time.Millisecond

// Meter is the proxy's request meter: every LIST and WATCH that reached it,
// with its time. (A refusing proxy sees nothing: meter the client for that,
// with Meter.Wrap.)
func (p *Proxy) Meter() *Meter { return p.meter }

// Counts returns what the proxy saw and did so far.
func (p *Proxy) Counts() Counts {
	c := &p.count
	return Counts{
		Lists: c.lists.Load(), Watches: c.watches.Load(), Others: c.others.Load(),
		Failed: c.failed.Load(), Refused: c.refused.Load(),
		Cut: c.cut.Load(), Expired: c.expired.Load(), ErrorEvents: c.errorEvents.Load(), Injected: c.injected.Load(),
		Dropped: c.dropped.Load(), Frames: c.frames.Load(), UpstreamGone: c.upstreamGone.Load(), Stalled: c.stalled.Load(),
		OpenWatches: p.OpenWatches(),
	}
}

// Close stops the proxy.
func (p *Proxy) Close() error {
	var err error
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		srv, ln := p.srv, p.ln
		p.mu.Unlock()
		_ = ln.Close()
		err = srv.Close()
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
	})
	return err
}
