package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	stdlog "log"
	"net"
	"net/http"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"rawwatch/internal/authz"
)

// addChecks registers what /healthz, /readyz and /leaderz report (see
// package health for what each means).
func (a *App) addChecks() {
	ping := func() error { return nil }
	a.Liveness.Add("ping", ping)
	a.Readiness.Add("ping", ping)
	a.Readiness.Add("synced", func() error {
		select {
		case <-a.Watcher.Synced():
			return nil
		default:
			return errors.New("waiting for the first list")
		}
	})
	// The probes need no token: they name no peer (the pods of the other
	// replicas are in the guarded metrics, and in the Leases RBAC guards).
	if a.Member != nil {
		// /leaderz says whether this replica works (on what: the guarded
		// metric rawwatch_shard_working_info).
		a.Leadership.Add("shard", func() error {
			if c := a.Member.Claims(); c.Working.Empty() {
				return fmt.Errorf("works no slot yet (%d members; target %d slots, pending %d)", len(a.Member.Members()), c.Target.Len(), c.Pending.Len())
			}
			return nil
		})
		return
	}
	if a.Elector == nil {
		a.Leadership.Add("leader", func() error { return nil })
		return
	}
	a.Liveness.Add("leader-election", a.Elector.Check)
	a.Leadership.Add("leader", func() error {
		if a.Elector.IsLeader() {
			return nil
		}
		if a.Elector.Leader() != "" {
			return errors.New("standby: another replica holds the lease")
		}
		return errors.New("standby: no leader observed yet")
	})
}

// An endpoint is one address the controller serves, and what it serves
// there.
//
// The metrics and the live page show the controller's state and the names
// of the objects it holds: in a cluster they are served over HTTPS, to
// callers the API server authenticates and RBAC allows (package authz).
// Plain HTTP is for loopback only (the demo, a port-forward). The health
// probes stay plain and open: the kubelet calls them with no token, and they
// say only "ok" or why not.
type endpoint struct {
	what    string // what it serves, for the log: "metrics (/metrics)"
	flag    string // the flag that sets its address, for errors
	addr    string
	handler http.Handler
	guarded bool     // HTTPS behind the guard when secure serving is on
	paths   []string // what handler serves: the guard authorizes only these
	ln      net.Listener
}

// endpoints are the addresses the options ask for, with their handlers;
// the probes share the metrics' address when the two are equal (plain only).
func (a *App) endpoints() ([]*endpoint, error) {
	off := func(addr string) bool { return addr == "" || addr == "0" }
	probes := http.NewServeMux()
	a.Liveness.Mount(probes, "healthz")
	a.Readiness.Mount(probes, "readyz")
	a.Leadership.Mount(probes, "leaderz")
	metrics := http.NewServeMux()
	metrics.Handle("/metrics", a.Metrics.Handler())

	var eps []*endpoint
	if !off(a.opts.MetricsAddr) {
		ep := &endpoint{what: "metrics (/metrics)", flag: "--metrics-bind-address", addr: a.opts.MetricsAddr,
			handler: metrics, guarded: true, paths: []string{"/metrics"}}
		if a.opts.HealthAddr == a.opts.MetricsAddr {
			if a.opts.SecureServing {
				return nil, fmt.Errorf("the health probes need an address of their own with secure serving (they stay plain HTTP for the kubelet): --health-probe-bind-address equals --metrics-bind-address %s", a.opts.MetricsAddr)
			}
			metrics.Handle("/", probes)
			ep.what = "metrics and probes (/metrics, /healthz, /readyz, /leaderz)"
		}
		eps = append(eps, ep)
	}
	if !off(a.opts.HealthAddr) && a.opts.HealthAddr != a.opts.MetricsAddr {
		eps = append(eps, &endpoint{what: "health probes (/healthz, /readyz, /leaderz)", flag: "--health-probe-bind-address",
			addr: a.opts.HealthAddr, handler: probes})
	}
	if a.UI != nil {
		m := http.NewServeMux()
		m.Handle("/ui/", a.UI.Handler("/ui/"))
		m.Handle("/{$}", http.RedirectHandler("/ui/", http.StatusFound))
		eps = append(eps, &endpoint{what: "the live page (/ui/)", flag: "--ui-bind-address", addr: a.opts.UIAddr,
			handler: m, guarded: true, paths: append([]string{"/", "/ui"}, a.UI.Paths("/ui/")...)})
	}
	for _, ep := range eps {
		if ep.guarded && !a.opts.SecureServing && !loopback(ep.addr) {
			return nil, fmt.Errorf("%s %s: plain HTTP is served on loopback only (127.0.0.1, ::1, localhost); serve it securely (--secure-serving) or bind it to loopback", ep.flag, ep.addr)
		}
	}
	return eps, nil
}

// loopback tells whether addr ("host:port") binds to loopback only.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// listen binds every endpoint, so that a port in use fails New at once.
func listen(eps []*endpoint) error {
	for i, ep := range eps {
		ln, err := net.Listen("tcp", ep.addr)
		if err != nil {
			for _, done := range eps[:i] {
				done.ln.Close()
			}
			return fmt.Errorf("serving %s on %s: %w", ep.what, ep.addr, err)
		}
		ep.ln = ln
	}
	return nil
}

