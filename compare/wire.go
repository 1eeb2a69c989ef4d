package compare

import (
	"io"
	"net/http"
	"sync/atomic"
)

// ByteCounter counts the response bytes a consumer reads off the wire (after
// the transport's decompression, if any: what the decoder sees), its requests,
// and their responses by status code. Install it with
// rest.Config.Wrap(counter.Wrap), outside client-go's retries: every attempt
// is counted, a 429 client-go retried included.
type ByteCounter struct {
	read     atomic.Int64
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

// Requests is the number of requests sent so far.
func (c *ByteCounter) Requests() int64 { return c.requests.Load() }

// Wrap is a transport wrapper for rest.Config.Wrap.
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
		resp.Body = &countingBody{ReadCloser: resp.Body, n: &t.c.read}
	}
	return resp, err
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}
