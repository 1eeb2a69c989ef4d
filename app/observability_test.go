package app_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"rawwatch/api/v1alpha1"
	"rawwatch/app"
	"rawwatch/freshness"
	"rawwatch/internal/testkit"
	"rawwatch/observe"
	"rawwatch/reconcile/myresource"
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
	cp, ns, c := testkit.Parallel(t)
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
		testkit.Create(t, c, ns, fmt.Sprintf("m-%d", i), "hi")
	}
	testkit.Create(t, c, ns, "broken", myresource.FailMessage)
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

// The freshness measures on a controller at work against the real server:
// the probe's heartbeats reach every stage, in order, each measured once per
// heartbeat; the silence gauge stays low while heartbeats flow; the delivery
// lag sees the probe's own events.
func TestFreshnessProbe(t *testing.T) {
	cp, ns, c := testkit.Parallel(t)
	var mu sync.Mutex
	took := map[time.Time]map[freshness.Stage][]time.Duration{} // heartbeat → stage → measures
	a, _, _ := startAppWith(t, app.Options{Config: cp.Config(), Namespace: ns,
		MetricsAddr: "127.0.0.1:0", FreshnessProbe: 200 * time.Millisecond,
		Observer: observe.Func(func(e observe.Event) {
			if r, ok := e.(watcher.Received); ok && r.Key == ns+"/"+freshness.DefaultName && r.Object != nil {
				// The server's write time, read before the store dropped
				// managedFields: whole seconds, so it is no earlier than
				// the heartbeat's own time truncated to the second, and
				// no later than the event's arrival (one clock here). The
				// object's creation time instead would be the first
				// heartbeat's, older and older. (How late is load.)
				beat, err := time.Parse(time.RFC3339Nano, r.Object.GetAnnotations()[freshness.Annotation])
				if err == nil && (r.Written.Before(beat.Truncate(time.Second)) || r.Written.After(r.Arrived)) {
					t.Errorf("%s %s: write time %v, heartbeat %v, arrived %v", r.Type, r.Key, r.Written, beat, r.Arrived)
				}
			}
			if m, ok := e.(freshness.Measured); ok {
				mu.Lock()
				if took[m.Written] == nil {
					took[m.Written] = map[freshness.Stage][]time.Duration{}
				}
				took[m.Written][m.Stage] = append(took[m.Written][m.Stage], m.Took)
				mu.Unlock()
			}
		})})
	url := "http://" + a.MetricsAddr() + "/metrics"
	var m map[string]float64
	testkit.Eventually(t, time.Minute, func() bool {
		m = testkit.Scrape(t, url)
		return m[`rawwatch_freshness_probe_seconds_count{stage="reconcile"}`] >= 15
	}, "fewer than 15 heartbeats reconciled")
	obj, err := c.Get(context.Background(), ns, freshness.DefaultName)
	if err != nil || obj.Annotations[freshness.Annotation] == "" {
		t.Fatalf("the probe's object: %v, %v", obj, err)
	}
	mu.Lock()
	defer mu.Unlock()
	reconciled := 0
	for written, stages := range took {
		ev, st, rec := stages[freshness.Event], stages[freshness.Store], stages[freshness.Reconcile]
		if len(ev) != 1 || len(st) != 1 || len(rec) > 1 {
			t.Errorf("heartbeat %v measured %d, %d, %d times at event, store, reconcile: want once each", written, len(ev), len(st), len(rec))
			continue
		}
		if !(0 < ev[0] && ev[0] <= st[0]) || len(rec) == 1 && rec[0] < st[0] {
			t.Errorf("heartbeat %v: stages out of order: event %v, store %v, reconcile %v", written, ev, st, rec)
		}
		if len(rec) == 1 {
			reconciled++
			t.Logf("heartbeat: write to event %v, to store %v, to reconcile %v", ev[0], st[0], rec[0])
		}
	}
	if float64(reconciled) < m[`rawwatch_freshness_probe_seconds_count{stage="reconcile"}`] {
		t.Errorf("%d heartbeats reconciled, the metric says %v", reconciled, m[`rawwatch_freshness_probe_seconds_count{stage="reconcile"}`])
	}
	// (Scraped again: the probe went on writing while the heartbeats were
	// counted, and each was written before it was reconciled. But the probe
	// counts a write once its PATCH has returned, and the watch may bring
	// the heartbeat, and a worker reconcile it, before that: one write, the
	// probe's only one in flight, may be reconciled and not yet counted.)
	if ok := testkit.Scrape(t, url)[`rawwatch_freshness_probe_writes_total{result="ok"}`]; ok < float64(reconciled-1) {
		t.Errorf("%v heartbeats written, %d reconciled", ok, reconciled)
	}
	if s := m["rawwatch_watch_silence_seconds"]; s > 10 { // 0.2 s, unless the machine is busy
		t.Errorf("silence %v s while heartbeats flow every 200 ms", s)
	}
	if m["rawwatch_watch_event_delivery_lag_seconds_count"] < 5 {
		t.Errorf("delivery lag observed %v times, want one per heartbeat event", m["rawwatch_watch_event_delivery_lag_seconds_count"])
	}
}
