package compare

import (
	"io"
	"net/http"
	"sync/atomic"
)

// ByteCounter counts the response bytes a consumer reads off the wire (after
// the transport's decompression, if any: what the decoder sees). Install it
// with rest.Config.Wrap(counter.Wrap).
type ByteCounter struct {
	read     atomic.Int64
	requests atomic.Int64
}

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
