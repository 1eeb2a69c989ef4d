package app_test

import (
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"rawwatch/app"
	"rawwatch/freshness"
	"rawwatch/internal/testkit"
)

// A New that fails (here: the metrics port is taken) leaves nothing running:
// the event broadcaster it had started is shut down.
func TestFailedNewLeaksNoGoroutine(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	before := runtime.NumGoroutine()
	for range 10 {
		_, err := app.New(app.Options{Config: &rest.Config{Host: "https://127.0.0.1:1"}, MetricsAddr: taken.Addr().String()})
		if err == nil || !strings.Contains(err.Error(), "address already in use") {
			t.Fatalf("New with the metrics port taken: %v, want address already in use", err)
		}
	}
	testkit.Eventually(t, 30*time.Second, func() bool { return runtime.NumGoroutine() <= before },
		"goroutines left behind by ten failed News")
}

// What may not be served: plain HTTP off loopback, and probes sharing the
// secured metrics address (the kubelet has no token). Both fail in New.
func TestServingRefusesWhatWouldBeOpen(t *testing.T) {
	cfg := &rest.Config{Host: "https://127.0.0.1:1"}
	for _, c := range []struct {
		name string
		opts app.Options
		want string
	}{
		{"plain metrics on every interface", app.Options{MetricsAddr: ":0"}, "--metrics-bind-address :0: plain HTTP is served on loopback only"},
		{"plain live page on every interface", app.Options{UIAddr: "0.0.0.0:0"}, "--ui-bind-address 0.0.0.0:0: plain HTTP is served on loopback only"},
		{"secure metrics sharing the probes' address", app.Options{SecureServing: true, MetricsAddr: "127.0.0.1:0", HealthAddr: "127.0.0.1:0"},
			"the health probes need an address of their own"},
	} {
		c.opts.Config = cfg
		_, err := app.New(c.opts)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
	// Plain on loopback, and probes anywhere, are fine.
	for _, opts := range []app.Options{{MetricsAddr: "127.0.0.1:0", UIAddr: "localhost:0", HealthAddr: ":0"}, {SecureServing: true, MetricsAddr: ":0", UIAddr: ":0"}} {
		opts.Config = cfg
		if _, err := app.New(opts); err != nil {
			t.Errorf("%+v: %v", opts, err)
		}
	}
}

// The freshness probe reads its heartbeat from an annotation of its object:
// a cache told to drop that annotation would leave it blind, so New refuses.
func TestTheProbeRefusesACacheThatDropsItsHeartbeat(t *testing.T) {
	_, err := app.New(app.Options{Config: &rest.Config{Host: "https://127.0.0.1:1"}, Namespace: "ns",
		FreshnessProbe: time.Second, CacheDropAnnotations: []string{"a", freshness.Annotation}})
	if err == nil || !strings.Contains(err.Error(), freshness.Annotation) {
		t.Fatalf("New: %v, want an error naming %s", err, freshness.Annotation)
	}
}
