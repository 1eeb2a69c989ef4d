package compare

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"mime"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"

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
// same small write loop in every case. It answers as kube-apiserver
// negotiates (negotiating): CBOR only to a request whose Accept prefers it,
// and only where it serves CBOR at all; JSON otherwise. A case's name is
// the consumer, what it asks for and, "-json-server", a server that serves
// JSON only: the consumer must fall back, and the cbor-share metric (the
// response-body bytes read as CBOR) says what it really read. Per event,
// over the WATCH only:
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
	quiet(b)
	const objects, events = 1000, 20000
	jsonList, jsonFrames := replayData(objects, events)
	cborList, cborFrames := cborReplayData(b, jsonList, jsonFrames)
	type wireCase struct {
		kind       string
		ask        codec.Wire
		gz, noCBOR bool
	}
	var cases []wireCase
	for _, kind := range []string{KindRaw, KindInformerList} {
		for _, ask := range []codec.Wire{codec.WireJSON, codec.WireCBOR} {
			for _, gz := range []bool{false, true} {
				cases = append(cases, wireCase{kind, ask, gz, false})
			}
		}
	}
	cases = append(cases, wireCase{KindRaw, codec.WireCBOR, false, true})
	for _, tc := range cases {
		name := tc.kind + "/" + string(tc.ask)
		if tc.gz {
			name += "-gzip"
		}
		if tc.noCBOR {
			name += "-json-server"
		}
		b.Run(name, func(b *testing.B) {
			if tc.kind != KindRaw && tc.ask == codec.WireCBOR && os.Getenv("KUBE_FEATURE_ClientsAllowCBOR") != "true" {
				b.Skip("client-go asks for CBOR only with KUBE_FEATURE_ClientsAllowCBOR=true")
			}
			g := &gate{}
			asJSON := replayEncoding{jsonList, jsonFrames, [2]string{"application/json", "application/json"}}
			asCBOR := &replayEncoding{cborList, cborFrames, [2]string{"application/cbor", "application/cbor-seq"}}
			if tc.noCBOR {
				asCBOR = nil
			}
			srv := httptest.NewServer(negotiating(b, asJSON, asCBOR, tc.gz, g))
			defer srv.Close()
			cfg := &rest.Config{Host: srv.URL, QPS: -1}
			var bc ByteCounter
			bc.Install(cfg)
			var m measured
			var read int64
			var bodies BodyBytes
			for b.Loop() {
				before := bc.Bodies()
				c, start, stop := replayTo(b, tc.kind, cfg, g, ConsumerConfig{Wire: tc.ask})
				w, wireBefore := m.begin(start), bc.Wire()
				waitUpdates(b, c, start, events, name)
				m.end(w)
				read += bc.Wire() - wireBefore
				stop()
				after := bc.Bodies()
				bodies.CBOR += after.CBOR - before.CBOR
				bodies.JSON += after.JSON - before.JSON
			}
			b.ReportMetric(float64(read)/float64(events*b.N), "wire-B/event")
			b.ReportMetric(float64(bodies.CBOR)/float64(max(bodies.CBOR+bodies.JSON, 1)), "cbor-share")
			m.report(b, events*b.N)
		})
	}
}

// replayEncoding is the replay in one encoding: the LIST body, the WATCH
// frames, and their Content-Types (LIST, WATCH).
type replayEncoding struct {
	list   []byte
	frames [][]byte
	types  [2]string
}

// negotiating serves the replay in JSON, or in CBOR (cbor, nil for a server
// that serves JSON only) to a request whose Accept header prefers CBOR to
// JSON: what kube-apiserver does for a custom resource, with its
// CBORServingAndStorage gate on or off. With gz, both are served gzipped
// (compressed ahead of time), and a request that does not accept gzip is
// refused. Discovery and errors go out as replayServer writes them.
func negotiating(tb testing.TB, json replayEncoding, cbor *replayEncoding, gz bool, g *gate) http.Handler {
	serve := func(e replayEncoding) http.Handler {
		list, frames := e.list, e.frames
		if gz {
			list, frames = bytes.Join(gzipped(tb, [][]byte{list}), nil), gzipped(tb, frames)
		}
		return encodedAs(e.types, gz, replayServer(list, frames, 0, nil, g))
	}
	asJSON, asCBOR := serve(json), http.Handler(nil)
	if cbor != nil {
		asCBOR = serve(*cbor)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if asCBOR != nil && prefersCBOR(r.Header.Get("Accept")) {
			asCBOR.ServeHTTP(w, r)
			return
		}
		asJSON.ServeHTTP(w, r)
	})
}

// prefersCBOR tells whether an Accept header ranks application/cbor (or
// cbor-seq) first of what the server serves, as kube-apiserver negotiates:
// the highest q (an absent q is 1), of equal q the one the header lists
// first; */* and application/* are JSON here.
func prefersCBOR(accept string) bool {
	best, cbor := 0.0, false
	for _, part := range strings.Split(accept, ",") {
		media, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		q := 1.0
		if s, ok := params["q"]; ok {
			if q, err = strconv.ParseFloat(s, 64); err != nil {
				continue
			}
		}
		var isCBOR bool
		switch media {
		case "application/cbor", "application/cbor-seq":
			isCBOR = true
		case "application/json", "*/*", "application/*":
		default:
			continue
		}
		if q > best {
			best, cbor = q, isCBOR
		}
	}
	return cbor
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
