package faultproxy

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// upstream is a fake apiserver: LISTs answer an empty list, WATCHes stream
// whatever the test sends on frames, anything else answers {}.
type upstream struct {
	srv    *httptest.Server
	frames chan string
	// chunks are written to the open WATCH as they are, each flushed on
	// its own: a frame split across writes.
	chunks chan string
	// listStatus, when set, is the status LISTs answer with.
	listStatus atomic.Int32
	// watching is the number of WATCHes the server is serving.
	watching atomic.Int32
	// lastQuery is the query of the last request it served.
	lastQuery atomic.Value
}

const listPath = "/apis/example.com/v1alpha1/namespaces/ns/myresources"

func newUpstream(t *testing.T) (*upstream, *Proxy, *http.Client) {
	t.Helper()
	u := &upstream{frames: make(chan string), chunks: make(chan string)}
	u.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.lastQuery.Store(r.URL.RawQuery)
		switch KindOf(r) {
		case Watch:
			u.watching.Add(1)
			defer u.watching.Add(-1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			for {
				select {
				case f := <-u.frames:
					io.WriteString(w, f+"\n")
					w.(http.Flusher).Flush()
				case c := <-u.chunks:
					io.WriteString(w, c)
					w.(http.Flusher).Flush()
				case <-r.Context().Done():
					return
				}
			}
		case List:
			if code := u.listStatus.Load(); code != 0 {
				w.WriteHeader(int(code))
				io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Expired","code":410}`)
				return
			}
			io.WriteString(w, `{"kind":"MyResourceList","items":[],"metadata":{"resourceVersion":"1"}}`)
		default:
			io.WriteString(w, `{}`)
		}
	}))
	t.Cleanup(u.srv.Close)
	// The proxy presents the upstream's own certificate, which the
	// upstream's client already trusts.
	p, err := New(u.srv.URL, u.srv.TLS.Certificates[0], u.srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return u, p, u.srv.Client()
}

// watching is newUpstream with a WATCH open through the proxy (see watch)
// until the test ends; it returns the WATCH's lines too.
func watching(t *testing.T) (*upstream, *Proxy, *bufio.Reader) {
	t.Helper()
	u, p, c := newUpstream(t)
	r, stop := watch(t, p, c)
	t.Cleanup(stop)
	return u, p, r
}

// watch opens a WATCH through the proxy and returns its lines.
func watch(t *testing.T, p *Proxy, c *http.Client) (*bufio.Reader, func()) {
	t.Helper()
	return watchQuery(t, p, c, "watch=true")
}

// watchQuery opens a WATCH with the given query and returns its lines.
func watchQuery(t *testing.T, p *Proxy, c *http.Client, query string) (*bufio.Reader, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+listPath+"?"+query, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("watch: %s", resp.Status)
	}
	waitFor(t, func() bool { return p.OpenWatches() == 1 }, "watch not registered")
	return bufio.NewReader(resp.Body), func() { cancel(); resp.Body.Close() }
}

func waitFor(t *testing.T, cond func() bool, msg string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(msg)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func readLine(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	l, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("reading a frame: %v (got %q)", err, l)
	}
	return strings.TrimSuffix(l, "\n")
}

func get(t *testing.T, c *http.Client, u string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// passes GETs u and fails the test, naming what, unless it is answered 200.
func passes(t *testing.T, c *http.Client, u, what string) {
	t.Helper()
	if resp, body := get(t, c, u); resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %s %.200s", what, resp.Status, body)
	}
}

// closed waits until the stream is gone from the proxy and from the server,
// so that the next frame sent goes to the next stream.
func (u *upstream) closed(t *testing.T, p *Proxy) {
	t.Helper()
	waitFor(t, func() bool { return p.OpenWatches() == 0 && u.watching.Load() == 0 }, "the stream is still open")
}

