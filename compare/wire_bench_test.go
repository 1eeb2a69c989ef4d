package compare

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor/direct"
	"k8s.io/client-go/rest"

	"rawwatch/api/v1alpha1"
	"rawwatch/codec"
)

// BenchmarkDeliveryWire is BenchmarkDelivery's stream in JSON and in CBOR
// (KEP-4222), each plain and gzipped: what --wire=cbor buys a consumer
// once the apiserver serves CBOR. The replay server sends the same 1,000
// objects and 20,000 MODIFIED events, pre-encoded as kube-apiserver does
// (CBOR: the LIST page as application/cbor, the WATCH as application/cbor-seq,
// every item behind the self-described tag), and, gzipped, compressed
// ahead of time flush by flush (every 64 KiB of the stream, as
// WatchListCompression does per flush), so that the server's CPU is the
// same small write loop in every case. Per event, over the WATCH only:
//
//   - events/s, from the gate's opening to the last handler call;
//   - cpu-µs/event: the process's CPU time (user + system) over that
//     window, the replay server's writes included (the same for all);
//   - wire-B/event: bytes read from the connection (headers, chunking and
//     compression included);
//   - allocs/event: the process's allocations over that window.
//
// The informer runs with CBOR only when client-go's ClientsAllowCBOR gate
// is on in the environment; otherwise that case is skipped:
//
//	KUBE_FEATURE_ClientsAllowCBOR=true go test -run '^$' -bench DeliveryWire -benchtime 4x ./compare
func BenchmarkDeliveryWire(b *testing.B) {
	const objects, events = 1000, 20000
	jsonList, jsonFrames := replayData(objects, events)
	cborList, cborFrames := cborReplayData(b, jsonList, jsonFrames)
	for _, kind := range []string{KindRaw, KindInformerList} {
		for _, wire := range []codec.Wire{codec.WireJSON, codec.WireCBOR} {
			for _, gz := range []bool{false, true} {
				name := kind + "/" + string(wire)
				if gz {
					name += "-gzip"
				}
				b.Run(name, func(b *testing.B) {
					if kind != KindRaw && wire == codec.WireCBOR && os.Getenv("KUBE_FEATURE_ClientsAllowCBOR") != "true" {
						b.Skip("client-go asks for CBOR only with KUBE_FEATURE_ClientsAllowCBOR=true")
					}
					list, frames, types := jsonList, jsonFrames, [2]string{"application/json", "application/json"}
					if wire == codec.WireCBOR {
						list, frames, types = cborList, cborFrames, [2]string{"application/cbor", "application/cbor-seq"}
					}
					if gz {
						list, frames = bytes.Join(gzipped(b, [][]byte{list}), nil), gzipped(b, frames)
					}
					g := &gate{}
					srv := httptest.NewServer(encodedAs(types, gz, replayServer(list, frames, 0, nil, g)))
					defer srv.Close()
					cfg := &rest.Config{Host: srv.URL, QPS: -1}
					var bc ByteCounter
					bc.Install(cfg)
					var total time.Duration
					var cpu float64
					var mallocs, read int64
					var ms runtime.MemStats
					for b.Loop() {
						c, start, stop := replayTo(b, kind, cfg, g, ConsumerConfig{Wire: wire})
						runtime.ReadMemStats(&ms)
						before, wireBefore, cpuBefore := ms.Mallocs, bc.Wire(), processCPU()
						waitUpdates(b, c, start, events, name)
						total += time.Since(start)
						cpu += processCPU() - cpuBefore
						runtime.ReadMemStats(&ms)
						mallocs += int64(ms.Mallocs - before)
						read += bc.Wire() - wireBefore
						stop()
					}
					n := float64(events * b.N)
					b.ReportMetric(n/total.Seconds(), "events/s")
					b.ReportMetric(cpu/n*1e6, "cpu-µs/event")
					b.ReportMetric(float64(read)/n, "wire-B/event")
					b.ReportMetric(float64(mallocs)/n, "allocs/event")
					b.ReportMetric(loadAverage(), "load")
					b.ReportMetric(0, "ns/op")
				})
			}
		}
	}
}

// cborReplayData re-encodes replayData's LIST and WATCH frames as
// kube-apiserver does with CBORServingAndStorage: apimachinery's CBOR
// encoding behind the self-described tag; a frame is a WatchEvent whose
// object is the object's own CBOR item.
func cborReplayData(tb testing.TB, list []byte, frames [][]byte) ([]byte, [][]byte) {
	tagged := func(v any) []byte {
		b, err := direct.Marshal(v)
		if err != nil {
			tb.Fatal(err)
		}
		return append([]byte{0xd9, 0xd9, 0xf7}, b...)
	}
	var l v1alpha1.MyResourceList
	if err := json.Unmarshal(list, &l); err != nil {
		tb.Fatal(err)
	}
	out := make([][]byte, 0, len(frames))
	for _, f := range frames {
		if len(bytes.TrimSpace(f)) == 0 {
			continue
		}
		var ev struct {
			Type   string               `json:"type"`
			Object *v1alpha1.MyResource `json:"object"`
		}
		if err := json.Unmarshal(f, &ev); err != nil {
			tb.Fatal(err)
		}
		out = append(out, tagged(metav1.WatchEvent{Type: ev.Type, Object: kruntime.RawExtension{Raw: tagged(ev.Object)}}))
	}
	return tagged(&l), out
}

// gzipped compresses parts as one gzip stream, flushed every 64 KiB of
// input, and returns the stream cut at the flushes (a reader gets every
// part up to the last flush; a single part is closed: join the pieces
// for a whole body).
func gzipped(tb testing.TB, parts [][]byte) [][]byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	var out [][]byte
	cut := func() {
		out = append(out, bytes.Clone(buf.Bytes()))
		buf.Reset()
	}
	unflushed := 0
	for _, p := range parts {
		zw.Write(p)
		if unflushed += len(p); unflushed >= 64<<10 {
			zw.Flush()
			cut()
			unflushed = 0
		}
	}
	if len(parts) == 1 {
		zw.Close()
	} else {
		zw.Flush()
	}
	cut()
	return out
}

// encodedAs labels the LIST and WATCH answers of replayServer with the
// content types (LIST, WATCH) and, gz, Content-Encoding gzip; discovery and
// errors pass as they are.
func encodedAs(types [2]string, gz bool, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := discovery[r.URL.Path]; ok {
			next.ServeHTTP(w, r)
			return
		}
		ct := types[0]
		if r.URL.Query().Get("watch") != "" {
			ct = types[1]
		}
		if gz && !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			http.Error(w, "this replay is gzipped", http.StatusNotAcceptable)
			return
		}
		next.ServeHTTP(&labelled{ResponseWriter: w, ct: ct, gz: gz}, r)
	})
}

type labelled struct {
	http.ResponseWriter
	ct      string
	gz      bool
	started bool
}

func (l *labelled) WriteHeader(code int) {
	if !l.started && code == http.StatusOK {
		l.ResponseWriter.Header().Set("Content-Type", l.ct)
		if l.gz {
			l.ResponseWriter.Header().Set("Content-Encoding", "gzip")
		}
	}
	l.started = true
	l.ResponseWriter.WriteHeader(code)
}

func (l *labelled) Write(b []byte) (int, error) {
	if !l.started {
		l.WriteHeader(http.StatusOK)
	}
	return l.ResponseWriter.Write(b)
}

func (l *labelled) Flush() {
	if !l.started {
		l.WriteHeader(http.StatusOK)
	}
	l.ResponseWriter.(http.Flusher).Flush()
}
