package metrics

import (
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"rawwatch/freshness"
	"rawwatch/leader"
	"rawwatch/queue"
	"rawwatch/reconcile"
	"rawwatch/watcher"
)

// Feeding the observer methods what the watcher, queue and workers would
// report moves exactly the metrics that describe them.
func TestObserverCallsMoveTheirMetrics(t *testing.T) {
	depth := 3
	m := New(Options{Version: "v9", QueueDepth: func() int { return depth }, StoreObjects: func() int { return 7 }})

	// First list: two pages, then a watch with events, a bookmark, a restart.
	m.Observe(watcher.ListPage{Page: 1, Items: 100, Continue: "token", RV: ""})
	m.Observe(watcher.ListPage{Page: 2, Items: 20, Continue: "", RV: "41"})
	m.Observe(watcher.Replaced{RV: "41", Size: 120, Added: 120, Updated: 0, Deleted: 0})
	m.Observe(watcher.StateChanged{From: watcher.Listing, To: watcher.Watching, Reason: "listed"})
	m.Observe(watcher.WatchStarted{RV: "41", Timeout: time.Minute, InitialEvents: false})
	m.Observe(watcher.Received{Type: watcher.Added, Key: "ns/a", RV: "42"})
	m.Observe(watcher.Received{Type: watcher.Modified, Key: "ns/a", RV: "43"})
	m.Observe(watcher.Received{Type: watcher.Modified, Key: "ns/a", RV: "44"})
	m.Observe(watcher.BookmarkReceived{RV: "50", InitialEventsEnd: false})
	m.Observe(watcher.WatchEnded{Frames: 4, Open: time.Minute, Err: nil})
	m.Observe(watcher.StateChanged{From: watcher.Watching, To: watcher.Watching, Reason: "re-watch"})
	// A 410: relist that found one object gone.
	m.Observe(watcher.StateChanged{From: watcher.Watching, To: watcher.Relisting, Reason: "expired"})
	m.Observe(watcher.Replaced{RV: "60", Size: 119, Added: 0, Updated: 1, Deleted: 1})
	m.Observe(watcher.BackoffStarted{Delay: time.Second, Class: watcher.Transient})
	m.Observe(watcher.Skipped{Err: &watcher.SkipError{Key: "ns/bad"}})
	m.Observe(watcher.WatchEnded{Frames: 0, Open: 150 * time.Second, Err: watcher.ErrSilent})

	expectValues(t, map[string]gotWant{
		"list pages":      {testutil.ToFloat64(m.listPages), 2},
		"lists":           {testutil.ToFloat64(m.lists), 2},
		"relists":         {testutil.ToFloat64(m.relists), 1},
		"relist deletes":  {testutil.ToFloat64(m.relistDeltas.WithLabelValues("Deleted")), 1},
		"relist adds":     {testutil.ToFloat64(m.relistDeltas.WithLabelValues("Added")), 0},
		"watches":         {testutil.ToFloat64(m.watches), 1},
		"restarts":        {testutil.ToFloat64(m.restarts), 1},
		"ADDED":           {testutil.ToFloat64(m.events.WithLabelValues("ADDED")), 1},
		"MODIFIED":        {testutil.ToFloat64(m.events.WithLabelValues("MODIFIED")), 2},
		"bookmarks":       {testutil.ToFloat64(m.bookmarks), 1},
		"resourceVersion": {testutil.ToFloat64(m.resourceVersion), 60},
		"state Relisting": {testutil.ToFloat64(m.state.WithLabelValues("Relisting")), 1},
		"state Watching":  {testutil.ToFloat64(m.state.WithLabelValues("Watching")), 0},
		"backoffs":        {testutil.ToFloat64(m.backoffs.WithLabelValues("transient")), 1},
		"skipped":         {testutil.ToFloat64(m.skipped), 1},
		"silent watches":  {testutil.ToFloat64(m.silentWatches), 1},
	})

	// The queue and the workers: adds (one deduped), a wait, three reconciles.
	m.Observe(queue.Added{Key: "ns/a", Deduped: false})
	m.Observe(queue.Added{Key: "ns/a", Deduped: true})
	m.Observe(queue.Got{Key: "ns/a", Waited: 2 * time.Millisecond})
	m.Observe(reconcile.Started{Worker: 0, Key: "ns/a"})
	m.Observe(reconcile.Finished{Worker: 0, Key: "ns/a", Took: time.Millisecond, Err: nil, RetryIn: 0})
	m.Observe(reconcile.Started{Worker: 1, Key: "ns/b"})
	m.Observe(reconcile.Finished{Worker: 1, Key: "ns/b", Took: time.Millisecond, Err: errors.New("boom"), RetryIn: 10 * time.Millisecond})
	conflict := apierrors.NewConflict(schema.GroupResource{Resource: "myresources"}, "c", errors.New("stale"))
	m.Observe(reconcile.Started{Worker: 0, Key: "ns/c"})
	m.Observe(reconcile.Finished{Worker: 0, Key: "ns/c", Took: time.Millisecond, Err: conflict, RetryIn: 5 * time.Millisecond})
	m.Observe(leader.Leading{Identity: "me", Leading: true})

	expectValues(t, map[string]gotWant{
		"adds":      {testutil.ToFloat64(m.adds), 1},
		"deduped":   {testutil.ToFloat64(m.dedupedAdds), 1},
		"retries":   {testutil.ToFloat64(m.retries), 2},
		"success":   {testutil.ToFloat64(m.reconciles.WithLabelValues("success")), 1},
		"error":     {testutil.ToFloat64(m.reconciles.WithLabelValues("error")), 1},
		"conflict":  {testutil.ToFloat64(m.reconciles.WithLabelValues("conflict")), 1},
		"errors":    {testutil.ToFloat64(m.reconcileErrors), 2},
		"leader":    {testutil.ToFloat64(m.leader), 1},
		"histogram": {float64(testutil.CollectAndCount(m.reconcileDuration)), 3}, // one series per result
	})

	// The exposition: client-go's workqueue names with name="myresources",
	// gauges read at scrape time, histograms with their counts.
	depth = 5
	text := scrape(t, m)
	for _, want := range []string{
		`workqueue_depth{name="myresources"} 5`,
		`workqueue_adds_total{name="myresources"} 1`,
		`workqueue_queue_duration_seconds_count{name="myresources"} 1`,
		`workqueue_work_duration_seconds_count{name="myresources"} 3`,
		`workqueue_retries_total{name="myresources"} 2`,
		`workqueue_longest_running_processor_seconds{name="myresources"} 0`,
		`rawwatch_reconcile_duration_seconds_count{result="error"} 1`,
		`rawwatch_store_objects 7`,
		`rawwatch_resource_version 60`,
		`rawwatch_build_info{go_version="go`,
		`go_goroutines `,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(text, "rawwatch_queue_delayed") {
		t.Error("a gauge without a source must be left out")
	}
}

// A reconcile in progress shows in the unfinished-work gauges until it ends.
func TestUnfinishedWork(t *testing.T) {
	m := New(Options{})
	now := time.Unix(1000, 0)
	m.now = func() time.Time { return now }
	m.Observe(reconcile.Started{Worker: 0, Key: "ns/a"})
	now = now.Add(3 * time.Second)
	m.Observe(reconcile.Started{Worker: 1, Key: "ns/b"})
	now = now.Add(time.Second)
	if sum, longest := m.inFlight(); sum != 5 || longest != 4 {
		t.Fatalf("in flight: sum %v longest %v, want 5 and 4", sum, longest)
	}
	m.Observe(reconcile.Finished{Worker: 0, Key: "ns/a", Took: 4 * time.Second, Err: nil, RetryIn: 0})
	m.Observe(reconcile.Finished{Worker: 1, Key: "ns/b", Took: time.Second, Err: nil, RetryIn: 0})
	if sum, longest := m.inFlight(); sum != 0 || longest != 0 {
		t.Fatalf("after Finished: sum %v longest %v", sum, longest)
	}
}

// Two Metrics do not share a registry (two controllers in one process).
func TestRegistriesAreSeparate(t *testing.T) {
	a, b := New(Options{}), New(Options{})
	a.Observe(queue.Added{Key: "k"})
	if testutil.ToFloat64(b.adds) != 0 || !strings.Contains(scrape(t, a), `workqueue_adds_total{name="myresources"} 1`) {
		t.Fatal("metrics leaked between registries")
	}
}

func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Result().Body)
	if rec.Code != 200 {
		t.Fatalf("/metrics: %d %s", rec.Code, body)
	}
	return string(body)
}