const (
	added    = `{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"2"}}}`
	modified = `{"type":"MODIFIED","object":{"metadata":{"name":"a","resourceVersion":"3"}}}`
	deleted  = `{"type":"DELETED","object":{"metadata":{"name":"a","resourceVersion":"4"}}}`
	bookmark = `{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"5"}}}`
	// initialEnd ends a WatchList's initial events.
	initialEnd = `{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"5","annotations":{"k8s.io/initial-events-end":"true"}}}}`
)

// errorEvent reads a frame that must be an ERROR event and returns its Status
// as an error.
func errorEvent(t *testing.T, r *bufio.Reader) error {
	t.Helper()
	var ev struct {
		Type   string
		Object metav1.Status
	}
	if err := json.Unmarshal([]byte(readLine(t, r)), &ev); err != nil {
		t.Fatal(err)
	}
	if ev.Type != "ERROR" {
		t.Fatalf("got a %s event, want ERROR", ev.Type)
	}
	return apierrors.FromObject(&ev.Object)
}

// endsCleanly: nothing more on the stream, and a clean end of it.
func endsCleanly(t *testing.T, r *bufio.Reader) {
	t.Helper()
	if rest, err := io.ReadAll(r); err != nil || len(rest) != 0 {
		t.Fatalf("after the ERROR event: %q, %v; want a clean end of stream", rest, err)
	}
}

// Frames from the server pass one by one; an injected frame goes out at once,
// between two of them, even while the server is silent; the stream goes on.
func TestProxyInjectFrameBetweenServerFrames(t *testing.T) {
	u, p, r := watching(t)
	u.frames <- added
	if l := readLine(t, r); l != added {
		t.Fatalf("first frame %q", l)
	}
	if n := p.InjectFrame([]byte(`{"type":"SURPRISE","object":{}}`)); n != 1 {
		t.Fatalf("injected into %d streams", n)
	}
	if l := readLine(t, r); l != `{"type":"SURPRISE","object":{}}` {
		t.Fatalf("injected frame %q", l)
	}
	u.frames <- modified
	if l := readLine(t, r); l != modified {
		t.Fatalf("frame after injection %q", l)
	}
	if c := p.Counts(); c.Frames != 2 || c.Injected != 1 || c.Watches != 1 {
		t.Fatalf("counts %+v", c)
	}
}

// ExpireWatches ends a stream as the apiserver does after a compaction: an
// ERROR event with a 410 Expired Status, then a clean end of stream.
func TestProxyExpireWatchesSendsErrorEventThenEnds(t *testing.T) {
	_, p, r := watching(t)
	if n := p.ExpireWatches(); n != 1 {
		t.Fatalf("expired %d streams", n)
	}
	if err := errorEvent(t, r); !apierrors.IsResourceExpired(err) {
		t.Fatalf("got %v, want an ERROR event with 410 Expired", err)
	}
	endsCleanly(t, r)
	waitFor(t, func() bool { return p.OpenWatches() == 0 }, "stream still open")
	if c := p.Counts(); c.Expired != 1 || c.UpstreamGone != 0 {
		t.Fatalf("counts %+v: an injected 410 is not the server's", c)
	}
}

// A cut stream ends with an error, not a clean EOF: the client can tell.
func TestProxyCutWatchesBreaksTheStream(t *testing.T) {
	u, p, r := watching(t)
	u.frames <- added
	readLine(t, r)
	if n := p.CutWatches(); n != 1 {
		t.Fatalf("cut %d", n)
	}
	if _, err := io.ReadAll(r); err == nil {
		t.Fatal("a cut stream must end with an error")
	}
	if c := p.Counts(); c.Cut != 1 {
		t.Fatalf("counts %+v", c)
	}
}

