package app_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"rawwatch/api/v1alpha1"
	"rawwatch/internal/app"
	"rawwatch/internal/testkit"
	"rawwatch/reconcile"
	"rawwatch/watcher"
)

const adds = `workqueue_adds_total{name="myresources"}`

// Before the first list the controller is alive but not ready: /healthz says
// ok (restarting would not bring an unreachable server back), /readyz says
// why not. Metrics and probes can share one address.
func TestProbesBeforeTheFirstList(t *testing.T) {
	t.Parallel()
	a, err := app.New(app.Options{
		Config:      &rest.Config{Host: "https://127.0.0.1:1"}, // nobody listens there
		MetricsAddr: "127.0.0.1:0",
		HealthAddr:  "127.0.0.1:0",
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- a.Run(ctx) }()
	defer func() { cancel(); <-done }()

	base := "http://" + a.HealthAddr()
	testkit.Eventually(t, 10*time.Second, func() bool { code, _ := testkit.HTTPGet(base + "/healthz"); return code == 200 }, "/healthz never answered 200")
	if code, body := testkit.HTTPGet(base + "/readyz"); code != 503 || !strings.Contains(body, "[-]synced failed: waiting for the first list") {
		t.Errorf("/readyz = %d %q, want 503 waiting for the first list", code, body)
	}
	if code, _ := testkit.HTTPGet(base + "/leaderz"); code != 200 {
		t.Errorf("/leaderz = %d without leader election, want 200", code)
	}
	m := testkit.Scrape(t, "http://"+a.MetricsAddr()+"/metrics")
	if m[`rawwatch_watcher_state{state="Listing"}`]+m[`rawwatch_watcher_state{state="BackingOff"}`] != 1 || m["rawwatch_lists_total"] != 0 {
		t.Errorf("before any list: state %v, lists %v", m, m["rawwatch_lists_total"])
	}
	// Binding a port already in use fails in New, with a clear error.
	if _, err := app.New(app.Options{Config: &rest.Config{Host: "https://127.0.0.1:1"}, HealthAddr: a.HealthAddr()}); err == nil ||
		!strings.Contains(err.Error(), "serving health probes") {
		t.Errorf("second app on the same port: %v", err)
	}
}

// Scraping a controller at work: the metrics move with what it does.
func TestMetricsMoveWithTheWork(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	ns := testkit.Namespace(t, cp.Config())
	c := testkit.Client(t, cp.Config())
	ctx := context.Background()
	a, _, _ := startAppWith(t, app.Options{Config: cp.Config(), Namespace: ns, Workers: 2, RetryBase: 20 * time.Millisecond,
		MetricsAddr: "127.0.0.1:0", HealthAddr: "127.0.0.1:0",
		// The server ends each watch after a second: re-watches to count.
		Watch: watcher.Options[app.Object]{WatchTimeoutMin: time.Second, WatchTimeoutMax: time.Second},
	})
	url := "http://" + a.MetricsAddr() + "/metrics"
	if code, body := testkit.HTTPGet("http://" + a.HealthAddr() + "/readyz?verbose"); code != 200 || !strings.Contains(body, "[+]synced ok") {
		t.Fatalf("/readyz after sync = %d %q", code, body)
	}
	before := testkit.Scrape(t, url)

	for i := range 3 {
		if _, err := c.Create(ctx, testkit.New(ns, fmt.Sprintf("m-%d", i), "hi")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Create(ctx, testkit.New(ns, "broken", reconcile.FailMessage)); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		waitStatus(t, c, ns, fmt.Sprintf("m-%d", i), func(o *v1alpha1.MyResource) bool { return o.Status.Phase == v1alpha1.PhaseProcessed }, "want Processed")
	}
	var after map[string]float64
	testkit.Eventually(t, 20*time.Second, func() bool {
		after = testkit.Scrape(t, url)
		return after["workqueue_retries_total{name=\"myresources\"}"] >= 3 && after["rawwatch_watch_restarts_total"] >= 1
	}, "no retries of the failing object, or no re-watch")

	moved := func(series string, atLeast float64) {
		t.Helper()
		if d := after[series] - before[series]; d < atLeast {
			t.Errorf("%s moved by %v, want at least %v (before %v, after %v)", series, d, atLeast, before[series], after[series])
		}
	}
	moved(`rawwatch_watch_events_total{type="ADDED"}`, 4)
	moved(`rawwatch_watch_events_total{type="MODIFIED"}`, 4) // our own status writes come back
	moved(adds, 4)
	moved(`workqueue_queue_duration_seconds_count{name="myresources"}`, 4)
	moved(`workqueue_work_duration_seconds_count{name="myresources"}`, 4)
	moved(`rawwatch_reconcile_total{result="success"}`, 3)
	moved(`rawwatch_reconcile_total{result="error"}`, 3)
	moved(`rawwatch_reconcile_duration_seconds_count{result="success"}`, 3)
	moved("rawwatch_reconcile_errors_total", 3)
	moved("rawwatch_watch_requests_total", 1)
	moved("rawwatch_resource_version", 4)
	for series, want := range map[string]float64{
		"rawwatch_lists_total":                     1,
		"rawwatch_relists_total":                   0,
		"rawwatch_store_objects":                   4,
		"rawwatch_leader":                          1,
		`rawwatch_watcher_state{state="Watching"}`: 1,
	} {
		if after[series] != want {
			t.Errorf("%s = %v, want %v", series, after[series], want)
		}
	}
}
