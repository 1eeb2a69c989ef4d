package scorecard

import (
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"rawwatch/faultproxy"
)

// Every request counts, in each of its spellings.
func TestEveryRequestIsSorted(t *testing.T) {
	for _, c := range []struct {
		method, url string
		want        byte
	}{
		{"GET", "/apis/example.com/v1alpha1/namespaces/ns/myresources?limit=500", sortList},
		{"GET", "/apis/example.com/v1alpha1/namespaces/ns/myresources?limit=500&continue=abc", sortPage},
		{"GET", "/apis/example.com/v1alpha1/namespaces/ns/myresources?watch=true&resourceVersion=5", sortWatch},
		{"GET", "/apis/example.com/v1alpha1/namespaces/ns/myresources?watch=1", sortWatch},
		{"GET", "/apis/example.com/v1alpha1/namespaces/ns/myresources?watch=True", sortWatch},
		{"GET", "/apis/example.com/v1alpha1/namespaces/ns/myresources?watch=false", sortList},
		{"GET", "/apis/example.com/v1alpha1/watch/namespaces/ns/myresources?sendInitialEvents=true", sortWatchList},
		{"GET", "/apis/example.com/v1alpha1/watch/namespaces/ns/myresources", sortWatch},
		{"GET", "/apis/example.com/v1alpha1/namespaces/ns/myresources?watch=true&sendInitialEvents=true", sortWatchList},
		{"GET", "/apis/example.com/v1alpha1/namespaces/ns/myresources/obj-001", sortOther},
		{"GET", "/apis", sortOther},
		{"GET", "/version", sortOther},
		{"PUT", "/apis/example.com/v1alpha1/namespaces/ns/myresources/obj-001", sortOther},
	} {
		u, _ := url.Parse(c.url)
		r := &http.Request{Method: c.method, URL: u}
		if got := sortOf(r); got != c.want {
			t.Errorf("%s %s: %c, want %c", c.method, c.url, got, c.want)
		}
		// The proxy sorts it the same way.
		if want := map[byte]faultproxy.Kind{sortList: faultproxy.List, sortPage: faultproxy.List, sortWatch: faultproxy.Watch,
			sortWatchList: faultproxy.Watch, sortOther: faultproxy.Other}[c.want]; faultproxy.KindOf(r) != want {
			t.Errorf("%s %s: the proxy sorts it %s, want %s", c.method, c.url, faultproxy.KindOf(r), want)
		}
	}
}

func ms(n int64) int64 { return n * int64(time.Millisecond) }

// A request after one that failed is a retry, and waited from that failure
// to its start, unless it waited the Retry-After asked; one of the same sort
// as the one before, which did not fail, is that one asked again, and waited
// from its start; one after a success or beside a request in flight is
// chained, and so is one of another sort at once after a failure (a LIST
// after a WatchList that failed). Requests
// before the window are not counted, but a failure just before it makes
// the first in it a retry.
func TestPaceTellsRetriesFromChainedRequests(t *testing.T) {
	reqs := []request{
		{ID: 1, At: ms(0), End: ms(100), Sort: sortWatch},                                 // before the window: a WATCH that ends...
		{ID: 2, At: ms(50), End: ms(900), Sort: sortWatch, Failed: true},                  // ...beside a WATCH that fails, before the window too
		{ID: 3, At: ms(1500), End: ms(1600), Sort: sortWatch, Failed: true},               // a retry, 600 ms after 2 ended
		{ID: 4, At: ms(2600), End: ms(2700), Sort: sortWatch, Status: 429, RetryAfter: 1}, // a retry, 1 s after 3
		{ID: 5, At: ms(3700), End: ms(3800), Sort: sortWatch},                             // waited the second 4 asked: as asked
		{ID: 6, At: ms(3810), End: ms(4000), Sort: sortWatchList, Failed: true},           // after a success: chained; it fails...
		{ID: 7, At: ms(4001), End: ms(4100), Sort: sortList},                              // ...and the LIST at once: chained
		{ID: 8, At: ms(4200), End: ms(4300), Sort: sortWatch, Failed: true},               // after a success: chained
		{ID: 9, At: ms(4301), End: ms(4400), Sort: sortWatch},                             // the same sort at once after a failure: a retry
		{ID: 10, At: ms(4500), Sort: sortWatch},                                           // the same WATCH again after 9 succeeded: 200 ms after 9 began, and still open
		{ID: 11, At: ms(5000), End: ms(5100), Sort: sortList},                             // beside 10: chained
	}
	for i := range reqs {
		reqs[i].Failed = reqs[i].Failed || reqs[i].Status >= 400
	}
	waits, asAsked, chained := pace(reqs, time.Unix(0, ms(1000)), time.Unix(0, ms(6000)))
	if !slices.Equal(waits, []time.Duration{time.Millisecond, 199 * time.Millisecond, 600 * time.Millisecond, time.Second}) || asAsked != 1 || chained != 4 {
		t.Errorf("waits %v, %d as asked, %d chained; want [1ms 199ms 600ms 1s], 1, 4", waits, asAsked, chained)
	}
}

