package controlplane

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"
)

// Shared is one control plane for a whole test binary, started on first use:
//
//	var cp = &controlplane.Shared{}
//
//	func TestMain(m *testing.M) { cp.Main(m) }
//
//	func TestSomething(t *testing.T) { c := cp.Get(t); ... }
//
// Tests that run no server (unit tests) never start it, and under -short the
// tests that would are skipped.
type Shared struct {
	Options Options

	once sync.Once
	cp   *ControlPlane
	err  error

	uncachedOnce sync.Once
	uncached     *APIServer
	uncachedErr  error
}

// Get returns the running control plane, starting it if needed; it fails the
// test if the control plane cannot start. Under -short (make unit) it skips
// the test instead: every test that needs a server is not a unit test.
func (s *Shared) Get(t testing.TB) *ControlPlane {
	t.Helper()
	if testing.Short() {
		t.Skip("needs the local control plane (etcd + kube-apiserver); skipped with -short")
	}
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		opts := s.Options
		if opts.Logf == nil {
			opts.Logf = t.Logf
		}
		s.cp, s.err = Start(ctx, opts)
	})
	if s.err != nil {
		t.Fatalf("starting the local control plane: %v", s.err)
	}
	return s.cp
}

// Uncached returns a second apiserver on the same etcd with its watch cache
// off (started on first use): there, a WATCH or paginated LIST at a
// resourceVersion older than etcd's last compaction gets a real 410 Gone.
func (s *Shared) Uncached(t testing.TB) *APIServer {
	t.Helper()
	cp := s.Get(t)
	s.uncachedOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		s.uncached, s.uncachedErr = cp.AddAPIServer(ctx, "apiserver-nocache", "--watch-cache=false")
	})
	if s.uncachedErr != nil {
		t.Fatalf("starting an apiserver without watch cache: %v", s.uncachedErr)
	}
	return s.uncached
}

// Main is a TestMain: it runs the tests, stops the control plane if one was
// started, and exits with the tests' code.
func (s *Shared) Main(m *testing.M) {
	code := m.Run()
	s.Stop()
	os.Exit(code)
}

// Stop stops the control plane if it was started.
func (s *Shared) Stop() {
	if s.cp != nil {
		s.cp.Stop()
	}
}