// FlapCut cuts every stream after its first frame, an event or a bookmark,
// the streams opened after it was switched on and the one open before alike;
// Heal ends it.
func TestProxyFlapCutCutsEveryStreamAfterItsFirstFrame(t *testing.T) {
	u, p, c := newUpstream(t)
	r, stop := watch(t, p, c)
	u.frames <- added
	readLine(t, r)
	p.FlapCut(true)
	for i, frame := range []string{modified, added, bookmark} {
		if i > 0 {
			r, stop = watch(t, p, c)
		}
		u.frames <- frame
		if l := readLine(t, r); l != frame {
			t.Fatalf("stream %d: got %q, want %q", i, l, frame)
		}
		if _, err := io.ReadAll(r); err == nil {
			t.Fatalf("stream %d: a clean end; want it cut after the frame", i)
		}
		stop()
		u.closed(t, p)
	}
	if err := p.Heal(); err != nil {
		t.Fatal(err)
	}
	r, stop = watch(t, p, c)
	defer stop()
	for _, frame := range []string{added, modified} {
		u.frames <- frame
		if l := readLine(t, r); l != frame {
			t.Fatalf("after Heal: got %q, want %q", l, frame)
		}
	}
	if c := p.Counts(); c.Cut != 3 || c.Frames != 6 || c.Watches != 4 {
		t.Fatalf("counts %+v", c)
	}
}

// FlapError lets a bookmark pass, and ends the stream after its first event
// with an ERROR event carrying a 500, then a clean end, as the apiserver does.
func TestProxyFlapErrorEndsEveryStreamWithA500AfterItsFirstEvent(t *testing.T) {
	u, p, c := newUpstream(t)
	p.FlapError(true)
	for i := range 2 {
		r, stop := watch(t, p, c)
		for _, frame := range []string{bookmark, added} {
			u.frames <- frame
			if l := readLine(t, r); l != frame {
				t.Fatalf("stream %d: got %q, want %q", i, l, frame)
			}
		}
		if err := errorEvent(t, r); !apierrors.IsInternalError(err) {
			t.Fatalf("stream %d: got %v, want an ERROR event with a 500", i, err)
		}
		endsCleanly(t, r)
		stop()
		u.closed(t, p)
	}
	if c := p.Counts(); c.ErrorEvents != 2 || c.Frames != 4 || c.Cut != 0 {
		t.Fatalf("counts %+v", c)
	}
}

// A frozen proxy opens WATCH streams and holds every frame; thawed, it passes
// them on in order. A frozen stream ends when its client gives up.
func TestProxyFreezeHoldsFramesUntilThawed(t *testing.T) {
	u, p, c := newUpstream(t)
	p.Freeze(true)
	r, stop := watch(t, p, c)
	got := make(chan string)
	go func() {
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				close(got)
				return
			}
			got <- strings.TrimSuffix(l, "\n")
		}
	}()
	u.frames <- added
	if n := p.InjectFrame([]byte(`{"type":"SURPRISE","object":{}}`)); n != 1 {
		t.Fatalf("injected into %d streams", n)
	}
	select {
	case l := <-got:
		t.Fatalf("a frozen stream passed %q", l)
	case <-time.After(300 * time.Millisecond):
	}
	p.Freeze(false)
	// (The injected frame goes between two of the server's: before or after.)
	var thawed []string
	for range 2 {
		select {
		case l := <-got:
			thawed = append(thawed, l)
		case <-time.After(5 * time.Second):
			t.Fatalf("after the thaw: only %q", thawed)
		}
	}
	if slices.Sort(thawed); !slices.Equal(thawed, []string{added, `{"type":"SURPRISE","object":{}}`}) {
		t.Fatalf("after the thaw: %q", thawed)
	}
	stop()
	u.closed(t, p)

	p.Freeze(true)
	_, stop = watch(t, p, c)
	u.frames <- modified
	stop()
	u.closed(t, p)
	if c := p.Counts(); c.Frames != 1 || c.Injected != 1 {
		t.Fatalf("counts %+v", c)
	}
}