// The requests file holds each request as it began and again as it
// ended: the last record wins, and a line cut by a crash is skipped.
func TestTheRequestsFileKeepsTheLastRecordOfEachRequest(t *testing.T) {
	path := filepath.Join(t.TempDir(), requestsFile)
	lines := `{"id":1,"at":100,"sort":76}` + "\n" + `{"id":2,"at":50,"sort":87}` + "\n" +
		`{"id":1,"at":100,"end":200,"sort":76,"status":200}` + "\n" + `{"id":3,"at":3`
	if err := os.WriteFile(path, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	reqs, err := readRequests(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 2 || reqs[0].ID != 2 || reqs[1].End != 200 || reqs[1].Status != 200 {
		t.Errorf("%+v; want request 2, then 1 ended at 200 with 200", reqs)
	}
}

// chunked is a body read in the given pieces, one a Read.
type chunked struct{ pieces []string }

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.pieces) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.pieces[0])
	if c.pieces[0] = c.pieces[0][n:]; c.pieces[0] == "" {
		c.pieces = c.pieces[1:]
	}
	return n, nil
}

func (c *chunked) Close() error { return nil }

// logged is the request the log kept of one WATCH whose body is read in
// pieces to its end.
func logged(t *testing.T, pieces ...string) request {
	t.Helper()
	path := filepath.Join(t.TempDir(), requestsFile)
	l, err := newRequestLog(path)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse("https://apiserver/apis/example.com/v1alpha1/namespaces/ns/myresources?watch=true&resourceVersion=5")
	resp, err := l.roundTrip(roundTripFunc(func(*http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: &chunked{pieces: pieces}}, nil
	}), &http.Request{Method: http.MethodGet, URL: u})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(resp.Body); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := l.close(); err != nil {
		t.Fatal(err)
	}
	reqs, err := readRequests(path)
	if err != nil || len(reqs) != 1 {
		t.Fatalf("%v, %v; want one request", reqs, err)
	}
	return reqs[0]
}

const (
	addedFrame = `{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"6"}}}` + "\n"
	// tooLargeFrame is kube-apiserver's answer to a WatchList from a
	// resourceVersion it has not reached (fault-watchlist-future-cached.json):
	// its Retry-After is in the Status only.
	tooLargeFrame = `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Timeout: Too large resource version: 9, current: 8",` +
		`"reason":"Timeout","details":{"causes":[{"reason":"ResourceVersionTooLarge","message":"Too large resource version"}],"retryAfterSeconds":3},"code":504}}` + "\n"
)

// An ERROR event fails its stream, wherever the reads cut it, and the
// Retry-After its Status carries (details.retryAfterSeconds) is the
// request's: a client that waits it out waited as asked.
func TestAnErrorEventFailsItsStreamWithItsRetryAfterWhereverTheReadsCutIt(t *testing.T) {
	stream := addedFrame + tooLargeFrame
	var notFailed, noRetryAfter []int
	for cut := 1; cut < len(stream); cut++ {
		q := logged(t, stream[:cut], stream[cut:])
		if !q.Failed {
			notFailed = append(notFailed, cut)
		}
		if q.RetryAfter != 3 {
			noRetryAfter = append(noRetryAfter, cut)
		}
	}
	if len(notFailed)+len(noRetryAfter) > 0 {
		t.Errorf("of %d cuts of %q: not failed at %v; Retry-After not 3 at %d cuts", len(stream)-1, stream, notFailed, len(noRetryAfter))
	}
	if q := logged(t, addedFrame, `{"type":"MODIFIED","object":{"metadata":{"name":"ERROR","resourceVersion":"7"}}}`+"\n"); q.Failed || q.RetryAfter != 0 {
		t.Errorf("a stream of events only: failed %v, Retry-After %d; want neither", q.Failed, q.RetryAfter)
	}
}

// calmThenBurst is a client that backs off calmly through a long fault (a
// WATCH that fails, retried at 0.8 s doubling to 10 s), lists once the
// server answers, and then lists burst times more at once, each LIST right
// after the one before succeeded.
func calmThenBurst(retries, burst int) []request {
	var reqs []request
	at, wait := ms(0), 800*time.Millisecond
	add := func(sort byte, took time.Duration, failed bool) {
		reqs = append(reqs, request{ID: int64(len(reqs) + 1), At: at, End: at + int64(took), Sort: sort, Failed: failed})
		at += int64(took)
	}
	for range retries {
		add(sortWatch, 10*time.Millisecond, true)
		at += int64(wait)
		wait = min(2*wait, 10*time.Second)
	}
	add(sortList, 20*time.Millisecond, false)
	for range burst {
		at += int64(time.Millisecond)
		add(sortList, 20*time.Millisecond, false)
	}
	at += int64(time.Millisecond)
	reqs = append(reqs, request{ID: int64(len(reqs) + 1), At: at, Sort: sortWatch}) // the WATCH, open
	return reqs
}

// The spacing of consecutive requests is judged, not their average: a
// burst of LISTs asked again at once, each after the one before succeeded,
// storms however calm the retries before it were; the same calm backoff
// without the burst holds.
func TestABurstAfterACalmBackoffIsStormedWhateverItsAverage(t *testing.T) {
	for _, c := range []struct {
		burst int
		want  string
	}{{0, Held}, {1, Held}, {40, Stormed}} {
		reqs := calmThenBurst(12, c.burst)
		m := Measure{Converged: true, HeardCanary: true}
		m.Waits, m.AsAsked, m.Chained = pace(reqs, time.Unix(0, 0), time.Unix(0, reqs[len(reqs)-1].At))
		if got, why := Verdict(m); got != c.want {
			t.Errorf("12 calm retries, then %d LISTs at once: %s (%s; waits %v, %d chained), want %s", c.burst, got, why, m.Waits, m.Chained, c.want)
		}
	}
}
