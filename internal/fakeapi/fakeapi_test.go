package fakeapi

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// slowBurst opens a WATCH from resourceVersion "1" with timeoutSeconds 10 on a
// server holding 12 changes, under the SlowFrames fault (a second a frame:
// the burst outlasts the bookmark due 2 s before the end, and the end), and
// returns the frames it carries, "TYPE rv" each, and when it ended.
// restart, if set, restarts the watch cache (ending every stream) 5 s in.
func slowBurst(t *testing.T, restart bool) (frames []string, ended time.Duration) {
	synctest.Test(t, func(t *testing.T) {
		s := New()
		for i := range 12 {
			s.Put("ns", fmt.Sprintf("obj-%d", i), "v")
		}
		s.SetFault(SlowFrames)
		start := time.Now()
		secs := int64(10)
		body, err := s.Watch(context.Background(), metav1.ListOptions{ResourceVersion: "1", TimeoutSeconds: &secs})
		if err != nil {
			t.Fatal(err)
		}
		defer body.Close()
		if restart {
			go func() {
				time.Sleep(5 * time.Second)
				s.RestartCache(true)
			}()
		}
		sc := bufio.NewScanner(body)
		for sc.Scan() {
			var ev struct {
				Type   string
				Object metav1.PartialObjectMetadata
			}
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				t.Fatal(err)
			}
			frames = append(frames, ev.Type+" "+ev.Object.ResourceVersion)
		}
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
		ended = time.Since(start)
	})
	return frames, ended
}

// A stream busy past its bookmark's time and its timeout has both due at
// once; a select picked one at random, and the explorer's seed 1448 replayed
// two ways. It sends the bookmark (due first), then ends, every time.
func TestABurstPastTheTimeoutSendsTheBookmarkThenEnds(t *testing.T) {
	want := "ADDED 2 … ADDED 13, BOOKMARK 13, end at 13s"
	for run := range 20 {
		if got := describe(slowBurst(t, false)); got != want {
			t.Fatalf("run %d: %s, want %s", run+1, got, want)
		}
	}
}

// A cache restart during a burst ends the stream once the burst is sent,
// before a bookmark due meanwhile (the explorer's seed 1497 got one or the
// other), every time.
func TestABurstPastACacheRestartEndsWithoutTheBookmark(t *testing.T) {
	want := "ADDED 2 … ADDED 13, end at 12s"
	for run := range 20 {
		if got := describe(slowBurst(t, true)); got != want {
			t.Fatalf("run %d: %s, want %s", run+1, got, want)
		}
	}
}

// describe: the first frame, the frames from the twelfth on, the end (to
// the millisecond: the server acts a few nanoseconds after its timers).
func describe(frames []string, ended time.Duration) string {
	ended = ended.Round(time.Millisecond)
	if len(frames) < 12 {
		return fmt.Sprintf("%d frames (%s), end at %v", len(frames), strings.Join(frames, ", "), ended)
	}
	return fmt.Sprintf("%s … %s, end at %v", frames[0], strings.Join(frames[11:], ", "), ended)
}

// A write at the very instant a stream's timeout comes: whether its event
// goes out before the end must not rest on which of the two goroutines the
// clock wakes first runs first.
func TestAWriteAtTheTimeoutIsSentOneWay(t *testing.T) {
	var first string
	for run := range 50 {
		var got []string
		synctest.Test(t, func(t *testing.T) {
			s := New()
			s.BookmarkEvery = 0
			s.Put("ns", "a", "v")
			secs := int64(10)
			body, err := s.Watch(context.Background(), metav1.ListOptions{ResourceVersion: s.ResourceVersion(), TimeoutSeconds: &secs})
			if err != nil {
				t.Fatal(err)
			}
			defer body.Close()
			go func() {
				time.Sleep(10 * time.Second)
				s.Put("ns", "a", "w")
			}()
			sc := bufio.NewScanner(body)
			for sc.Scan() {
				got = append(got, sc.Text()[:20])
			}
		})
		if run == 0 {
			first = strings.Join(got, ",")
		} else if g := strings.Join(got, ","); g != first {
			t.Fatalf("run 1 sent %q, run %d %q", first, run+1, g)
		}
	}
	t.Logf("sent %q", first)
}

// A restarted apiserver answers every request 503 until its paths are
// installed, then, with a watch cache, every WATCH 429 (Retry-After 1 s)
// while the cache initializes, LISTs served; the cache's history begins
// where it began: a WATCH from before it meets 410 once it is ready.
func TestRestartAnswersAsAStartingServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New()
		s.WatchCache = true
		s.Put("ns", "a", "v")
		from := s.ResourceVersion()
		s.Restart(2*time.Second, 3*time.Second)
		s.Put("ns", "a", "w") // another apiserver's write
		ctx := context.Background()
		if _, err := s.List(ctx, metav1.ListOptions{}); err == nil || !strings.Contains(err.Error(), "before all known HTTP paths") {
			t.Fatalf("LIST at once: %v, want the 503 of paths not installed", err)
		}
		time.Sleep(2 * time.Second)
		if _, err := s.Watch(ctx, metav1.ListOptions{ResourceVersion: from}); err == nil || !strings.Contains(err.Error(), "storage is (re)initializing") {
			t.Fatalf("WATCH 2 s in: %v, want the 429 of a cache initializing", err)
		}
		if _, err := s.List(ctx, metav1.ListOptions{}); err != nil {
			t.Fatalf("LIST 2 s in: %v, want it served", err)
		}
		time.Sleep(3 * time.Second)
		body, err := s.Watch(ctx, metav1.ListOptions{ResourceVersion: from})
		if err != nil {
			t.Fatal(err)
		}
		defer body.Close()
		line, _ := bufio.NewReader(body).ReadString('\n')
		if !strings.Contains(line, `"code":410`) {
			t.Errorf("WATCH from %s once ready: %q, want an ERROR 410 (the cache began after it)", from, line)
		}
		reqs := s.Requests()
		for i, want := range []struct {
			code       int
			retryAfter time.Duration
			starting   bool
		}{{503, 0, true}, {429, time.Second, true}, {0, 0, false}, {0, 0, false}} {
			if q := reqs[i]; q.Code != want.code || q.RetryAfter != want.retryAfter || q.Starting != want.starting {
				t.Errorf("request %d (%s): code %d, Retry-After %v, starting %v; want %d, %v, %v", i, q.Kind, q.Code, q.RetryAfter, q.Starting, want.code, want.retryAfter, want.starting)
			}
		}
	})
}

// CorruptFrames flips one bit of every event frame: the frame stays whole
// (one line, its braces matched) and its JSON is broken; the log says which
// event went out corrupted first.
func TestCorruptFramesBreakTheJSONNotTheFrame(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New()
		s.SetFault(CorruptFrames)
		secs := int64(10)
		body, err := s.Watch(context.Background(), metav1.ListOptions{ResourceVersion: "1", TimeoutSeconds: &secs})
		if err != nil {
			t.Fatal(err)
		}
		s.Put("ns", "a", "v")
		line, err := bufio.NewReader(body).ReadBytes('\n')
		body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if json.Valid(line) {
			t.Fatalf("frame %s is valid JSON", line)
		}
		if strings.Count(string(line), "{") != strings.Count(string(line), "}") || !strings.HasPrefix(string(line), `{"type":"ADDED"`) {
			t.Errorf("frame %s is not whole", line)
		}
		time.Sleep(time.Second)
		if got := s.Requests()[0].Corrupted; got != "2" {
			t.Errorf("Corrupted %q, want the event's resourceVersion 2", got)
		}
	})
}
