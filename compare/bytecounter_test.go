package compare

import (
	"compress/gzip"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The counter sorts responses by status code (429s apart) and counts the
// requests that got no response at all.
func TestByteCounterCountsStatusCodes(t *testing.T) {
	codes := []int{200, 429, 200, 429, 429, 410, 0} // 0: a transport error
	i := 0
	var c ByteCounter
	rt := c.Wrap(roundTripFunc(func(*http.Request) (*http.Response, error) {
		code := codes[i]
		i++
		if code == 0 {
			return nil, errors.New("connection refused")
		}
		return &http.Response{StatusCode: code, Body: io.NopCloser(strings.NewReader("body"))}, nil
	}))
	for range codes {
		req, _ := http.NewRequest(http.MethodGet, "http://example.invalid/", nil)
		if resp, err := rt.RoundTrip(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	if c.Requests() != 7 || c.Status(200) != 2 || c.Throttled() != 3 || c.Status(410) != 1 || c.Failed() != 1 || c.Read() != 6*4 {
		t.Fatalf("requests %d, 200s %d, 429s %d, 410s %d, failed %d, bytes %d", c.Requests(), c.Status(200), c.Throttled(), c.Status(410), c.Failed(), c.Read())
	}
	if c.Status(-1) != 0 || c.Status(1000) != 0 {
		t.Fatal("out-of-range codes must read 0")
	}
}

// A gzipped response is counted twice: decompressed as the decoder reads it,
// compressed as it crossed the connection (Go's transport asks for gzip and
// decompresses by itself, as it does for client-go).
func TestByteCounterCountsTheWire(t *testing.T) {
	body := strings.Repeat("x", 100_000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept-Encoding") != "gzip" {
			t.Errorf("Accept-Encoding %q", r.Header.Get("Accept-Encoding"))
		}
		w.Header().Set("Content-Encoding", "gzip")
		z := gzip.NewWriter(w)
		io.WriteString(z, body)
		z.Close()
	}))
	defer srv.Close()
	var c ByteCounter
	client := &http.Client{Transport: c.Wrap(&http.Transport{DialContext: c.Dialer(nil)})}
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if c.Read() != 100_000 || c.Wire() == 0 || c.Wire() > 10_000 {
		t.Fatalf("read %d bytes, %d on the wire; want 100000, and a compressed few hundred", c.Read(), c.Wire())
	}
}

// The counter sorts response bodies by the encoding their Content-Type
// names (parameters aside), which is how the harness tells what a consumer
// that asked for CBOR really read.
func TestByteCounterSortsBodiesByEncoding(t *testing.T) {
	types := []string{"application/cbor", "application/cbor-seq", "application/json", "application/json;stream=watch", "application/vnd.kubernetes.protobuf", ""}
	i := 0
	var c ByteCounter
	rt := c.Wrap(roundTripFunc(func(*http.Request) (*http.Response, error) {
		h := http.Header{}
		if types[i] != "" {
			h.Set("Content-Type", types[i])
		}
		i++
		return &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(strings.NewReader(strings.Repeat("x", i)))}, nil
	}))
	for range types {
		req, _ := http.NewRequest(http.MethodGet, "http://example.invalid/", nil)
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
	}
	if got, want := c.Bodies(), (BodyBytes{CBOR: 1 + 2, JSON: 3 + 4, Other: 5 + 6}); got != want || got.Read() != "cbor+json" {
		t.Fatalf("bodies %+v (%s), want %+v (cbor+json)", got, got.Read(), want)
	}
	for b, want := range map[BodyBytes]string{{CBOR: 1}: "cbor", {JSON: 1, Other: 9}: "json", {Other: 9}: ""} {
		if b.Read() != want {
			t.Errorf("%+v read as %q, want %q", b, b.Read(), want)
		}
	}
}