// WatchListFail ends a WatchList after its first initial event; a WATCH
// without initial events, and a WatchList's live events after the
// initial-events-end bookmark, pass.
func TestProxyWatchListFailEndsAWatchListAfterItsFirstInitialEvent(t *testing.T) {
	u, p, c := newUpstream(t)
	p.WatchListFail(true)
	pass := func(r *bufio.Reader, frames ...string) {
		t.Helper()
		for _, frame := range frames {
			u.frames <- frame
			if l := readLine(t, r); l != frame {
				t.Fatalf("got %q, want %q", l, frame)
			}
		}
	}
	r, stop := watch(t, p, c)
	pass(r, added, modified)
	stop()
	u.closed(t, p)

	r, stop = watchQuery(t, p, c, "watch=true&sendInitialEvents=true")
	pass(r, added)
	if err := errorEvent(t, r); !apierrors.IsInternalError(err) {
		t.Fatalf("got %v, want an ERROR event with a 500", err)
	}
	endsCleanly(t, r)
	stop()
	u.closed(t, p)

	// An empty initial state: the bookmark first, then live events.
	r, stop = watchQuery(t, p, c, "watch=true&sendInitialEvents=true")
	defer stop()
	pass(r, initialEnd, added, modified)
	if c := p.Counts(); c.ErrorEvents != 1 {
		t.Fatalf("counts %+v", c)
	}
}

// The meter counts LISTs (further pages apart) and WATCHes, not the rest;
// wrapped around a client's transport it counts what a refusing proxy never
// sees.
func TestProxyMeterCountsListsPagesAndWatches(t *testing.T) {
	_, p, c := newUpstream(t)
	start := time.Now()
	get(t, c, p.URL+listPath)
	get(t, c, p.URL+listPath+"?continue=abc")
	get(t, c, p.URL+listPath+"/one-object")
	_, stop := watch(t, p, c)
	stop()
	want := Rate{Lists: 1, Pages: 1, Watches: 1}
	if r := p.Meter().Between(start, time.Now()); r.Lists != want.Lists || r.Pages != want.Pages || r.Watches != want.Watches || r.Requests() != 2 {
		t.Fatalf("the proxy metered %+v, want %+v", r, want)
	}

	client := NewMeter()
	tr := c.Transport.(*http.Transport).Clone()
	tr.DisableKeepAlives = true
	refused := &http.Client{Transport: client.Wrap(tr)}
	p.Refuse()
	if _, err := refused.Get(p.URL + listPath); err == nil {
		t.Fatal("the proxy did not refuse")
	}
	if r := client.Between(start, time.Now()); r.Lists != 1 {
		t.Fatalf("the client's meter: %+v, want one LIST", r)
	}
	if r := p.Meter().Between(start, time.Now()); r.Lists != 1 {
		t.Fatalf("the proxy metered %+v: it refused the second LIST", r)
	}
}

func TestProxyMeterRateAndBusiestMinute(t *testing.T) {
	m := NewMeter()
	t0 := time.Now()
	for _, s := range []int{0, 10, 20, 61, 62, 63, 64} {
		m.requests = append(m.requests, metered{at: t0.Add(time.Duration(s) * time.Second), kind: Watch})
	}
	m.requests = append(m.requests, metered{at: t0.Add(30 * time.Second), kind: List, page: true})
	r := m.Between(t0, t0.Add(2*time.Minute))
	if r.Watches != 7 || r.Pages != 1 || r.Lists != 0 || r.PerMinute(r.Requests()) != 3.5 {
		t.Fatalf("%+v, %.1f a minute", r, r.PerMinute(r.Requests()))
	}
	if n := m.Busiest(t0, t0.Add(2*time.Minute), time.Minute); n != 6 {
		t.Fatalf("busiest minute %d, want 6 (from 10 s to 70 s)", n)
	}
	if n := m.Busiest(t0, t0.Add(64*time.Second), time.Minute); n != 5 {
		t.Fatalf("busiest minute before 64 s: %d, want 5", n)
	}
}

