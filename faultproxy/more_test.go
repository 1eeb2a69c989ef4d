package faultproxy

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestProxyWatchListEndEndsAWatchListCleanlyBeforeItsBookmark(t *testing.T) {
	u, p, c := newUpstream(t)
	p.WatchListEnd(true)
	r, stop := watchQuery(t, p, c, "watch=true&sendInitialEvents=true")
	u.frames <- added
	if l := readLine(t, r); l != added {
		t.Fatalf("got %q, want %q", l, added)
	}
	endsCleanly(t, r)
	stop()
	u.closed(t, p)

	// A plain WATCH passes, and so does a WatchList whose bookmark came first.
	r, stop = watch(t, p, c)
	for _, f := range []string{added, modified} {
		u.frames <- f
		if l := readLine(t, r); l != f {
			t.Fatalf("got %q, want %q", l, f)
		}
	}
	stop()
	u.closed(t, p)
	r, stop = watchQuery(t, p, c, "watch=true&sendInitialEvents=true")
	defer stop()
	for _, f := range []string{initialEnd, added, modified} {
		u.frames <- f
		if l := readLine(t, r); l != f {
			t.Fatalf("got %q, want %q", l, f)
		}
	}
}

// TooLargeRV answers as kube-apiserver behind the resourceVersion asked: a
// LIST or a WatchList from it after the apiserver's wait, 504 (as a status,
// as an ERROR event); a WATCH from it at once with 200, then nothing until
// the fault ends, and then the server's stream from there. A quorum LIST,
// a LIST from "0", pass.
func TestProxyTooLargeRVAnswersRequestsFromAResourceVersion(t *testing.T) {
	u, p, c := newUpstream(t)
	p.TooLargeRV(true)
	for _, q := range []string{"", "?resourceVersion=0"} {
		passes(t, c, p.URL+listPath+q, "LIST"+q)
	}
	tooLarge := func(what string, code int, body string) {
		t.Helper()
		var st metav1.Status
		if code == http.StatusOK { // an ERROR event
			var ev struct{ Object metav1.Status }
			if err := json.Unmarshal([]byte(body), &ev); err != nil {
				t.Fatalf("%s: %q: %v", what, body, err)
			}
			st = ev.Object
		} else if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatalf("%s: %q: %v", what, body, err)
		}
		err := apierrors.FromObject(&st)
		if !apierrors.IsTimeout(err) || !apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge) || !strings.Contains(body, "Too large resource version: 42") {
			t.Fatalf("%s: %d %s", what, code, body)
		}
	}
	for _, q := range []string{"?resourceVersion=42", "?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=42"} {
		begin := time.Now()
		resp, body := get(t, c, p.URL+listPath+q)
		tooLarge(q, resp.StatusCode, body)
		if waited := time.Since(begin); waited < TooLargeWait {
			t.Fatalf("%s answered after %v, before the apiserver's %v", q, waited, TooLargeWait)
		}
	}
	r, stop := watchQuery(t, p, c, "watch=true&resourceVersion=42")
	defer stop()
	got := make(chan string, 1)
	go func() { l, _ := r.ReadString('\n'); got <- l }()
	time.Sleep(TooLargeWait + 500*time.Millisecond)
	select {
	case l := <-got:
		t.Fatalf("the WATCH from a resourceVersion ahead sent %q while the fault lasted", l)
	default:
	}
	if u.watching.Load() != 0 {
		t.Fatal("the WATCH reached the server while the fault lasted")
	}
	if err := p.Heal(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return u.watching.Load() == 1 }, "the held WATCH did not reach the server once the fault ended")
	u.frames <- added
	if l := <-got; l != added+"\n" {
		t.Fatalf("after the fault: %q, want %q", l, added)
	}
	passes(t, c, p.URL+listPath+"?resourceVersion=42", "after Heal")
	if c := p.Counts(); c.Failed != 2 {
		t.Fatalf("counts %+v", c)
	}
}

// CompactedAt answers a WATCH from a resourceVersion older than the
// compaction point as kube-apiserver answers one from before its history:
// 200, one ERROR event with 410 naming the point, the end; a WATCH from
// the point or after it, from "", a WatchList and a LIST pass, and so do
// the streams open.
func TestProxyCompactedAtAnswersAResumeFromBeforeItWithA410InTheStream(t *testing.T) {
	u, p, c := newUpstream(t)
	open, stop := watch(t, p, c)
	defer stop()
	p.CompactedAt(42)
	r, stopResume := watchQuery(t, p, c, "watch=true&resourceVersion=41")
	defer stopResume()
	if err := errorEvent(t, r); !apierrors.IsResourceExpired(err) || !strings.Contains(err.Error(), "too old resource version: 41 (42)") {
		t.Fatalf("the resume: %v", err)
	}
	endsCleanly(t, r)
	for _, q := range []string{"", "?resourceVersion=41"} {
		passes(t, c, p.URL+listPath+q, "LIST"+q)
	}
	u.frames <- added
	if l := readLine(t, open); l != added {
		t.Fatalf("the stream open before: %q, want %q", l, added)
	}
	stop()
	u.closed(t, p)
	for _, rv := range []string{"42", "50"} {
		resp, err := c.Get(p.URL + listPath + "?watch=true&resourceVersion=" + rv)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case u.frames <- modified: // the server serves it
			if l := readLine(t, bufio.NewReader(resp.Body)); l != modified {
				t.Errorf("a WATCH from %s: %q, want the server's %q", rv, l, modified)
			}
		case <-time.After(2 * time.Second):
			b, _ := io.ReadAll(resp.Body)
			t.Errorf("a WATCH from %s, not older than the compaction point, never reached the server; the proxy answered %q", rv, b)
		}
		resp.Body.Close()
		u.closed(t, p)
	}
	if c := p.Counts(); c.Failed != 1 {
		t.Fatalf("counts %+v", c)
	}
}

