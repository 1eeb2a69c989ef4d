package faultproxy

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

func TestProxyTooLargeRVAnswersRequestsFromAResourceVersion(t *testing.T) {
	_, p, c := newUpstream(t)
	p.TooLargeRV(true)
	// A quorum LIST and a LIST from "0" pass.
	for _, q := range []string{"", "?resourceVersion=0"} {
		if resp, _ := get(t, c, p.URL+listPath+q); resp.StatusCode != http.StatusOK {
			t.Fatalf("LIST%s: %s", q, resp.Status)
		}
	}
	for _, q := range []string{"?resourceVersion=42", "?watch=true&resourceVersion=42"} {
		begin := time.Now()
		resp, body := get(t, c, p.URL+listPath+q)
		var st metav1.Status
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatal(err)
		}
		err := apierrors.FromObject(&st)
		if resp.StatusCode != http.StatusGatewayTimeout || !apierrors.IsTimeout(err) || !apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge) || !strings.Contains(body, "Too large resource version: 42") {
			t.Fatalf("%s: %s %s", q, resp.Status, body)
		}
		if waited := time.Since(begin); waited < TooLargeWait {
			t.Fatalf("%s answered after %v, before the apiserver's %v", q, waited, TooLargeWait)
		}
	}
	if err := p.Heal(); err != nil {
		t.Fatal(err)
	}
	if resp, _ := get(t, c, p.URL+listPath+"?resourceVersion=42"); resp.StatusCode != http.StatusOK {
		t.Fatalf("after Heal: %s", resp.Status)
	}
	if c := p.Counts(); c.Failed != 2 {
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
