package compare

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"rawwatch/api/v1alpha1"
	"rawwatch/watcher"
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
//     go test -run '^$' -bench Delivery -benchtime 5x ./compare
//
// The frames consumer is the ceiling: it reads the same WATCH stream with the
// raw watcher's FrameReader, finding where each frame ends and decoding
// nothing. Every consumer's of-frames is its events/s over the frames
// consumer's, measured in the same run.
func BenchmarkDelivery(b *testing.B) {
	const objects, events = 1000, 20000
	list, stream := replayData(objects, events)
	frames := bytes.SplitAfter(stream, []byte("\n"))
	var ceiling float64
	for _, kind := range []string{"frames", KindRaw, KindInformerList, KindBare} {
		b.Run(kind, func(b *testing.B) {
			srv := httptest.NewServer(replayServer(list, frames, 0, nil))
			defer srv.Close()
			cfg := &rest.Config{Host: srv.URL, QPS: -1}
			var total time.Duration
			for b.Loop() {
				if kind == "frames" {
					total += readFrames(b, srv.URL, events)
				} else {
					total += deliver(b, kind, cfg, events)
				}
			}
			rate := float64(events*b.N) / total.Seconds()
			if kind == "frames" {
				ceiling = rate
			}
			b.ReportMetric(rate, "events/s")
			if ceiling > 0 {
				b.ReportMetric(rate/ceiling, "of-frames")
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}

// readFrames opens the WATCH and splits it into frames until it has events
// of them, decoding nothing; it returns the time from the request to the last.
func readFrames(b *testing.B, url string, events int) time.Duration {
	start := time.Now()
	resp, err := http.Get(url + "/apis/example.com/v1alpha1/namespaces/bench/myresources?watch=true")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	fr := watcher.NewFrameReader(resp.Body, 0)
	for n := 0; n < events; n++ {
		if _, err := fr.Next(); err != nil {
			b.Fatalf("frame %d: %v", n, err)
		}
	}
	return time.Since(start)
}

func BenchmarkDeliveryLatency(b *testing.B) {
	const objects, events = 1000, 4000
	const every = 500 * time.Microsecond
	list, stream := replayData(objects, events)
	frames := bytes.SplitAfter(stream, []byte("\n"))
	for _, kind := range []string{KindRaw, KindInformerList, KindBare} {
		b.Run(kind, func(b *testing.B) {
			var all []float64
			for b.Loop() {
				sent := make([]atomic.Int64, events)
				srv := httptest.NewServer(replayServer(list, frames[:events], every, sent))
				var mu sync.Mutex
				var lat []float64
				deliver(b, kind, &rest.Config{Host: srv.URL, QPS: -1}, events, func(typ byte, rv string, at int64) {
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
// every event, and returns how long the events took.
func deliver(b *testing.B, kind string, cfg *rest.Config, events int, onEvent ...func(byte, string, int64)) time.Duration {
	rec, err := newRecorder(os.DevNull)
	if err != nil {
		b.Fatal(err)
	}
	defer rec.close()
	if len(onEvent) > 0 {
		rec.onEvent = onEvent[0]
	}
	c, err := newConsumer(kind, rest.CopyConfig(cfg), "bench", rec, 0, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	synced, done := make(chan struct{}), make(chan struct{})
	go func() { c.run(ctx, synced); close(done) }()
	<-synced
	start := time.Now()
	for rec.updates.Load() < int64(events) {
		time.Sleep(100 * time.Microsecond)
	}
	d := time.Since(start)
	cancel()
	<-done
	return d
}

// replayData builds a LIST body of n objects at resourceVersion 1, and a
// WATCH body of m MODIFIED events, round-robin over them, at RVs 2, 3, ...
// The objects look like what kube-apiserver sends for the harness's objects:
// labels, a managedFields entry, a status.
func replayData(n, m int) (list, stream []byte) {
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
	return list, buf.Bytes()
}

// replayServer answers LISTs with list, refuses WatchList (the consumers
// fall back to LIST), and answers a WATCH with frames, then holds it open
// until the client goes away. With every == 0 the frames go out as fast as
// the client reads them; otherwise one every `every`, and sent[i] records
// when frame i was written (unix ns).
func replayServer(list []byte, frames [][]byte, every time.Duration, sent []atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("watch") == "" {
			w.Write(list)
			return
		}
		if r.URL.Query().Get("sendInitialEvents") == "true" {
			http.Error(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"BadRequest","code":400}`, http.StatusBadRequest)
			return
		}
		f := w.(http.Flusher)
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