func TestProxyDropSwallowsEventsOfTheGivenTypes(t *testing.T) {
	u, p, r := watching(t)
	p.Drop("DELETED")
	go func() {
		for _, f := range []string{added, deleted, modified} {
			u.frames <- f
		}
	}()
	if l := readLine(t, r); l != added {
		t.Fatal(l)
	}
	if l := readLine(t, r); l != modified {
		t.Fatalf("got %q: the DELETED event must have been dropped", l)
	}
	if c := p.Counts(); c.Dropped != 1 || c.Frames != 2 {
		t.Fatalf("counts %+v", c)
	}
}

// Fail answers with the apiserver's wording: a Status the apimachinery
// helpers understand, Retry-After in the header and in the details; only
// the chosen kinds, only Count times.
func TestProxyFailAnswersWithAStatus(t *testing.T) {
	_, p, c := newUpstream(t)
	p.Fail(Failure{Kinds: List, Code: http.StatusTooManyRequests, RetryAfter: 1500 * time.Millisecond, Count: 2})
	passes(t, c, p.URL+listPath+"/one-object", "a GET of one object is not a List")
	for i := range 2 {
		resp, body := get(t, c, p.URL+listPath)
		var st metav1.Status
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatal(err)
		}
		err := apierrors.FromObject(&st)
		secs, _ := apierrors.SuggestsClientDelay(err)
		if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "2" || !apierrors.IsTooManyRequests(err) || secs != 2 {
			t.Fatalf("request %d: %s Retry-After %q, %v (delay %d)", i, resp.Status, resp.Header.Get("Retry-After"), err, secs)
		}
	}
	passes(t, c, p.URL+listPath, "after Count failures requests pass again")
	p.Fail(Failure{Code: http.StatusGone})
	resp, body := get(t, c, p.URL+listPath+"?watch=true")
	var st metav1.Status
	json.Unmarshal([]byte(body), &st)
	if resp.StatusCode != 410 || !apierrors.IsResourceExpired(apierrors.FromObject(&st)) {
		t.Fatalf("410: %s %s", resp.Status, body)
	}
	if err := p.Heal(); err != nil {
		t.Fatal(err)
	}
	passes(t, c, p.URL+listPath, "after Heal")
	if c := p.Counts(); c.Failed != 3 || c.Lists != 4 || c.Watches != 1 || c.Others != 1 || c.Total() != 6 {
		t.Fatalf("counts %+v", c)
	}
}

func TestProxyDelayHoldsRequests(t *testing.T) {
	_, p, c := newUpstream(t)
	p.Delay(Other, 200*time.Millisecond)
	start := time.Now()
	get(t, c, p.URL+listPath+"/x")
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Fatalf("delayed request took %v", d)
	}
	p.Delay(All, 0)
}

func TestProxyRefuseForThenAcceptAgain(t *testing.T) {
	_, p, c := newUpstream(t)
	c.Transport.(*http.Transport).DisableKeepAlives = true
	p.RefuseFor(300 * time.Millisecond)
	if _, err := c.Get(p.URL + listPath); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("while refusing: %v", err)
	}
	waitFor(t, func() bool {
		resp, err := c.Get(p.URL + listPath)
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	}, "the proxy never accepted again")
	if c := p.Counts(); c.Refused != 1 {
		t.Fatalf("counts %+v", c)
	}
}

// The server's own 410s are counted apart from the proxy's: an HTTP 410
// response and an ERROR event with code 410.
func TestProxyUpstreamGoneIsCounted(t *testing.T) {
	u, p, c := newUpstream(t)
	r, stop := watch(t, p, c)
	defer stop()
	u.frames <- `{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired"}}`
	readLine(t, r)
	u.listStatus.Store(http.StatusGone)
	if resp, _ := get(t, c, p.URL+listPath); resp.StatusCode != http.StatusGone {
		t.Fatal(resp.Status)
	}
	if c := p.Counts(); c.UpstreamGone != 2 {
		t.Fatalf("counts %+v", c)
	}
}

