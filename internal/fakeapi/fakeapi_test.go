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
