// Package faultproxy is an HTTPS reverse proxy that sits between a client and
// the API server and misbehaves on demand, so that the watcher's recovery can
// be shown against a real server: it cuts open WATCH streams mid-way and
// refuses connections for a while.
//
// Point a client at Proxy.URL instead of the apiserver; everything else
// (credentials, TLS trust) stays the same, because the proxy presents a
// certificate the client already trusts and passes requests through unchanged.
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
	"sync"
	"sync/atomic"
)

// Proxy is a fault-injecting reverse proxy. Create it with New.
type Proxy struct {
	// URL is where clients connect (https://127.0.0.1:PORT).
	URL string

	addr      string
	cert      tls.Certificate
	rp        *httputil.ReverseProxy
	lists     atomic.Int64
	watches   atomic.Int64
	others    atomic.Int64
	cutCount  atomic.Int64
	mu        sync.Mutex
	srv       *http.Server
	conns     map[net.Conn]struct{}
	streams   map[*stream]struct{}
	refusing  bool
	closeOnce sync.Once
}

type stream struct{ cancel context.CancelFunc }

// Counts are the requests the proxy passed on, by kind.
type Counts struct {
	Lists, Watches, Others int64
	// Cut is the number of WATCH streams the proxy cut.
	Cut int64
}

// New starts a proxy in front of upstream (an https URL), presenting cert and
// trusting upstreamCAs for the connection onwards.
func New(upstream string, cert tls.Certificate, upstreamCAs *x509.CertPool) (*Proxy, error) {
	target, err := url.Parse(upstream)
	if err != nil {
		return nil, err
	}
	p := &Proxy{cert: cert, conns: map[net.Conn]struct{}{}, streams: map[*stream]struct{}{}}
	p.rp = &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(target); r.Out.Host = target.Host },
		FlushInterval: -1, // pass every watch frame on at once
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
	p.srv = srv
	tlsLn := tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{p.cert}, NextProtos: []string{"h2", "http/1.1"}})
	go func() { _ = srv.Serve(tlsLn) }()
}

func (p *Proxy) handle(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("watch") != "true" && r.URL.Query().Get("watch") != "1" {
		if r.Method == http.MethodGet && !isNamedObject(r) {
			p.lists.Add(1)
		} else {
			p.others.Add(1)
		}
		p.rp.ServeHTTP(w, r)
		return
	}
	p.watches.Add(1)
	ctx, cancel := context.WithCancel(r.Context())
	s := &stream{cancel: cancel}
	p.mu.Lock()
	p.streams[s] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.streams, s)
		p.mu.Unlock()
		cancel()
	}()
	// When ctx is cancelled the copy of the upstream body fails and the
	// reverse proxy aborts the response: the client sees its stream cut.
	p.rp.ServeHTTP(w, r.WithContext(ctx))
}

// isNamedObject tells GET .../myresources/NAME (a read of one object) from
// GET .../myresources (a LIST), by the path's segment count under the group.
func isNamedObject(r *http.Request) bool {
	n := 0
	for _, c := range r.URL.Path {
		if c == '/' {
			n++
		}
	}
	// /apis/G/V/R = 4, /apis/G/V/namespaces/NS/R = 6; one more is a name.
	return n == 5 || n >= 7
}

// CutWatches aborts every open WATCH stream, mid-way, and returns how many.
func (p *Proxy) CutWatches() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for s := range p.streams {
		s.cancel()
	}
	p.cutCount.Add(int64(len(p.streams)))
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
	p.mu.Lock()
	if p.refusing {
		p.mu.Unlock()
		return
	}
	p.refusing = true
	srv := p.srv
	p.mu.Unlock()
	_ = srv.Close()
}

// Accept listens again, on the same address, after Refuse.
func (p *Proxy) Accept() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.refusing {
		return nil
	}
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return err
	}
	p.refusing = false
	p.serve(ln)
	return nil
}

// Counts returns the requests passed on so far.
func (p *Proxy) Counts() Counts {
	return Counts{Lists: p.lists.Load(), Watches: p.watches.Load(), Others: p.others.Load(), Cut: p.cutCount.Load()}
}

// Close stops the proxy.
func (p *Proxy) Close() error {
	var err error
	p.closeOnce.Do(func() {
		p.mu.Lock()
		srv := p.srv
		p.mu.Unlock()
		err = srv.Close()
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
	})
	return err
}
