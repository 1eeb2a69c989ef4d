package app

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
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
// limit), half on 16 KiB paths (which reach the guard and are reviewed), while a scraper
// with a known token reads /metrics. The heap stays flat and every scrape
// gets 200. make test runs a count-bounded version (400 requests);
// RAWWATCH_LOAD=60s runs it for that long and logs the heap every 5 s:
//
//	RAWWATCH_LOAD=60s go test -count=1 -v -run TestUnauthenticatedLoadKeepsTheHeapFlatAndEveryScrapeServed ./app/
func TestUnauthenticatedLoadKeepsTheHeapFlatAndEveryScrapeServed(t *testing.T) {
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
	huge, large := "/"+strings.Repeat("a", 1<<20), "/"+strings.Repeat("b", 16<<10)
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
					// request; -2: on a 16 KiB one (a pooled connection
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

// A flood of requests with one made-up token, its review held by the API
// server, each request as heavy as the guard lets wait (header fields
// weighing just under authz's MaxHeaderWeight), over HTTP/1.1 (a connection
// each) and HTTP/2 (32 streams a connection): the server holds one review
// and MaxWaiting requests and answers the rest 429 at once. What the held
// requests cost, settled, is measured as what they free when the review
// ends: at most maxGoroutinesPerHeld goroutines and maxBytesPerHeld of
// heap each (docs/operations.md).
func TestAJoinerFloodHoldsALanesWorth(t *testing.T) {
	const n, held = 1_024, 1 + authz.DefaultMaxWaiting
	const maxGoroutinesPerHeld, maxBytesPerHeld = 2, 128 << 10
	for _, proto := range []string{"HTTP/1.1", "HTTP/2"} {
		t.Run(proto, func(t *testing.T) {
			release := make(chan struct{})
			api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				select { // the review of the made-up token, held
				case <-release:
				case <-r.Context().Done():
				}
				http.Error(w, "gone", http.StatusServiceUnavailable)
			}))
			t.Cleanup(api.Close)
			released := sync.OnceFunc(func() { close(release) })
			t.Cleanup(released)
			guard, err := authz.New(&rest.Config{Host: api.URL}, authz.Options{ReviewTimeout: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			var entered, exited, refused atomic.Int32
			counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				entered.Add(1)
				defer exited.Add(1)
				sw := &statusWriter{ResponseWriter: w}
				guard.Wrap(http.NotFoundHandler(), "/metrics").ServeHTTP(sw, r)
				if sw.status == http.StatusTooManyRequests {
					refused.Add(1)
				}
			})
			addr := serveOnLoopback(t, counted, proto == "HTTP/2", defaultLimits)
			// Fields "X-nnn:" weigh 5 + 32 bytes each, as the guard counts them.
			fields := (authz.DefaultMaxTokenBytes + authz.DefaultHeaderWeightBeyondToken - 256) / 37
			var conns []net.Conn
			t.Cleanup(func() {
				for _, c := range conns {
					c.Close()
				}
			})
			if proto == "HTTP/1.1" {
				var req strings.Builder
				req.WriteString("GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer one-made-up-token\r\n")
				for i := range fields {
					fmt.Fprintf(&req, "X-%03d:\r\n", i)
				}
				req.WriteString("\r\n")
				for range n {
					c, err := net.Dial("tcp", addr)
					if err != nil {
						t.Fatal(err)
					}
					conns = append(conns, c)
					if _, err := io.WriteString(c, req.String()); err != nil {
						t.Fatal(err)
					}
				}
			} else {
				var block []byte
				for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":path", "/metrics"}, {":authority", "x"}, {"authorization", "Bearer one-made-up-token"}} {
					block = append(block, hpackLiteral(f[0], f[1])...)
				}
				for i := range fields {
					block = append(block, hpackLiteral(fmt.Sprintf("x-%03d", i), "")...)
				}
				for range n / int(defaultLimits.maxStreams) {
					c := dialH2(t, addr)
					conns = append(conns, c)
					out := []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
					out = append(out, h2frame(4, 0, 0, nil)...) // SETTINGS
					out = append(out, h2frame(4, 1, 0, nil)...) // ACK of the server's
					for s := range defaultLimits.maxStreams {
						out = append(out, h2frame(1, 5, uint32(2*s+1), block)...) // HEADERS, END_STREAM|END_HEADERS
					}
					if _, err := c.Write(out); err != nil {
						t.Fatal(err)
					}
				}
			}
			for deadline := time.Now().Add(time.Minute); entered.Load() < n || exited.Load() < n-held; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%d of %d requests reached the guard, %d answered (%d with 429), want %d answered", entered.Load(), n, exited.Load(), refused.Load(), n-held)
				}
			}
			if r := refused.Load(); r != n-held {
				t.Errorf("%d of %d requests got 429, want %d", r, n, n-held)
			}
			goroutines, heap, stack := settled()
			released()
			for deadline := time.Now().Add(time.Minute); exited.Load() < n; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%d of %d requests answered after the review ended", exited.Load(), n)
				}
			}
			goroutinesAfter, heapAfter, stackAfter := settled()
			perG := float64(goroutines-goroutinesAfter) / held
			perB := (int64(heap) - int64(heapAfter)) / held
			t.Logf("%s: %d requests, %d answered 429; each of the %d held kept %.1f goroutines, %d bytes of heap and %d of stack",
				proto, n, refused.Load(), held, perG, perB, (int64(stack)-int64(stackAfter))/held)
			// (A few goroutines of the test's own may come and go meanwhile.)
			if more := goroutines - goroutinesAfter; more > held*maxGoroutinesPerHeld+8 {
				t.Errorf("the %d held requests kept %d goroutines (%.1f each), want at most %d each", held, more, perG, maxGoroutinesPerHeld)
			}
			if perB > maxBytesPerHeld {
				t.Errorf("each held request kept %d bytes of heap, want at most %d", perB, maxBytesPerHeld)
			}
		})
	}
}

// settled is the goroutines, the live heap and the stacks, once the number
// of goroutines has stopped changing (ten samples alike, 50 ms apart, or
// 10 s).
func settled() (goroutines int, heap, stack uint64) {
	same := 0
	for deadline := time.Now().Add(10 * time.Second); same < 10 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if g := runtime.NumGoroutine(); g == goroutines {
			same++
		} else {
			goroutines, same = g, 0
		}
	}
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	return runtime.NumGoroutine(), m.HeapAlloc, m.StackInuse
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(status int) {
	w.status = status
	w.ResponseWriter.WriteHeader(status)
}
