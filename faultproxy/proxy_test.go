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
	// listStatus, when set, is the status LISTs answer with.
	listStatus atomic.Int32
}

const listPath = "/apis/example.com/v1alpha1/namespaces/ns/myresources"

func newUpstream(t *testing.T) (*upstream, *Proxy, *http.Client) {
	t.Helper()
	u := &upstream{frames: make(chan string)}
	u.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch kindOf(r) {
		case Watch:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			for {
				select {
				case f := <-u.frames:
					io.WriteString(w, f+"\n")
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

// watch opens a WATCH through the proxy and returns its lines.
func watch(t *testing.T, p *Proxy, c *http.Client) (*bufio.Reader, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+listPath+"?watch=true", nil)
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

const (
	added    = `{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"2"}}}`
	modified = `{"type":"MODIFIED","object":{"metadata":{"name":"a","resourceVersion":"3"}}}`
	deleted  = `{"type":"DELETED","object":{"metadata":{"name":"a","resourceVersion":"4"}}}`
)

// Frames from the server pass one by one; an injected frame goes out at once,
// between two of them, even while the server is silent; the stream goes on.
func TestProxyInjectFrameBetweenServerFrames(t *testing.T) {
	u, p, c := newUpstream(t)
	r, stop := watch(t, p, c)
	defer stop()
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
	_, p, c := newUpstream(t)
	r, stop := watch(t, p, c)
	defer stop()
	if n := p.ExpireWatches(); n != 1 {
		t.Fatalf("expired %d streams", n)
	}
	var ev struct {
		Type   string
		Object metav1.Status
	}
	if err := json.Unmarshal([]byte(readLine(t, r)), &ev); err != nil {
		t.Fatal(err)
	}
	if err := apierrors.FromObject(&ev.Object); ev.Type != "ERROR" || !apierrors.IsResourceExpired(err) {
		t.Fatalf("got %s %v, want an ERROR event with 410 Expired", ev.Type, err)
	}
	if rest, err := io.ReadAll(r); err != nil || len(rest) != 0 {
		t.Fatalf("after the ERROR event: %q, %v; want a clean end of stream", rest, err)
	}
	waitFor(t, func() bool { return p.OpenWatches() == 0 }, "stream still open")
	if c := p.Counts(); c.Expired != 1 || c.UpstreamGone != 0 {
		t.Fatalf("counts %+v: an injected 410 is not the server's", c)
	}
}

// A cut stream ends with an error, not a clean EOF: the client can tell.
func TestProxyCutWatchesBreaksTheStream(t *testing.T) {
	u, p, c := newUpstream(t)
	r, stop := watch(t, p, c)
	defer stop()
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

func TestProxyDropSwallowsEventsOfTheGivenTypes(t *testing.T) {
	u, p, c := newUpstream(t)
	r, stop := watch(t, p, c)
	defer stop()
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
	if resp, _ := get(t, c, p.URL+listPath+"/one-object"); resp.StatusCode != http.StatusOK {
		t.Fatalf("a GET of one object is not a List: %s", resp.Status)
	}
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
	if resp, _ := get(t, c, p.URL+listPath); resp.StatusCode != http.StatusOK {
		t.Fatalf("after Count failures requests pass again: %s", resp.Status)
	}
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
	if resp, _ := get(t, c, p.URL+listPath); resp.StatusCode != http.StatusOK {
		t.Fatalf("after Heal: %s", resp.Status)
	}
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
