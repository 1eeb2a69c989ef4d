// Package health answers the probes a kubelet sends, in kube-apiserver's
// format so that `curl :8081/readyz?verbose` reads like it does there:
//
//	[+]ping ok
//	[-]synced failed: waiting for the first list
//	readyz check failed
//
// A Checks is a named list of checks for one endpoint. The controller has three:
//
//   - /healthz, liveness: is the process working, or should the kubelet
//     restart it? It must not fail because the API server is down (a restart
//     would not help, and would restart every replica at once); it fails when
//     a leader has stopped renewing its lease without noticing (a deadlock).
//   - /readyz, readiness: has the first list completed, so that the cache is
//     a faithful copy of the cluster? A standby replica is ready too: it is
//     doing its job (keeping a warm cache), and a rollout must not wait on it.
//   - /leaderz: 200 on the replica that holds the lease, 503 on standbys.
//
// GET /NAME runs every check, /NAME?verbose lists them even when all pass,
// /NAME?exclude=CHECK skips one, and /NAME/CHECK runs one.
//
// The probes need no token, so they say only "ok" or why not: a passing
// check says "ok" and nothing else (what a replica works on, how much it
// holds and who its peers are are guarded metrics).
package health

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
)

// Checks is a set of named checks served as one endpoint. The zero value is
// ready to use; Add may be called while it is being served.
type Checks struct {
	mu     sync.RWMutex
	checks []check
}

type check struct {
	name string
	fn   func() error
}

// Add registers a check: fn returns nil when all is well, or an error saying
// what is wrong.
func (c *Checks) Add(name string, fn func() error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.checks = append(c.checks, check{name: name, fn: fn})
}

// Handler serves the checks under /endpoint and /endpoint/CHECK.
func (c *Checks) Handler(endpoint string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.serve(w, r, endpoint)
	})
}

// Mount registers the handler on mux at /endpoint and /endpoint/.
func (c *Checks) Mount(mux *http.ServeMux, endpoint string) {
	h := c.Handler(endpoint)
	mux.Handle("/"+endpoint, h)
	mux.Handle("/"+endpoint+"/", h)
}

func (c *Checks) serve(w http.ResponseWriter, r *http.Request, endpoint string) {
	c.mu.RLock()
	checks := append([]check(nil), c.checks...)
	c.mu.RUnlock()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")

	if one := strings.TrimPrefix(strings.TrimPrefix(r.URL.Path, "/"+endpoint), "/"); one != "" {
		for _, ch := range checks {
			if ch.name == one {
				if err := ch.fn(); err != nil {
					http.Error(w, fmt.Sprintf("%s check failed: %v", one, err), http.StatusServiceUnavailable)
					return
				}
				fmt.Fprintln(w, "ok")
				return
			}
		}
		http.Error(w, fmt.Sprintf("no %s check named %q", endpoint, one), http.StatusNotFound)
		return
	}

	excluded := map[string]bool{}
	for _, name := range r.URL.Query()["exclude"] {
		excluded[name] = true
	}
	var out strings.Builder
	failed := false
	for _, ch := range checks {
		if excluded[ch.name] {
			fmt.Fprintf(&out, "[+]%s excluded: ok\n", ch.name)
			continue
		}
		if err := ch.fn(); err != nil {
			failed = true
			fmt.Fprintf(&out, "[-]%s failed: %v\n", ch.name, err)
		} else {
			fmt.Fprintf(&out, "[+]%s ok\n", ch.name)
		}
	}
	_, verbose := r.URL.Query()["verbose"]
	switch {
	case failed:
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "%s%s check failed\n", out.String(), endpoint)
	case verbose:
		fmt.Fprintf(w, "%s%s check passed\n", out.String(), endpoint)
	default:
		fmt.Fprintln(w, "ok")
	}
}
