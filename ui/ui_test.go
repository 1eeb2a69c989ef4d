package ui_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"rawwatch/queue"
	"rawwatch/ui"
	"rawwatch/watcher"
)

// sse reads Server-Sent Events from a live page's stream.
type sse struct {
	t *testing.T
	r *bufio.Reader
}

func open(t *testing.T, url string) *sse {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET %s: %s %s", url, resp.Status, resp.Header.Get("Content-Type"))
	}
	return &sse{t: t, r: bufio.NewReader(resp.Body)}
}

// next returns the next event's name and data.
func (s *sse) next() (string, map[string]any) {
	s.t.Helper()
	var name string
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			s.t.Fatalf("reading the stream: %v", err)
		}
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimSpace(line[len("event: "):])
		case strings.HasPrefix(line, "data: "):
			var v map[string]any
			if err := json.Unmarshal([]byte(line[len("data: "):]), &v); err != nil {
				s.t.Fatalf("data %q: %v", line, err)
			}
			return name, v
		}
	}
}

// until reads events until one named name satisfies ok.
func (s *sse) until(name string, ok func(map[string]any) bool) map[string]any {
	s.t.Helper()
	for range 100000 {
		if n, v := s.next(); n == name && ok(v) {
			return v
		}
	}
	s.t.Fatalf("no %s event as wanted", name)
	return nil
}

func serve(t *testing.T, h *ui.Hub) string {
	srv := httptest.NewServer(h.Handler("/ui/"))
	t.Cleanup(srv.Close)
	return srv.URL + "/ui/"
}

// The page and its assets are served from the binary.
func TestPageIsEmbedded(t *testing.T) {
	h := ui.New(ui.Options{})
	url := serve(t, h)
	for _, f := range []string{"", "app.js", "style.css"} {
		resp, err := http.Get(url + f)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET %s: %v %v", url+f, resp, err)
		}
		resp.Body.Close()
	}
	// Paths lists what is served (the guard authorizes only these).
	client := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, p := range h.Paths("/ui/") {
		if strings.HasSuffix(p, "/events") {
			continue
		}
		resp, err := client.Get(strings.TrimSuffix(url, "/ui/") + p)
		if err != nil || resp.StatusCode >= 400 {
			t.Fatalf("GET %s, listed by Paths: %v %v", p, resp, err)
		}
		resp.Body.Close()
	}
}

// A browser sees the picture first, then each event in the timeline, with
// a 410 marked as such, and the picture follows the state.
func TestEventsReachTheBrowser(t *testing.T) {
	h := ui.New(ui.Options{StoreLen: func() int { return 3 }, Queue: func(max int) queue.Snapshot {
		return queue.Snapshot{Delayed: []queue.DelayedKey{{Key: "ns/broken", Due: time.Now().Add(time.Minute), Retries: 4}}, DelayedLen: 1}
	}})
	s := open(t, serve(t, h)+"events")
	if name, p := s.next(); name != "picture" || p["state"] != "Listing" || p["store"] != 3.0 {
		t.Fatalf("first event %s %v, want the picture", name, p)
	}
	gone := apierrors.NewResourceExpired("too old resource version: 2 (264)")
	h.Observe(watcher.WatchEnded{Frames: 3, Open: time.Second, Err: gone})
	h.Observe(watcher.StateChanged{From: watcher.Watching, To: watcher.Relisting, Reason: "410: relist"})
	h.Observe(watcher.Received{Type: "ADDED", Key: "ns/<script>", RV: "9"})
	ended := s.until("item", func(v map[string]any) bool { return v["kind"] == "ended" })
	if ended["gone"] != true {
		t.Errorf("a 410 ended the stream, the page is told %v", ended)
	}
	ev := s.until("item", func(v map[string]any) bool { return v["kind"] == "event" })
	if ev["key"] != "ns/<script>" {
		t.Errorf("event %v", ev)
	}
	p := s.until("picture", func(v map[string]any) bool { return v["state"] == "Relisting" })
	delayed := p["queue"].(map[string]any)["delayed"].([]any)[0].(map[string]any)
	if delayed["key"] != "ns/broken" || delayed["retries"] != 4.0 || delayed["dueInMs"].(float64) < 50000 {
		t.Errorf("delayed key in the picture: %v", delayed)
	}
}

// A browser that falls behind by more than the ring is told how much it
// missed, and gets the whole picture again.
func TestABrowserThatFallsBehindIsToldWhatItMissed(t *testing.T) {
	h := ui.New(ui.Options{Ring: 16, FlushEvery: 200 * time.Millisecond})
	s := open(t, serve(t, h)+"events")
	s.until("picture", func(map[string]any) bool { return true })
	for i := range 1000 { // within one flush interval
		h.Observe(watcher.Received{Type: "MODIFIED", Key: "ns/a", RV: fmt.Sprint(i)})
	}
	d := s.until("dropped", func(map[string]any) bool { return true })
	if n := d["n"].(float64); n < 1000-16 {
		t.Errorf("told it missed %v of 1000 events through a ring of 16", n)
	}
	p := s.until("picture", func(map[string]any) bool { return true })
	if p["dropped"].(float64) < 1000-16 {
		t.Errorf("the picture after the drop says %v missed", p["dropped"])
	}
	if h.Dropped() < 1000-16 {
		t.Errorf("Dropped() = %d", h.Dropped())
	}
}