// MetricsAddr is the address /metrics is served on ("" when off).
func (a *App) MetricsAddr() string { return a.addrOf("--metrics-bind-address") }

// HealthAddr is the address the probes are served on ("" when off).
func (a *App) HealthAddr() string {
	if addr := a.addrOf("--health-probe-bind-address"); addr != "" {
		return addr
	}
	if a.opts.HealthAddr != "" && a.opts.HealthAddr == a.opts.MetricsAddr {
		return a.MetricsAddr()
	}
	return ""
}

// UIAddr is the address the live page is served on ("" when off).
func (a *App) UIAddr() string { return a.addrOf("--ui-bind-address") }

func (a *App) addrOf(flag string) string {
	for _, ep := range a.served {
		if ep.flag == flag {
			return ep.ln.Addr().String()
		}
	}
	return ""
}

// serve starts serving the endpoints; the function it returns stops them.
func (a *App) serve(log klog.Logger) (stop func(), err error) {
	var guard *authz.Guard
	var tlsConfig *tls.Config
	for _, ep := range a.served {
		if ep.guarded && a.opts.SecureServing && guard == nil {
			if guard, err = authz.New(a.opts.Config, a.opts.Authz); err != nil {
				return nil, err
			}
			if tlsConfig, err = servingTLS(log, a.opts.CertDir); err != nil {
				return nil, err
			}
		}
	}
	var running []*http.Server
	var what []string // of each running server
	// Requests that never end on their own (the live page's event streams)
	// end with this context, so that stopping does not wait for them.
	base, cancel := context.WithCancel(context.Background())
	for _, ep := range a.served {
		srv := httpServer(ep.handler, base, log, defaultLimits)
		serve, scheme, how := srv.Serve, "http://", "plain HTTP"
		if ep.guarded && a.opts.SecureServing {
			srv.Handler = guard.Wrap(ep.handler, ep.paths...)
			srv.TLSConfig = tlsConfig.Clone() // each server adds its protocols to its own
			serve = func(ln net.Listener) error { return srv.ServeTLS(ln, "", "") }
			scheme, how = "https://", "HTTPS, authenticated and authorized by the API server"
		}
		running, what = append(running, srv), append(what, ep.what)
		log.Info("Serving "+ep.what, "address", scheme+ep.ln.Addr().String(), "as", how)
		go func() {
			if err := serve(ep.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error(err, "HTTP server failed", "serving", ep.what)
			}
		}()
	}
	return func() {
		cancel()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for i, srv := range running {
			if err := srv.Shutdown(ctx); err != nil {
				log.Info("Stopped serving with requests still open", "serving", what[i], "err", err)
			}
		}
	}, nil
}

// serverLimits bound what one caller can make a server hold: a connection
// that sends nothing, or a request slowly, or reads a response slowly, or
// idles between requests, is closed within these times (docs/operations.md).
type serverLimits struct {
	readHeader, read, write, idle time.Duration
	maxHeaderBytes, maxStreams    int
}

// defaultLimits are every endpoint's: a Prometheus scrape or a probe is
// one small request, the live page's event stream extends its own
// deadlines (package ui).
var defaultLimits = serverLimits{readHeader: 5 * time.Second, read: 30 * time.Second, write: 30 * time.Second,
	idle: 30 * time.Second, maxHeaderBytes: 64 << 10, maxStreams: 32}

// httpServer is the server of every endpoint; its requests' contexts end
// with base.
func httpServer(h http.Handler, base context.Context, log klog.Logger, l serverLimits) *http.Server {
	return &http.Server{Handler: h,
		ReadHeaderTimeout: l.readHeader, ReadTimeout: l.read, WriteTimeout: l.write, IdleTimeout: l.idle,
		// A bearer token is at most 16 KiB (package authz); net/http adds 4 KiB.
		MaxHeaderBytes: l.maxHeaderBytes,
		// "OPTIONS *" goes to the handler (the guard: 401 with no token),
		// not answered 200 by net/http before it.
		DisableGeneralOptionsHandler: true,
		HTTP2: &http.HTTP2Config{MaxConcurrentStreams: l.maxStreams,
			// The frame reader keeps a buffer the size of the largest
			// frame it read for the connection's life: the protocol's
			// least, so that an idle connection stays small.
			MaxReadFrameSize: 16 << 10,
			// A peer that stops reading, or vanishes, is given up on.
			WriteByteTimeout: l.write, SendPingTimeout: l.idle, PingTimeout: l.readHeader},
		BaseContext: func(net.Listener) context.Context { return base },
		ErrorLog:    httpErrorLog(log)}
}

// httpErrorLog sends net/http's own complaints (a TLS handshake that a port
// check or a plain-HTTP caller broke off) to the log at V(2), not stderr.
func httpErrorLog(log klog.Logger) *stdlog.Logger {
	return stdlog.New(logWriter{log}, "", 0)
}

type logWriter struct{ log klog.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.log.V(2).Info(strings.TrimSpace(string(p)))
	return len(p), nil
}

// closeListeners releases the addresses of an App that could not serve.
func (a *App) closeListeners() {
	for _, ep := range a.served {
		ep.ln.Close()
	}
}
