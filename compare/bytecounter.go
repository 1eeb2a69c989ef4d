package compare

import (
	"context"
	"io"
	"mime"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
)

// ByteCounter counts a consumer's requests, their responses by status code,
// and the bytes it reads twice: the response bodies after the transport's
// gzip decompression (what the decoder sees), and what crossed its
// connections (TLS records, HTTP/2 frames and headers, compressed bodies:
// the wire). The apiserver gzips a response of more than 128 KiB if the
// client accepts it, as Go's transport does: a LIST page of many objects
// travels compressed. kube-apiserver 1.37 also gzips a WatchList's stream
// (feature WatchListCompression, beta and on), one gzip flush per flush of
// the stream; a plain WATCH travels uncompressed.
//
// Install it on a rest.Config; it wraps the transport outside client-go's
// retries, so every attempt is counted, a 429 client-go retried included.
type ByteCounter struct {
	read     atomic.Int64
	wire     atomic.Int64
	asCBOR   atomic.Int64 // response-body bytes labelled application/cbor or cbor-seq
	asJSON   atomic.Int64 // ... labelled application/json
	requests atomic.Int64
	failed   atomic.Int64      // no response at all (connection refused, reset, ...)
	codes    [600]atomic.Int64 // responses by status code
}

// Status is the number of responses with this status code so far.
func (c *ByteCounter) Status(code int) int64 {
	if code < 0 || code >= len(c.codes) {
		return 0
	}
	return c.codes[code].Load()
}

// Throttled is the number of 429 (Too Many Requests) responses so far.
func (c *ByteCounter) Throttled() int64 { return c.Status(http.StatusTooManyRequests) }

// Failed is the number of requests that got no response (a transport error).
func (c *ByteCounter) Failed() int64 { return c.failed.Load() }

// Read is the number of response-body bytes read so far.
func (c *ByteCounter) Read() int64 { return c.read.Load() }

// Bodies are the response-body bytes read so far by the encoding their
// Content-Type names: what a consumer that asked for CBOR really read.
func (c *ByteCounter) Bodies() BodyBytes {
	return BodyBytes{CBOR: c.asCBOR.Load(), JSON: c.asJSON.Load(), Other: c.read.Load() - c.asCBOR.Load() - c.asJSON.Load()}
}

// BodyBytes are response-body bytes by encoding (ByteCounter.Bodies).
type BodyBytes struct {
	CBOR  int64 `json:"cbor"`
	JSON  int64 `json:"json"`
	Other int64 `json:"other,omitempty"` // protobuf, text, no Content-Type
}

// Read says which encoding these bytes are in: "cbor" or "json" if only
// one of the two carried anything, "cbor+json" if both did, "" if
// neither (other bytes are left out: a controller-runtime cache's
// discovery, say).
func (b BodyBytes) Read() string {
	switch {
	case b.CBOR > 0 && b.JSON > 0:
		return "cbor+json"
	case b.CBOR > 0:
		return "cbor"
	case b.JSON > 0:
		return "json"
	}
	return ""
}

// Wire is the number of bytes read from the connections so far.
func (c *ByteCounter) Wire() int64 { return c.wire.Load() }

// Requests is the number of requests sent so far.
func (c *ByteCounter) Requests() int64 { return c.requests.Load() }

// Install counts cfg's requests and bytes: its transport is wrapped, and its
// connections are dialled through Dialer. (Each client made from a config
// with a Dial gets a transport and connections of its own: client-go keys
// its shared transports by a holder of the Dial function, made anew for
// every client.)
func (c *ByteCounter) Install(cfg *rest.Config) {
	cfg.Wrap(c.Wrap)
	cfg.Dial = c.Dialer(cfg.Dial)
}

// Dialer wraps dial (nil: a net.Dialer with client-go's default timeouts) so
// that every connection it makes counts the bytes read from it.
func (c *ByteCounter) Dialer(dial func(ctx context.Context, network, address string) (net.Conn, error)) func(ctx context.Context, network, address string) (net.Conn, error) {
	if dial == nil {
		dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		conn, err := dial(ctx, network, address)
		if err != nil {
			return nil, err
		}
		return &countingConn{Conn: conn, n: &c.wire}, nil
	}
}

type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// Wrap is a transport wrapper for rest.Config.Wrap (Install uses it).
func (c *ByteCounter) Wrap(rt http.RoundTripper) http.RoundTripper {
	return countingRT{rt: rt, c: c}
}

type countingRT struct {
	rt http.RoundTripper
	c  *ByteCounter
}

func (t countingRT) RoundTrip(req *http.Request) (*http.Response, error) {
	t.c.requests.Add(1)
	resp, err := t.rt.RoundTrip(req)
	switch {
	case resp != nil && resp.StatusCode >= 0 && resp.StatusCode < len(t.c.codes):
		t.c.codes[resp.StatusCode].Add(1)
	case err != nil:
		t.c.failed.Add(1)
	}
	if resp != nil && resp.Body != nil {
		resp.Body = &countingBody{ReadCloser: resp.Body, n: &t.c.read, as: t.c.encoding(resp.Header.Get("Content-Type"))}
	}
	return resp, err
}

// encoding is the counter of a response body's encoding by its Content-Type
// (nil: neither CBOR nor JSON).
func (c *ByteCounter) encoding(contentType string) *atomic.Int64 {
	media, _, _ := mime.ParseMediaType(contentType)
	switch media {
	case "application/cbor", "application/cbor-seq":
		return &c.asCBOR
	case "application/json":
		return &c.asJSON
	}
	return nil
}

type countingBody struct {
	io.ReadCloser
	n, as *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	if b.as != nil {
		b.as.Add(int64(n))
	}
	return n, err
}