// A viewer that never reads does not slow the controller: a million events
// are observed while its connection is stuck, and it is disconnected once a
// write has waited WriteTimeout. (Without the write deadline it would hold
// a goroutine and a connection for ever; with a blocking Observe, the loop
// below would never end and the test would time out.)
func TestAViewerThatNeverReadsNeverSlowsTheController(t *testing.T) {
	h := ui.New(ui.Options{WriteTimeout: 300 * time.Millisecond, FlushEvery: time.Millisecond})
	url := serve(t, h)
	conn, err := net.Dial("tcp", strings.TrimPrefix(strings.TrimSuffix(url, "/ui/"), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.(*net.TCPConn).SetReadBuffer(4096)
	fmt.Fprintf(conn, "GET /ui/events HTTP/1.1\r\nHost: x\r\n\r\n") // and never read
	for h.Viewers() == 0 {
		time.Sleep(time.Millisecond)
	}
	key := strings.Repeat("k", 200) // fills the socket buffers sooner
	done := make(chan time.Duration)
	go func() {
		start := time.Now()
		for i := range 1_000_000 {
			h.Observe(watcher.Received{Type: "MODIFIED", Key: key, RV: fmt.Sprint(i)})
		}
		done <- time.Since(start)
	}()
	select {
	case d := <-done:
		t.Logf("1,000,000 events observed in %v with a stuck viewer", d)
	case <-time.After(2 * time.Minute):
		t.Fatal("Observe blocked behind a viewer that never reads")
	}
	// Still not reading: once a write has waited WriteTimeout, the server
	// gives up on it and frees its goroutine. (What the stuck client then
	// sees is the kernel's business: here, the bytes that fit in the
	// buffers, and no end of connection.)
	deadline := time.Now().Add(30 * time.Second)
	for h.Viewers() > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the stuck viewer was never disconnected")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// At most MaxClients viewers at once.
func TestViewersAreBounded(t *testing.T) {
	url := serve(t, ui.New(ui.Options{MaxClients: 2})) + "events"
	open(t, url)
	open(t, url)
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a third viewer got %s, want 503", resp.Status)
	}
}

// openAs opens an event stream with extra request headers; it returns the
// status and, when 200, the stream.
func openAs(t *testing.T, url string, header map[string]string) (int, *sse) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp.StatusCode, &sse{t: t, r: bufio.NewReader(resp.Body)}
}

// A stream ends after MaxStream (and a random part of a quarter more), so
// that a viewer whose grant was taken away is authorized again, and fails,
// when its browser reconnects; and a viewer that stopped reading gives its
// slot back.
func TestAStreamEndsAfterItsLifetime(t *testing.T) {
	h := ui.New(ui.Options{MaxStream: 200 * time.Millisecond, PictureEvery: 10 * time.Millisecond})
	_, s := openAs(t, serve(t, h)+"events", nil)
	for {
		if _, err := s.r.ReadString('\n'); err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("the stream did not end after its lifetime: %v", err)
			}
			break
		}
	}
	for deadline := time.Now().Add(30 * time.Second); h.Viewers() > 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d viewers after the stream ended", h.Viewers())
		}
	}
}

// One viewer holds at most MaxPerViewer streams: another still gets in.
func TestOneViewerCannotHoldEverySlot(t *testing.T) {
	h := ui.New(ui.Options{MaxClients: 8, MaxPerViewer: 4, Viewer: func(r *http.Request) string { return r.Header.Get("X-Viewer") }})
	url := serve(t, h) + "events"
	var codes []int
	for range 8 {
		code, _ := openAs(t, url, map[string]string{"X-Viewer": "greedy"})
		codes = append(codes, code)
	}
	if want := []int{200, 200, 200, 200, 503, 503, 503, 503}; fmt.Sprint(codes) != fmt.Sprint(want) {
		t.Errorf("one viewer opening 8 streams got %v, want %v", codes, want)
	}
	if code, _ := openAs(t, url, map[string]string{"X-Viewer": "other"}); code != 200 {
		t.Errorf("another viewer then got %d, want 200", code)
	}
}

// A browser that reconnects (after a stream's lifetime, say) says the last
// event it saw (Last-Event-ID), and gets only the ones after it.
func TestAReconnectingBrowserGetsOnlyWhatItHasNotSeen(t *testing.T) {
	h := ui.New(ui.Options{})
	for i := range 5 {
		h.Observe(watcher.Received{Type: "MODIFIED", Key: "ns/a", RV: fmt.Sprint(i)})
	}
	_, s := openAs(t, serve(t, h)+"events", map[string]string{"Last-Event-ID": "2"})
	if it := s.until("item", func(map[string]any) bool { return true }); it["seq"] != 3.0 {
		t.Errorf("after Last-Event-ID 2 the first event sent is %v, want seq 3", it["seq"])
	}
}
