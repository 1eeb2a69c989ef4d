package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"k8s.io/klog/v2"
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
	if a.Elector == nil {
		a.Leadership.Add("leader", func() error { return nil })
		return
	}
	a.Liveness.Add("leader-election", a.Elector.Check)
	a.Leadership.Add("leader", func() error {
		if a.Elector.IsLeader() {
			return nil
		}
		if holder := a.Elector.Leader(); holder != "" {
			return fmt.Errorf("standby: the lease is held by %s", holder)
		}
		return errors.New("standby: no leader observed yet")
	})
}

// uiHandler serves the live page on /ui/ (and sends / there).
func (a *App) uiHandler() http.Handler {
	if a.UI == nil {
		return nil
	}
	m := http.NewServeMux()
	m.Handle("/ui/", a.UI.Handler("/ui/"))
	m.Handle("/{$}", http.RedirectHandler("/ui/", http.StatusFound))
	return m
}

// handlers are the endpoints, by the address that serves them.
func (a *App) handlers() (metrics, probes http.Handler) {
	m := http.NewServeMux()
	m.Handle("/metrics", a.Metrics.Handler())
	p := http.NewServeMux()
	a.Liveness.Mount(p, "healthz")
	a.Readiness.Mount(p, "readyz")
	a.Leadership.Mount(p, "leaderz")
	return m, p
}

// MetricsAddr is the address /metrics is served on ("" when off).
func (a *App) MetricsAddr() string { return addrOf(a.servers.metrics) }

// HealthAddr is the address the probes are served on ("" when off).
func (a *App) HealthAddr() string {
	if a.servers.probes == nil && a.servers.shared {
		return addrOf(a.servers.metrics)
	}
	return addrOf(a.servers.probes)
}

// UIAddr is the address the live page is served on ("" when off).
func (a *App) UIAddr() string { return addrOf(a.servers.ui) }

func addrOf(ln net.Listener) string {
	if ln == nil {
		return ""
	}
	return ln.Addr().String()
}

// servers are the bound listeners; one serves both when the addresses match.
type servers struct {
	metrics, probes, ui net.Listener
	shared              bool
}

func listen(metricsAddr, healthAddr, uiAddr string) (s servers, err error) {
	off := func(addr string) bool { return addr == "" || addr == "0" }
	if !off(uiAddr) {
		if s.ui, err = net.Listen("tcp", uiAddr); err != nil {
			return s, fmt.Errorf("serving the live page: %w", err)
		}
		defer func() {
			if err != nil {
				s.ui.Close()
			}
		}()
	}
	if !off(metricsAddr) {
		if s.metrics, err = net.Listen("tcp", metricsAddr); err != nil {
			return s, fmt.Errorf("serving metrics: %w", err)
		}
	}
	if off(healthAddr) {
		return s, nil
	}
	if healthAddr == metricsAddr {
		s.shared = true
		return s, nil
	}
	if s.probes, err = net.Listen("tcp", healthAddr); err != nil {
		if s.metrics != nil {
			s.metrics.Close()
		}
		return s, fmt.Errorf("serving health probes: %w", err)
	}
	return s, nil
}

// serve starts serving; the function it returns stops the servers.
func (s servers) serve(log klog.Logger, metrics, probes, ui http.Handler) (stop func()) {
	var running []*http.Server
	// Requests that never end on their own (the live page's event streams)
	// end with this context, so that stopping does not wait for them.
	base, cancel := context.WithCancel(context.Background())
	start := func(ln net.Listener, h http.Handler, what string) {
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second,
			BaseContext: func(net.Listener) context.Context { return base }}
		running = append(running, srv)
		log.Info("Serving "+what, "address", "http://"+ln.Addr().String())
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error(err, "HTTP server failed", "serving", what)
			}
		}()
	}
	if s.metrics != nil {
		h, what := metrics, "metrics (/metrics)"
		if s.shared {
			mux := http.NewServeMux()
			mux.Handle("/metrics", metrics)
			mux.Handle("/", probes)
			h, what = mux, "metrics and probes (/metrics, /healthz, /readyz, /leaderz)"
		}
		start(s.metrics, h, what)
	}
	if s.probes != nil {
		start(s.probes, probes, "probes (/healthz, /readyz, /leaderz)")
	}
	if s.ui != nil {
		start(s.ui, ui, "the live page (/ui/)")
	}
	return func() {
		cancel()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, srv := range running {
			_ = srv.Shutdown(ctx)
		}
	}
}
