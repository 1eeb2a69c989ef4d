package watcher_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rawwatch/faultproxy"
	"rawwatch/internal/testkit"
	"rawwatch/store"
	"rawwatch/watcher"
)

// The faults of package faultproxy, one by one, against the real apiserver:
// what the watcher does about each, and that it loses nothing.

// An ERROR event with 410 Expired inside the stream, as the apiserver sends
// after a compaction: the watcher relists at once, and the relist ("not
// older than" the RV it had) brings what was missed.
func TestExpiredEventInTheStreamRelists(t *testing.T) {
	cp, ns, c := testkit.Parallel(t)
	testkit.Objects(t, c, ns, "obj", 3)
	proxy, r := watchingViaProxy(t, cp, ns)

	if n := proxy.ExpireWatches(); n != 1 {
		t.Fatalf("expired %d streams, want 1", n)
	}
	testkit.Eventually(t, 30*time.Second, func() bool { return r.stats.Counts().Relists == 1 }, "no relist after a 410 ERROR event")
	testkit.Create(t, c, ns, "after", "hi")
	testkit.Eventually(t, 30*time.Second, func() bool { _, ok := r.store.Get(ns + "/after"); return ok }, "no event after the relist")
	if n := proxy.Counts().Lists; n != 2 {
		t.Errorf("the proxy saw %d LISTs, want 2 (the first and the relist)", n)
	}
	assertStoreMatchesServer(t, c, ns, r.store)
}

// A WATCH answered with HTTP 410 Gone (not a stream at all): the watcher
// relists too, without waiting out the backoff (only a second 410 before
// any healthy watch would). The cut just before it was trouble, so the
// relist is staggered: it waits a random part of the last backoff step
// (the first, 1.6 s), no more.
func TestGoneResponseToAWatchRelists(t *testing.T) {
	cp, ns, c := testkit.Parallel(t)
	proxy, r := watchingViaProxy(t, cp, ns)

	proxy.Fail(faultproxy.Failure{Kinds: faultproxy.Watch, Code: http.StatusGone, Count: 1})
	proxy.CutWatches()
	testkit.Eventually(t, 30*time.Second, func() bool { return r.stats.Counts().Relists == 1 }, "no relist after a 410 response")
	proxy.Heal()
	if waits := r.rec.backoffs(watcher.Expired); len(waits) > 1 || len(waits) == 1 && waits[0] >= watcher.DefaultBackoff.Initial {
		t.Errorf("waits after the 410: %v; want at most one, shorter than the last backoff step (%v)", waits, watcher.DefaultBackoff.Initial)
	}
	// Two LISTs (the first and the relist), and a one-item probe if the cut
	// reached the WATCH before its response did: a WATCH that never opened
	// is followed by a probe of where the server is.
	r.rec.mu.Lock()
	probes := r.rec.probesAnswered
	r.rec.mu.Unlock()
	if c := proxy.Counts(); c.Failed != 1 || c.Lists != 2+int64(probes) || probes > 1 {
		t.Errorf("proxy counts %+v, %d probes answered: want 1 answered 410, 2 LISTs and the probes", c, probes)
	}
	testkit.Create(t, c, ns, "after", "hi")
	testkit.Eventually(t, 30*time.Second, func() bool { _, ok := r.store.Get(ns + "/after"); return ok }, "no event after the relist")
}

// A 429 with Retry-After: the next try waits at least that long, even though
// the backoff alone (50 ms here) would have retried much sooner.
func TestThrottledWatchWaitsForRetryAfter(t *testing.T) {
	cp, ns, _ := testkit.Parallel(t)
	proxy, r := watchingViaProxy(t, cp, ns)

	proxy.Fail(faultproxy.Failure{Kinds: faultproxy.Watch, Code: http.StatusTooManyRequests, RetryAfter: 2 * time.Second, Count: 1})
	cut := time.Now()
	proxy.CutWatches()
	// Three WATCH requests: the first, the one answered 429, the next.
	testkit.Eventually(t, 30*time.Second, func() bool { return proxy.Counts().Watches == 3 }, "no watch after the 429")
	if d := time.Since(cut); d < 2*time.Second {
		t.Errorf("watch retried %v after the 429, want at least its Retry-After of 2s", d)
	}
	if w := r.rec.backoffs(watcher.Throttled); len(w) != 1 || w[0] < 2*time.Second {
		t.Errorf("throttled backoffs %v, want one of at least 2s", w)
	}
	if st := r.stats.Counts(); st.Relists != 0 {
		t.Errorf("%d relists: a 429 is no reason to relist", st.Relists)
	}
}

