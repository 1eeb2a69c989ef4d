package faultproxy_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"rawwatch/faultproxy"
	"rawwatch/internal/controlplane"
	"rawwatch/internal/testkit"
	"rawwatch/wire"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// through asks the proxy p what the recording named file asked
// kube-apiserver (its resourceVersion, if any, replaced by rv) and
// records the answer the same way.
func through(t *testing.T, cp *controlplane.ControlPlane, p *faultproxy.Proxy, file string, rv int64) (want, got wire.Exchange) {
	t.Helper()
	want, err := wire.ReadExchange(file)
	if err != nil {
		t.Fatal(err)
	}
	return want, ask(t, cp, p, want, rv)
}

// ask asks the proxy p what want asked (its resourceVersion replaced by rv).
func ask(t *testing.T, cp *controlplane.ControlPlane, p *faultproxy.Proxy, want wire.Exchange, rv int64) wire.Exchange {
	t.Helper()
	path, query, _ := strings.Cut(strings.TrimPrefix(want.Request, "GET "), "?")
	q, err := url.ParseQuery(query)
	if err != nil {
		t.Fatal(err)
	}
	if q.Has("resourceVersion") {
		q.Set("resourceVersion", strconv.FormatInt(rv, 10))
	}
	cfg := cp.APIServer.ConfigVia(p.URL)
	cfg.DisableCompression = true
	c, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodGet, p.URL+path+"?"+q.Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return wire.Capture(ctx, c, req, time.Duration(want.Window))
}

// same fails the test if the proxy's answer differs from kube-apiserver's.
func same(t *testing.T, file string, want, got wire.Exchange) {
	t.Helper()
	if err := wire.Same(want, got); err != nil {
		t.Errorf("%s (%s): the proxy's answer differs from kube-apiserver's: %v", file, want.Situation, err)
	} else {
		t.Logf("%s: %d %s %q, as recorded", file, got.Status, got.End, wire.Mask(got.Body))
	}
}

func proxyFor(t *testing.T, cp *controlplane.ControlPlane) *faultproxy.Proxy {
	t.Helper()
	p, err := cp.FaultProxy(cp.APIServer)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// currentRV is the resourceVersion of a fresh LIST of the default namespace.
func currentRV(t *testing.T, cp *controlplane.ControlPlane) int64 {
	t.Helper()
	c, err := rest.HTTPClientFor(cp.Config())
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, cp.APIServer.URL+"/apis/example.com/v1alpha1/namespaces/default/myresources?limit=1", nil)
	ex := wire.Capture(context.Background(), c, req, 5*time.Second)
	i := strings.Index(ex.Body, `"resourceVersion":"`)
	if ex.Status != http.StatusOK || i < 0 {
		t.Fatalf("LIST: %d %s", ex.Status, ex.Body)
	}
	rest := ex.Body[i+len(`"resourceVersion":"`):]
	rv, err := strconv.ParseInt(rest[:strings.IndexByte(rest, '"')], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return rv
}

// CompactedAt answers a WATCH from before the compaction point as
// kube-apiserver with its watch cache answers one from before the cache's
// window, and passes one from the point on, which the server serves: the
// change made meanwhile arrives, the stream stays open.
func TestCompactedAtAnswersAsKubeAPIServerDid(t *testing.T) {
	cp := withSamples(t)
	p := proxyFor(t, cp)
	point := currentRV(t, cp)
	p.CompactedAt(point)
	want, got := through(t, cp, p, "fault-watch-compacted-cached.json", 2)
	same(t, "fault-watch-compacted-cached.json", want, got)

	want, err := wire.ReadExchange("fault-compaction-under-watch-cached.json")
	if err != nil {
		t.Fatal(err)
	}
	changed := make(chan error, 1)
	go func() {
		time.Sleep(time.Second)
		changed <- patchHello(cp, "changed after a compaction watch cache on")
	}()
	got = ask(t, cp, p, want, point)
	if err := <-changed; err != nil {
		t.Fatal(err)
	}
	same(t, "fault-compaction-under-watch-cached.json", want, got)
}

// patchHello changes the sample hello's message, straight to the
// apiserver, as the recorder did (a plain Go client: the field manager is
// Go-http-client).
func patchHello(cp *controlplane.ControlPlane, message string) error {
	c, err := rest.HTTPClientFor(cp.Config())
	if err != nil {
		return err
	}
	req, err := http.NewRequest(http.MethodPatch, cp.APIServer.URL+"/apis/example.com/v1alpha1/namespaces/default/myresources/hello",
		strings.NewReader(fmt.Sprintf(`{"spec":{"message":%q}}`, message)))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/merge-patch+json")
	req.Header.Set("User-Agent", "Go-http-client/2.0")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("PATCH hello: %s", resp.Status)
	}
	return nil
}