// The freshness measures: silence grows with the clock and drops to zero
// on any frame; the delivery lag is arrival minus the object's write time;
// probe stages and writes land in their series.
func TestFreshnessMetrics(t *testing.T) {
	clock := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	m := New(Options{})
	m.now = func() time.Time { return clock }
	m.heard.Store(clock.UnixNano())
	silence := func() float64 {
		t.Helper()
		return gather(t, m, "rawwatch_watch_silence_seconds")
	}
	clock = clock.Add(90 * time.Second)
	if s := silence(); s != 90 {
		t.Errorf("silence after 90 s of nothing = %v", s)
	}
	m.Observe(watcher.BookmarkReceived{RV: "5"})
	if s := silence(); s != 0 {
		t.Errorf("silence after a bookmark = %v", s)
	}
	clock = clock.Add(3 * time.Second)
	m.Observe(watcher.Received{Type: watcher.Modified, Key: "ns/a", RV: "6", Arrived: clock, Written: clock.Add(-2 * time.Second)})
	m.Observe(watcher.Received{Type: watcher.Deleted, Key: "ns/a", RV: "7", Arrived: clock})
	if s := silence(); s != 0 {
		t.Errorf("silence after an event = %v", s)
	}
	if n, sum := histogram(t, m, "rawwatch_watch_event_delivery_lag_seconds"); n != 1 || sum != 2 {
		t.Errorf("delivery lag: %d observations summing %v s, want one of 2 s (DELETED carries no write time)", n, sum)
	}
	m.Observe(freshness.Measured{Stage: freshness.Store, Took: 30 * time.Millisecond})
	m.Observe(freshness.Beat{})
	m.Observe(freshness.Beat{Err: errors.New("500")})
	if got := testutil.ToFloat64(m.probeWrites.WithLabelValues("error")); got != 1 {
		t.Errorf("failed heartbeats = %v", got)
	}
	if n := testutil.CollectAndCount(m.probeStages); n != 1 {
		t.Errorf("%d probe stage series, want 1 (store)", n)
	}
}

// gather reads one gauge's value from the registry.
func gather(t *testing.T, m *Metrics, name string) float64 {
	t.Helper()
	return series(t, m, name).GetGauge().GetValue()
}

// histogram reads one unlabelled histogram's count and sum.
func histogram(t *testing.T, m *Metrics, name string) (uint64, float64) {
	t.Helper()
	h := series(t, m, name).GetHistogram()
	return h.GetSampleCount(), h.GetSampleSum()
}

// series reads the first series of the metric name from the registry.
func series(t *testing.T, m *Metrics, name string) *dto.Metric {
	t.Helper()
	fams, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return f.GetMetric()[0]
		}
	}
	t.Fatalf("no %s", name)
	return nil
}

// gotWant is a metric's value and the value it should have.
type gotWant struct{ got, want float64 }

// expectValues reports each metric whose value is not the one wanted.
func expectValues(t *testing.T, checks map[string]gotWant) {
	t.Helper()
	for name, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", name, c.got, c.want)
		}
	}
}
