package compare

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// The update phase of a harness run is bounded by how fast the apiserver
// accepts writes (a few hundred to a thousand per second on two cores), so
// every consumer keeps up and their events/s are equal; and its delivery
// latencies are mostly the apiserver's and the scheduler's. These
// benchmarks measure the consumers alone, against a fake apiserver that
// replays a pre-encoded WATCH stream of MODIFIED events (replayData: objects
// shaped as a real server sends them):
//
//   - BenchmarkDelivery: as fast as the consumer reads it, from the moment
//     the WATCH's frames go out to the last handler call: events/s, the
//     process's CPU time per event (the replay server's writes included,
//     the same for every row) and its allocations per event;
//
//   - BenchmarkDeliveryLatency: one event every 500 µs; each event's latency
//     runs from the moment its frame was written to the moment the
//     consumer's handler was called (p50 and p99, µs).
//
//     go test -run '^$' -bench 'Delivery$' -benchtime 4x ./compare
//
// BenchmarkDelivery's rows are DeliveryRows: "lines" reads the WATCH's
// lines and nothing else, the ceiling; the others are consumers.
// RenderDelivery turns its output into the table of docs/benchmarks.md.
func BenchmarkDelivery(b *testing.B) {
	quiet(b)
	const objects, events = 1000, 20000
	list, frames := replayData(objects, events)
	for _, kind := range DeliveryRows {
		b.Run(kind, func(b *testing.B) {
			g := &gate{}
			srv := httptest.NewServer(replayServer(list, frames, 0, nil, g))
			defer srv.Close()
			cfg := &rest.Config{Host: srv.URL, QPS: -1}
			var m measured
			for b.Loop() {
				if kind == "lines" {
					w := m.begin(time.Now())
					readLines(b, srv.URL, events)
					m.end(w)
					continue
				}
				c, start, stop := replayTo(b, kind, cfg, g, ConsumerConfig{})
				w := m.begin(start)
				waitUpdates(b, c, start, events, kind)
				m.end(w)
				stop()
			}
			m.report(b, events*b.N)
		})
	}
}

// quiet discards klog's output for b: go test prints the benchmark's lines
// and its stderr to one stream, where controller-runtime's log lines would
// cut them.
func quiet(b *testing.B) {
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	b.Cleanup(func() { klog.LogToStderr(true) })
}

// measured adds up a benchmark's windows: wall time, the process's CPU
// time and its allocations.
type measured struct {
	wall    time.Duration
	cpu     float64 // s
	mallocs uint64
}

type span struct {
	start   time.Time
	cpu     float64
	mallocs uint64
}

func (m *measured) begin(start time.Time) span {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return span{start: start, cpu: processCPU(), mallocs: ms.Mallocs}
}

func (m *measured) end(w span) {
	m.wall += time.Since(w.start)
	m.cpu += processCPU() - w.cpu
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m.mallocs += ms.Mallocs - w.mallocs
}

// report reports events/s, cpu-µs/event, allocs/event and the load
// average at the end (the machine's, not the benchmark's).
func (m *measured) report(b *testing.B, events int) {
	n := float64(events)
	b.ReportMetric(n/m.wall.Seconds(), "events/s")
	b.ReportMetric(m.cpu/n*1e6, "cpu-µs/event")
	b.ReportMetric(float64(m.mallocs)/n, "allocs/event")
	b.ReportMetric(loadAverage(), "load")
	b.ReportMetric(0, "ns/op")
}

// readLines opens the WATCH and reads events lines of it, checking nothing.
func readLines(b *testing.B, url string, events int) {
	resp, err := http.Get(url + "/apis/example.com/v1alpha1/namespaces/bench/myresources?watch=true")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReaderSize(resp.Body, 64<<10)
	for n := 0; n < events; n++ {
		if _, err := r.ReadSlice('\n'); err != nil {
			b.Fatalf("line %d: %v", n, err)
		}
	}
}