// An ERROR frame the server writes in two pieces, flushed apart, passes
// as one frame and is counted as the server's 410; the stream then ends
// cleanly when the server ends it.
func TestProxyAnErrorFrameSplitAcrossWritesIsOneFrame(t *testing.T) {
	u, p, r := watching(t)
	frame := `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (2)","reason":"Expired","code":410}}`
	half := strings.Index(frame, "ERROR") + 2
	u.chunks <- frame[:half]
	time.Sleep(50 * time.Millisecond) // the first piece reaches the proxy alone
	u.chunks <- frame[half:] + "\n"
	if got := readLine(t, r); got != frame {
		t.Fatalf("got %q, want the frame whole", got)
	}
	if c := p.Counts(); c.UpstreamGone != 1 || c.Frames != 1 {
		t.Fatalf("counts %+v; want the server's 410 counted once, one frame", c)
	}
}

func TestProxyControlHandler(t *testing.T) {
	_, p, c := newUpstream(t)
	ctl := httptest.NewServer(p.Handler())
	defer ctl.Close()
	post := func(path string) (int, string) {
		resp, err := http.PostForm(ctl.URL+path, url.Values{})
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, out := post("/fail?code=503&count=1&kinds=list"); code != 200 || !strings.Contains(out, "503") {
		t.Fatalf("fail: %d %s", code, out)
	}
	if resp, _ := get(t, c, p.URL+listPath); resp.StatusCode != 503 {
		t.Fatalf("after POST /fail: %s", resp.Status)
	}
	if code, out := post("/nope"); code != 400 || !strings.Contains(out, "unknown fault") {
		t.Fatalf("unknown command: %d %s", code, out)
	}
	if code, _ := post("/fail?code=200"); code != 400 {
		t.Fatal("a non-error code must be refused")
	}
	if code, out := post("/cut"); code != 200 || out != "cut 0 watch stream(s)\n" {
		t.Fatalf("cut: %d %q", code, out)
	}
	if code, out := post("/flap-cut"); code != 200 || out != "flap-cut on\n" || !p.flapCut.Load() {
		t.Fatalf("flap-cut: %d %q", code, out)
	}
	if code, out := post("/flap-cut?on=false"); code != 200 || out != "flap-cut off\n" || p.flapCut.Load() {
		t.Fatalf("flap-cut?on=false: %d %q", code, out)
	}
	if code, _ := post("/freeze?on=maybe"); code != 400 {
		t.Fatal("on=maybe must be refused")
	}
	resp, body := get(t, http.DefaultClient, ctl.URL+"/counts")
	var counts Counts
	if err := json.Unmarshal([]byte(body), &counts); err != nil || resp.StatusCode != 200 || counts.Failed != 1 {
		t.Fatalf("counts: %s %s %v", resp.Status, body, err)
	}
	if _, help := get(t, http.DefaultClient, ctl.URL+"/"); !strings.Contains(help, "expire") || !strings.Contains(help, "retry-after") {
		t.Fatalf("help:\n%s", help)
	}
}

func TestProxyEveryRunsUntilCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var n atomic.Int32
	done := make(chan struct{})
	go func() { Every(ctx, 10*time.Millisecond, func() { n.Add(1) }); close(done) }()
	waitFor(t, func() bool { return n.Load() >= 3 }, "fault not repeated")
	cancel()
	<-done
	after := n.Load()
	time.Sleep(30 * time.Millisecond)
	if n.Load() != after {
		t.Fatal("Every kept going after its context ended")
	}
}

func TestProxyFailureStatusCodes(t *testing.T) {
	for code, check := range map[int]func(error) bool{
		410: apierrors.IsResourceExpired, 429: apierrors.IsTooManyRequests,
		500: apierrors.IsInternalError, 503: apierrors.IsServiceUnavailable,
		502: func(err error) bool { var s apierrors.APIStatus; return errors.As(err, &s) && s.Status().Code == 502 },
	} {
		st := Failure{Code: code}.status()
		if err := apierrors.FromObject(st); int(st.Code) != code || !check(err) {
			t.Errorf("%d: %v", code, fmt.Sprint(err))
		}
	}
}
