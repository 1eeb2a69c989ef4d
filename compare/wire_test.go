package compare

import (
	"errors"
	"io"
	"net/http"
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