// TooLargeRV answers a WATCH, a LIST and a WatchList from a resourceVersion
// the server has not reached as kube-apiserver with its watch cache does:
// the WATCH established and silent, the LIST 504 after 3 s, the WatchList
// an ERROR event after 3 s.
func TestTooLargeRVAnswersAsKubeAPIServerDid(t *testing.T) {
	cp := testkit.Shared.Get(t)
	p := proxyFor(t, cp)
	p.TooLargeRV(true)
	future := currentRV(t, cp) + 1000
	for _, file := range []string{"fault-watch-future-cached.json", "fault-list-future-cached.json", "fault-watchlist-future-cached.json"} {
		want, got := through(t, cp, p, file, future)
		same(t, file, want, got)
	}
}

// Throttle answers a LIST and a WATCH as API Priority and Fairness answers
// those of a priority level it sheds.
func TestThrottleAnswersAsAPIPriorityAndFairnessDid(t *testing.T) {
	cp := testkit.Shared.Get(t)
	p := proxyFor(t, cp)
	p.Throttle(true)
	rv := currentRV(t, cp)
	for _, file := range []string{"fault-throttled-list.json", "fault-throttled-watch.json"} {
		want, got := through(t, cp, p, file, rv)
		same(t, file, want, got)
	}
}

// IgnoreSendInitialEvents answers a WatchList as kube-apiserver without its
// WatchList feature answers the same WATCH without sendInitialEvents (a
// server that does not implement it): every object ADDED, no bookmark, the
// stream open. The recording's objects are the samples, in the default
// namespace.
func TestIgnoreSendInitialEventsAnswersAsKubeAPIServerDid(t *testing.T) {
	cp := withSamples(t)
	p := proxyFor(t, cp)
	p.IgnoreSendInitialEvents(true)
	want, err := wire.ReadExchange("fault-legacy-watch-gate-off.json")
	if err != nil {
		t.Fatal(err)
	}
	// The recording is of the WATCH without sendInitialEvents; the proxy is
	// asked the WatchList.
	want.Request = "GET /apis/example.com/v1alpha1/namespaces/default/myresources?allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&sendInitialEvents=true&watch=true"
	got := ask(t, cp, p, want, 0)
	same(t, "fault-legacy-watch-gate-off.json", want, got)
}

// Every recording a fault replays (Replays) is compared with the proxy's
// answer by a test of this file.
func TestEveryReplayIsComparedWithItsRecording(t *testing.T) {
	src, err := os.ReadFile("recorded_test.go")
	if err != nil {
		t.Fatal(err)
	}
	for method, files := range faultproxy.Replays {
		for _, file := range files {
			if !strings.Contains(string(src), `"`+file+`"`) {
				t.Errorf("%s replays %s, which no test of recorded_test.go compares", method, file)
			}
			if _, err := wire.ReadExchange(file); err != nil {
				t.Errorf("%s: %v", method, err)
			}
		}
	}
}

// withSamples is the shared control plane with the repository's sample
// MyResources applied, the objects the recordings hold.
func withSamples(t *testing.T) *controlplane.ControlPlane {
	t.Helper()
	cp := testkit.Shared.Get(t)
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if err := controlplane.Apply(context.Background(), cp.Config(), filepath.Join(root, "testdata", "samples", "myresources.yaml")); err != nil {
		t.Fatal(err)
	}
	return cp
}