// Events the watcher cannot decode, injected into a live stream: each is
// logged and skipped, the stream goes on (no re-watch), and the events after
// it arrive. A DELETED event whose object is garbled still deletes its key.
// Bytes that are not JSON at all break the stream: the watcher re-watches
// from its last resourceVersion, with no relist and nothing lost.
func TestUndecodableEventsAreSkippedAndNothingIsLost(t *testing.T) {
	cp, ns, c := testkit.Parallel(t)
	ctx := context.Background()
	doomed := testkit.Create(t, c, ns, "doomed", "hi")
	proxy, cfg := testkit.Proxy(t, cp, cp.APIServer)
	logs := &testkit.Logs{}
	r := startLogging(t, cfg, ns, watcher.Options[object]{}, logs.Logger(0))
	testkit.Eventually(t, 10*time.Second, func() bool { return proxy.OpenWatches() == 1 }, "no watch open")

	proxy.InjectFrame(faultproxy.UndecodableEvent)
	// The real deletion of doomed reaches us garbled: the proxy swallows the
	// server's DELETED event and sends one whose object does not decode.
	proxy.Drop("DELETED")
	if err := c.Delete(ctx, ns, "doomed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, func() bool { return proxy.Counts().Dropped == 1 }, "DELETED event not seen")
	proxy.Drop()
	garbledDelete := fmt.Sprintf(`{"type":"DELETED","object":{"apiVersion":"example.com/v1alpha1","kind":"MyResource",`+
		`"metadata":{"name":"doomed","namespace":%q,"resourceVersion":%q},"spec":{"message":["not","a","string"]}}}`,
		ns, doomed.ResourceVersion)
	proxy.InjectFrame([]byte(garbledDelete))
	testkit.Create(t, c, ns, "after-garbage", "hi")
	testkit.Eventually(t, 30*time.Second, func() bool { _, ok := r.store.Get(ns + "/after-garbage"); return ok },
		"the event after the undecodable ones never arrived")
	if _, ok := r.store.Get(ns + "/doomed"); ok {
		t.Error("a garbled DELETED event must still delete its key")
	}
	if d, ok := r.rec.Find(ns+"/doomed", store.Deleted); !ok || !d.FinalStateUnknown {
		t.Errorf("garbled delete: delta %+v %v, want a Deleted delta marked FinalStateUnknown", d, ok)
	}
	st := r.stats.Counts()
	if st.Skipped != 2 || st.Watches != 1 || st.Relists != 0 {
		t.Errorf("skipped %d watches %d relists %d; want 2 skipped on the same stream, no relist", st.Skipped, st.Watches, st.Relists)
	}
	if n := logs.Count("Skipping an object that cannot be decoded"); n != 2 {
		t.Errorf("%d log lines about skipped objects, want 2", n)
	}
	if n := logs.Count("json: cannot unmarshal"); n != 2 {
		t.Errorf("the log must say why each was skipped; %d lines do", n)
	}

	rv := r.w.ResourceVersion()
	proxy.InjectFrame([]byte("this is not JSON"))
	testkit.Eventually(t, 30*time.Second, func() bool { return r.stats.Counts().Watches == 2 }, "no re-watch after a broken stream")
	testkit.Create(t, c, ns, "after-break", "hi")
	testkit.Eventually(t, 30*time.Second, func() bool { _, ok := r.store.Get(ns + "/after-break"); return ok },
		"the event after the broken stream never arrived")
	r.rec.mu.Lock()
	rewatchRV := r.rec.watchRVs[1]
	r.rec.mu.Unlock()
	if rewatchRV != rv || r.stats.Counts().Relists != 0 {
		t.Errorf("re-watch from %s (want %s), %d relists (want 0)", rewatchRV, rv, r.stats.Counts().Relists)
	}
	assertStoreMatchesServer(t, c, ns, r.store)
}
