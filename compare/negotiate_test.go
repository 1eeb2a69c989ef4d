package compare

import (
	"net/http"
	"net/http/httptest"
	"rawwatch/codec"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

// The replay server ranks an Accept header's media types as kube-apiserver
// does: the highest q, of equal q the first listed.
func TestPrefersCBORRanksTheAcceptHeader(t *testing.T) {
	for accept, want := range map[string]bool{
		"":                                   false,
		codec.AcceptCBOR:                     true,
		"application/json, */*":              false,
		"application/cbor":                   true,
		"application/cbor-seq":               true,
		"application/json, application/cbor": false,
		"application/cbor, application/json": true,
		"application/json;q=0.9, application/cbor;q=0.5":              false,
		"application/cbor;q=0, application/json;q=0.1":                false,
		"application/vnd.kubernetes.protobuf, application/cbor;q=0.5": true,
	} {
		if got := prefersCBOR(accept); got != want {
			t.Errorf("prefersCBOR(%q) = %v, want %v", accept, got, want)
		}
	}
}

// CBOR only when asked and served; JSON otherwise, to a CBOR request too.
func TestNegotiatingAnswersCBOROnlyWhenAskedAndServed(t *testing.T) {
	list, frames := replayData(3, 3)
	cborList, cborFrames := cborReplayData(t, list, frames)
	asJSON := replayEncoding{list, frames, [2]string{"application/json", "application/json"}}
	asCBOR := &replayEncoding{cborList, cborFrames, [2]string{"application/cbor", "application/cbor-seq"}}
	for _, tc := range []struct {
		cbor   *replayEncoding
		accept string
		want   string
	}{
		{asCBOR, codec.AcceptCBOR, "application/cbor"},
		{asCBOR, "application/json", "application/json"},
		{asCBOR, "", "application/json"},
		{nil, codec.AcceptCBOR, "application/json"},
	} {
		srv := httptest.NewServer(negotiating(t, asJSON, tc.cbor, false, nil))
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/apis/example.com/v1alpha1/namespaces/bench/myresources", nil)
		if tc.accept != "" {
			req.Header.Set("Accept", tc.accept)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("Content-Type"); got != tc.want {
			t.Errorf("serving CBOR %v, Accept %q: answered %s, want %s", tc.cbor != nil, tc.accept, got, tc.want)
		}
		srv.Close()
	}
}

// A consumer that asks for CBOR from a server that serves JSON only falls
// back, delivers every event, and is reported as what it is: it read JSON
// (the byte counter's bodies by Content-Type), which the wire table puts in
// bold as a fallback, while a case that read CBOR is plain.
func TestAFallbackToJSONIsReported(t *testing.T) {
	const objects, events = 20, 200
	list, frames := replayData(objects, events)
	g := &gate{}
	srv := httptest.NewServer(negotiating(t, replayEncoding{list, frames, [2]string{"application/json", "application/json"}}, nil, false, g))
	defer srv.Close()
	cfg := &rest.Config{Host: srv.URL, QPS: -1}
	var bc ByteCounter
	bc.Install(cfg)
	c, start, stop := replayTo(t, KindRaw, cfg, g, ConsumerConfig{Wire: codec.WireCBOR})
	defer stop()
	waitUpdates(t, c, start, events, "raw asking for cbor")
	if read := bc.Bodies().Read(); read != "json" {
		t.Fatalf("read %s (%+v), want json", read, bc.Bodies())
	}
	rep := ConsumerReport{Kind: KindRaw, WireAsked: codec.WireCBOR, WireRead: bc.Bodies().Read()}
	if cell := rep.wireCell(codec.WireCBOR); !strings.HasPrefix(cell, "**json") {
		t.Errorf("the harness's report shows %q", cell)
	}
	out := "BenchmarkDeliveryWire/raw/cbor-json-server-2 \t 1 \t 0 cbor-share \t 9000 events/s \t 20 cpu-µs/event \t 2000 wire-B/event \t 60 allocs/event \t 1.0 load\n" +
		"BenchmarkDeliveryWire/raw/cbor-2 \t 1 \t 1 cbor-share \t 9000 events/s \t 20 cpu-µs/event \t 2000 wire-B/event \t 60 allocs/event \t 1.0 load\n"
	table, err := RenderDeliveryWire([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table, "| raw/cbor-json-server | **json**: asked for cbor |") || !strings.Contains(table, "| raw/cbor | cbor |") {
		t.Errorf("the wire table does not say which case fell back:\n%s", table)
	}
}