// Throttle answers every request, WATCHes too, as API Priority and Fairness
// sheds a priority level: 429, its plain-text message, Retry-After 1, which
// client-go's error helpers read as a 429 asking for a second's wait.
func TestProxyThrottleAnswersEveryRequestWithAPFs429(t *testing.T) {
	_, p, c := newUpstream(t)
	p.Throttle(true)
	for _, q := range []string{"", "?watch=true&resourceVersion=42", "/one-object"} {
		resp, body := get(t, c, p.URL+listPath+q)
		err := apierrors.NewGenericServerResponse(resp.StatusCode, "get", schema.GroupResource{}, "", body, 1, true)
		if resp.StatusCode != http.StatusTooManyRequests || body != ThrottledMessage || resp.Header.Get("Retry-After") != "1" ||
			resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" || !apierrors.IsTooManyRequests(err) {
			t.Fatalf("%q: %s %q %v", q, resp.Status, body, resp.Header)
		}
	}
	if err := p.Heal(); err != nil {
		t.Fatal(err)
	}
	passes(t, c, p.URL+listPath, "after Heal")
}

// IgnoreSendInitialEvents passes a WatchList on as a plain WATCH from "":
// the server never learns it was asked for initial events; Heal cuts it.
func TestProxyIgnoreSendInitialEventsPassesAWatchListOnAsAPlainWatch(t *testing.T) {
	u, p, c := newUpstream(t)
	p.IgnoreSendInitialEvents(true)
	r, stop := watchQuery(t, p, c, "watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true")
	defer stop()
	if q := u.lastQuery.Load(); q != "watch=true" {
		t.Fatalf("the server was asked %q", q)
	}
	u.frames <- added
	if l := readLine(t, r); l != added {
		t.Fatalf("%q, want %q", l, added)
	}
	if err := p.Heal(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(r); err == nil {
		t.Fatal("the stream a server that ignored sendInitialEvents answered was not cut when the fault ended")
	}
}

// StallWatches silences the streams open, for good, even their end; a
// stream opened later passes.
func TestProxyStallWatchesSilencesTheOpenStreamsForGood(t *testing.T) {
	u, p, c := newUpstream(t)
	r, stop := watch(t, p, c)
	defer stop()
	if n := p.StallWatches(); n != 1 {
		t.Fatalf("stalled %d streams, want 1", n)
	}
	got := make(chan string, 1)
	go func() { b, _ := io.ReadAll(r); got <- string(b) }()
	u.frames <- added
	u.srv.CloseClientConnections() // the server ends it: the end does not pass either
	select {
	case b := <-got:
		t.Fatalf("a stalled stream passed %q", b)
	case <-time.After(500 * time.Millisecond):
	}
	resp, err := c.Get(p.URL + listPath + "?watch=true&resourceVersion=7")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r2 := bufio.NewReader(resp.Body)
	waitFor(t, func() bool { return u.watching.Load() >= 1 }, "the new WATCH did not reach the server")
	u.frames <- modified
	if l := readLine(t, r2); l != modified {
		t.Fatalf("a stream opened after the stall: %q, want %q", l, modified)
	}
	if c := p.Counts(); c.Stalled != 1 {
		t.Fatalf("counts %+v", c)
	}
}

func TestProxyGarbleCutsEventFramesInHalf(t *testing.T) {
	u, p, r := watching(t)
	p.Garble(true)
	u.frames <- added
	if l := readLine(t, r); l != added[:len(added+"\n")/2] {
		t.Fatalf("got %q, want the first half of %q", l, added)
	}
	u.frames <- initialEnd // not an event: whole
	if l := readLine(t, r); l != initialEnd {
		t.Fatalf("got %q, want %q", l, initialEnd)
	}
	p.Garble(false)
	u.frames <- modified
	if l := readLine(t, r); l != modified {
		t.Fatalf("got %q, want %q", l, modified)
	}
}

// A 410 from a compaction answers a resume from an old resourceVersion,
// never a request for the latest state ("") or any state ("0").
func TestProxyFailFromRVFailsOnlyRequestsFromAResourceVersion(t *testing.T) {
	_, p, c := newUpstream(t)
	p.Fail(Failure{Kinds: List, Code: http.StatusGone, FromRV: true})
	for q, want := range map[string]int{"": http.StatusOK, "?resourceVersion=0": http.StatusOK, "?resourceVersion=42": http.StatusGone} {
		if resp, body := get(t, c, p.URL+listPath+q); resp.StatusCode != want {
			t.Errorf("LIST%s: %s %s, want %d", q, resp.Status, body, want)
		}
	}
}
