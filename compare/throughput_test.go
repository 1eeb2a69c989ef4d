package compare

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"rawwatch/api/v1alpha1"
	"rawwatch/codec"
)

// The update phase of a harness run is bounded by how fast the apiserver
// accepts writes (a few hundred to a thousand per second on two cores), so
// every consumer keeps up and their events/s are equal; and its delivery
// latencies are mostly the apiserver's and the scheduler's. These
// benchmarks measure the consumers alone, against a fake apiserver that
// replays a pre-encoded WATCH stream of MODIFIED events:
//
//   - BenchmarkDelivery: as fast as the consumer reads it; the clock runs
//     from the first byte to the last handler call (events/s);
//
//   - BenchmarkDeliveryLatency: one event every 500 µs; each event's latency
//     runs from the moment its frame was written to the moment the
//     consumer's handler was called (p50 and p99, µs).
//
//     go test -run '^$' -bench Delivery -benchtime 4x ./compare
//
// The frames consumer is the ceiling: it reads the same WATCH stream with the
// raw watcher's FrameReader, finding where each frame ends and decoding
// nothing. Every consumer's of-frames is its events/s over the frames
// consumer's, measured in the same run. The lines consumer splits the stream
// at its newlines and checks nothing, the wire's own speed: since the raw
// watcher takes a line its decoder reads whole without the frame reader's
// check, of-lines says how far it is from a ceiling that skips the check too.
func BenchmarkDelivery(b *testing.B) {
	const objects, events = 1000, 20000
	list, frames := replayData(objects, events)
	var ceiling, wire float64
	for _, kind := range []string{"lines", "frames", KindRaw, KindInformerList, KindInformerStripped, KindControllerRuntime, KindBare} {
		b.Run(kind, func(b *testing.B) {
			g := &gate{}
			srv := httptest.NewServer(replayServer(list, frames, 0, nil, g))
			defer srv.Close()
			cfg := &rest.Config{Host: srv.URL, QPS: -1}
			var total time.Duration
			var mallocs uint64
			var ms runtime.MemStats
			for b.Loop() {
				runtime.ReadMemStats(&ms)
				before := ms.Mallocs
				switch kind {
				case "lines":
					total += readLines(b, srv.URL, events)
				case "frames":
					total += readFrames(b, srv.URL, events)
				default:
					total += deliver(b, kind, cfg, g, events)
				}
				runtime.ReadMemStats(&ms)
				mallocs += ms.Mallocs - before
			}
			rate := float64(events*b.N) / total.Seconds()
			switch kind {
			case "lines":
				wire = rate
			case "frames":
				ceiling = rate
			}
			b.ReportMetric(rate, "events/s")
			// The whole process's allocations (the consumer's initial
			// LIST and start-up included, and the replay server's few)
			// over the events: comparable between consumers.
			b.ReportMetric(float64(mallocs)/float64(events*b.N), "allocs/event")
			if ceiling > 0 {
				b.ReportMetric(rate/ceiling, "of-frames")
			}
			if wire > 0 && kind != "lines" {
				b.ReportMetric(rate/wire, "of-lines")
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}

// readFrames opens the WATCH and splits it into frames until it has events
// of them, decoding nothing; it returns the time from the request to the last.
func readFrames(b *testing.B, url string, events int) time.Duration {
	return readWatch(b, url, events, func(body io.Reader) func() error {
		fr := codec.NewFrameReader(body, 0)
		return func() error { _, err := fr.Next(); return err }
	})
}

// readLines is readFrames splitting at the newlines, checking nothing.
func readLines(b *testing.B, url string, events int) time.Duration {
	return readWatch(b, url, events, func(body io.Reader) func() error {
		r := bufio.NewReaderSize(body, 64<<10)
		return func() error { _, err := r.ReadSlice('\n'); return err }
	})
}

// readWatch opens the WATCH and calls the next split of its body events
// times; it returns the time from the request to the last.
func readWatch(b *testing.B, url string, events int, split func(io.Reader) func() error) time.Duration {
	start := time.Now()
	resp, err := http.Get(url + "/apis/example.com/v1alpha1/namespaces/bench/myresources?watch=true")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	next := split(resp.Body)
	for n := 0; n < events; n++ {
		if err := next(); err != nil {
			b.Fatalf("frame %d: %v", n, err)
		}
	}
	return time.Since(start)
}

func BenchmarkDeliveryLatency(b *testing.B) {
	const objects, events = 1000, 4000
	const every = 500 * time.Microsecond
	list, frames := replayData(objects, events)
	for _, kind := range []string{KindRaw, KindInformerList, KindInformerStripped, KindControllerRuntime, KindBare} {
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

// replayData builds a LIST body of n objects at resourceVersion 1, and a
// WATCH body of m MODIFIED events, round-robin over them, at RVs 2, 3, ...,
// split into its frames.
// The objects look like what kube-apiserver sends for the harness's objects:
// labels, a managedFields entry, a status.
func replayData(n, m int) (list []byte, frames [][]byte) {
	now := metav1.NewTime(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	obj := func(i, rv int) *v1alpha1.MyResource {
		return &v1alpha1.MyResource{
			TypeMeta: metav1.TypeMeta{APIVersion: "example.com/v1alpha1", Kind: "MyResource"},
			ObjectMeta: metav1.ObjectMeta{
				Name: fmt.Sprintf("obj-%06d", i), Namespace: "bench", UID: types.UID(fmt.Sprintf("6f1e9a1c-0000-4000-8000-%012d", i)),
				ResourceVersion: strconv.Itoa(rv), Generation: int64(rv), CreationTimestamp: now,
				Labels: map[string]string{"app": "compare"},
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "compare", Operation: metav1.ManagedFieldsOperationUpdate,
					APIVersion: "example.com/v1alpha1", Time: &now, FieldsType: "FieldsV1",
					FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:labels":{".":{},"f:app":{}}},"f:spec":{".":{},"f:message":{}}}`)}}},
			},
			Spec:   v1alpha1.MyResourceSpec{Message: fmt.Sprintf("update %d", rv)},
			Status: v1alpha1.MyResourceStatus{Phase: v1alpha1.PhaseProcessed, Message: "processed", ObservedGeneration: int64(rv)},
		}
	}
	items := make([]v1alpha1.MyResource, n)
	for i := range items {
		items[i] = *obj(i, 1)
	}
	l := v1alpha1.MyResourceList{TypeMeta: metav1.TypeMeta{APIVersion: "example.com/v1alpha1", Kind: "MyResourceList"},
		ListMeta: metav1.ListMeta{ResourceVersion: "1"}, Items: items}
	list, _ = json.Marshal(l)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for e := range m {
		_ = enc.Encode(map[string]any{"type": "MODIFIED", "object": obj(e%n, e+2)})
	}
	return list, bytes.SplitAfter(buf.Bytes(), []byte("\n"))
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
