package app

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/client-go/rest"

	"rawwatch/internal/authz"
	"rawwatch/internal/testkit"
)

// reviewServer answers TokenReviews (only good is a known token) and
// SubjectAccessReviews (always allowed) after delay, like an API server
// some way off.
func reviewServer(t *testing.T, good string, delay time.Duration) (*rest.Config, *atomic.Int64) {
	var reviews atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(delay)
		reviews.Add(1)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.HasSuffix(r.URL.Path, "/tokenreviews"):
			var tr authnv1.TokenReview
			json.NewDecoder(r.Body).Decode(&tr)
			tr.APIVersion, tr.Kind = "authentication.k8s.io/v1", "TokenReview"
			if tr.Spec.Token == good {
				tr.Status = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: "prometheus"}}
			}
			json.NewEncoder(w).Encode(&tr)
		case strings.HasSuffix(r.URL.Path, "/subjectaccessreviews"):
			var sar authzv1.SubjectAccessReview
			json.NewDecoder(r.Body).Decode(&sar)
			sar.APIVersion, sar.Kind = "authorization.k8s.io/v1", "SubjectAccessReview"
			sar.Status.Allowed = true
			json.NewEncoder(w).Encode(&sar)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return &rest.Config{Host: srv.URL, ContentConfig: rest.ContentConfig{ContentType: "application/json"}}, &reviews
}

// The guarded metrics server under unauthenticated load: callers with
// made-up tokens, half on 1 MiB paths (refused by the server's header
// limit), half on 48 KiB paths (which reach the guard), while a scraper
// with a known token reads /metrics. The heap stays flat and every scrape
// gets 200. make test runs a count-bounded version (400 requests);
// RAWWATCH_LOAD=60s runs it for that long and logs the heap every 5 s:
//
//	RAWWATCH_LOAD=60s go test -count=1 -v -run TestUnauthenticatedLoad ./internal/app/
func TestUnauthenticatedLoad(t *testing.T) {
	duration, _ := time.ParseDuration(os.Getenv("RAWWATCH_LOAD"))
	requests := int64(400)
	opts := authz.Options{MaxWait: 10 * time.Millisecond}
	if duration > 0 {
		requests = 1 << 62
		// Time compressed: answers refreshed ahead every 5 s, not every minute.
		opts = authz.Options{TokenTTL: 10 * time.Second, AllowTTL: 10 * time.Second}
	}
	const good = "good-token"
	cfg, reviews := reviewServer(t, good, 20*time.Millisecond)
	guard, err := authz.New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	metrics := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "rawwatch_up 1\n") })
	addr := serveOnLoopback(t, guard.Wrap(metrics, "/metrics"), true, defaultLimits)
	client := func() *http.Client {
		return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, MaxIdleConnsPerHost: 4}}
	}
	get := func(c *http.Client, path, token string) (int, error) {
		req, _ := http.NewRequest(http.MethodGet, "https://"+addr+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := c.Do(req)
		if err != nil {
			return 0, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := get(client(), "/metrics", good); code != 200 {
		t.Fatalf("the scraper before the flood: %d %v", code, err)
	}
	base := testkit.HeapAfterGC()
	huge, large := "/"+strings.Repeat("a", 1<<20), "/"+strings.Repeat("b", 48<<10)
	var sent atomic.Int64
	codes := sync.Map{} // status → *atomic.Int64
	count := func(code int) {
		v, _ := codes.LoadOrStore(code, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
	}
	stop := make(chan struct{})
	var flood sync.WaitGroup
	for range 16 {
		flood.Go(func() {
			c := client()
			for sent.Add(1) <= requests {
				select {
				case <-stop:
					return
				default:
				}
				token := make([]byte, 32)
				rand.Read(token)
				path := large
				if sent.Load()%2 == 0 {
					path = huge
				}
				code, err := get(c, path, hex.EncodeToString(token))
				if err != nil {
					// -1: a connection the server closed on an oversized
					// request; -2: on a 48 KiB one (a pooled connection
					// reset under the flood).
					code = -1
					if path == large {
						code = -2
					}
				}
				count(code)
			}
		})
	}
	var scrapes, refused int
	scraper := client()
	start := time.Now()
	var peak uint64
	nextLog := start.Add(5 * time.Second)
	for done := false; !done; {
		if duration > 0 {
			done = time.Since(start) >= duration
			time.Sleep(time.Second)
		} else {
			done = sent.Load() >= requests
			time.Sleep(20 * time.Millisecond)
		}
		code, err := get(scraper, "/metrics", good)
		scrapes++
		if code != 200 {
			refused++
			t.Logf("a scrape during the flood: %d %v", code, err)
		}
		if duration > 0 && time.Now().After(nextLog) {
			h := testkit.HeapAfterGC()
			peak = max(peak, h)
			users, refusals, grants := guard.Len()
			t.Logf("%4.0fs: %d requests, heap %.1f MiB (%.1f at the start), cached: %d users, %d refusals, %d grants; %d reviews",
				time.Since(start).Seconds(), min(sent.Load(), requests), float64(h)/(1<<20), float64(base)/(1<<20), users, refusals, grants, reviews.Load())
			nextLog = nextLog.Add(5 * time.Second)
		}
	}
	close(stop)
	flood.Wait()
	grew := int64(testkit.HeapAfterGC()) - int64(base)
	var summary []string
	codes.Range(func(k, v any) bool {
		summary = append(summary, fmt.Sprintf("%v: %d", k, v.(*atomic.Int64).Load()))
		return true
	})
	t.Logf("%d unauthenticated requests in %v (%s); %d reviews; heap grew %.1f MiB (peak %.1f MiB); %d of %d scrapes refused",
		min(sent.Load(), requests), time.Since(start).Round(time.Second), strings.Join(summary, ", "), reviews.Load(),
		float64(grew)/(1<<20), float64(peak)/(1<<20), refused, scrapes)
	if refused > 0 {
		t.Errorf("%d of %d scrapes with a known token were refused during the flood", refused, scrapes)
	}
	if grew > 32<<20 {
		t.Errorf("the heap grew %d MiB under unauthenticated load, want under 32", grew>>20)
	}
	if v, ok := codes.Load(http.StatusOK); ok {
		t.Errorf("%d made-up tokens were let in", v.(*atomic.Int64).Load())
	}
}