func BenchmarkDeliveryLatency(b *testing.B) {
	quiet(b)
	const objects, events = 1000, 4000
	const every = 500 * time.Microsecond
	list, frames := replayData(objects, events)
	for _, kind := range []string{KindRaw, KindInformerFastDecode, KindInformerStripped, KindInformerList, KindControllerRuntime, KindBare} {
		b.Run(kind, func(b *testing.B) {
			var all []float64
			for b.Loop() {
				sent := make([]atomic.Int64, events)
				g := &gate{}
				srv := httptest.NewServer(replayServer(list, frames[:events], every, sent, g))
				var mu sync.Mutex
				var lat []float64
				deliver(b, kind, &rest.Config{Host: srv.URL, QPS: -1}, g, events, func(typ byte, rv, _ string, at int64) {
					i, _ := strconv.Atoi(rv)
					if typ != EvUpdate || i < 2 || i-2 >= events {
						return
					}
					mu.Lock()
					lat = append(lat, float64(at-sent[i-2].Load())/1e3)
					mu.Unlock()
				})
				srv.Close()
				all = append(all, lat...)
			}
			s := stats(all)
			b.ReportMetric(s.P50, "p50-µs")
			b.ReportMetric(s.P99, "p99-µs")
			b.ReportMetric(loadAverage(), "load")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// deliver runs one consumer against the replay server until it has handled
// every event, and returns how long the events took: from the consumer's
// sync, when g lets the WATCH's frames go, to its last handler call.
func deliver(b testing.TB, kind string, cfg *rest.Config, g *gate, events int, onEvent ...func(typ byte, rv, key string, at int64)) time.Duration {
	var cc ConsumerConfig
	if len(onEvent) > 0 {
		cc.OnEvent = onEvent[0]
	}
	c, start, stop := replayTo(b, kind, cfg, g, cc)
	defer stop()
	waitUpdates(b, c, start, events, kind)
	return time.Since(start)
}

// waitUpdates waits until c has handled events updates, failing tb (with
// name) if that takes more than a minute from start.
func waitUpdates(tb testing.TB, c *Consumer, start time.Time, events int, name string) {
	for deadline := start.Add(time.Minute); c.Events().Updates < int64(events); time.Sleep(100 * time.Microsecond) {
		if time.Now().After(deadline) {
			tb.Fatalf("%s: %d of %d events after a minute", name, c.Events().Updates, events)
		}
	}
}

// replayTo starts a consumer of kind on the replay server at cfg, waits for
// its initial sync and opens g: the WATCH's frames go out from start on.
// stop stops the consumer and waits for it.
func replayTo(tb testing.TB, kind string, cfg *rest.Config, g *gate, cc ConsumerConfig) (c *Consumer, start time.Time, stop func()) {
	g.close()
	c, err := NewConsumer(kind, cfg, "bench", cc)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	synced, done := make(chan struct{}), make(chan struct{})
	go func() { c.Run(ctx, synced); close(done) }()
	stop = func() { cancel(); <-done }
	select {
	case <-synced:
	case <-done:
		tb.Fatalf("%s ended before it synced", kind)
	case <-time.After(time.Minute):
		stop()
		tb.Fatalf("%s not synced after a minute", kind)
	}
	start = time.Now()
	g.open()
	return c, start, stop
}

// replayServer answers LISTs with list, refuses WatchList (the consumers
// fall back to LIST), and answers a WATCH with frames once g is open (nil:
// at once), then holds it open until the client goes away. With every == 0
// the frames go out as fast as the client reads them; otherwise one every
// `every`, and sent[i] records when frame i was written (unix ns).
//
// The gate matters for controller-runtime: its cache's informer syncs, and
// streams, before the controller adds its handler, which then hears only the
// cache as it is by then (as Adds). Held until the consumer has synced, the
// stream reaches every consumer's handler whole.
func replayServer(list []byte, frames [][]byte, every time.Duration, sent []atomic.Int64, g *gate) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		// controller-runtime's RESTMapper asks the discovery endpoints
		// first (once per manager).
		if d, ok := discovery[r.URL.Path]; ok {
			w.Write([]byte(d))
			return
		}
		if r.URL.Query().Get("watch") == "" {
			w.Write(list)
			return
		}
		if r.URL.Query().Get("sendInitialEvents") == "true" {
			http.Error(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"BadRequest","code":400}`, http.StatusBadRequest)
			return
		}
		f := w.(http.Flusher)
		f.Flush() // the response has begun: the client's WATCH returns
		if g != nil && !g.wait(r.Context()) {
			return
		}
		next, unflushed := time.Now(), 0
		for i, frame := range frames {
			if every > 0 {
				if wait := time.Until(next); wait > 0 {
					time.Sleep(wait)
				}
				next = next.Add(every)
				sent[i].Store(time.Now().UnixNano())
			}
			if _, err := w.Write(frame); err != nil {
				return
			}
			if unflushed += len(frame); every > 0 || unflushed >= 64<<10 || i == len(frames)-1 {
				f.Flush()
				unflushed = 0
			}
		}
		<-r.Context().Done()
	})
}

// discovery are the legacy discovery documents of a server that serves
// MyResources and nothing else.
var discovery = map[string]string{
	"/api":  `{"kind":"APIVersions","versions":["v1"],"serverAddressByClientCIDRs":[]}`,
	"/apis": `{"kind":"APIGroupList","apiVersion":"v1","groups":[{"name":"example.com","versions":[{"groupVersion":"example.com/v1alpha1","version":"v1alpha1"}],"preferredVersion":{"groupVersion":"example.com/v1alpha1","version":"v1alpha1"}}]}`,
	"/apis/example.com/v1alpha1": `{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"example.com/v1alpha1","resources":[` +
		`{"name":"myresources","singularName":"myresource","namespaced":true,"kind":"MyResource","verbs":["get","list","watch","create","update","patch","delete"]},` +
		`{"name":"myresources/status","singularName":"","namespaced":true,"kind":"MyResource","verbs":["get","patch","update"]}]}`,
}

// gate holds the replay server's WATCH frames until it is opened.
type gate struct {
	mu sync.Mutex
	ch chan struct{}
}

// close makes WATCHes from now on wait for the next open.
func (g *gate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.ch = make(chan struct{})
}

func (g *gate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ch != nil {
		close(g.ch)
		g.ch = nil
	}
}

// wait reports whether the gate opened before ctx ended.
func (g *gate) wait(ctx context.Context) bool {
	g.mu.Lock()
	ch := g.ch
	g.mu.Unlock()
	if ch == nil {
		return true
	}
	select {
	case <-ch:
		return true
	case <-ctx.Done():
		return false
	}
}
