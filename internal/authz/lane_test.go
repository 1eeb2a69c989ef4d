package authz

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// Requests that wait on another's review of the same token count against
// the lane's MaxWaiting as much as those waiting for a slot: a flood of
// one made-up token, its review held by the API server, holds one review
// and MaxWaiting requests (and their goroutines), and the rest get 429 at
// once. Without it, every request of the flood waited on the one review.
func TestRequestsJoiningAReviewCountAgainstTheLanesBound(t *testing.T) {
	const n = 2_000
	s := newServer(t)
	s.blockMadeUp = make(chan struct{})
	g := s.guard(Options{ReviewTimeout: time.Hour})
	h := g.Wrap(ok, "/metrics")
	before := runtime.NumGoroutine()
	var answered, refused atomic.Int32
	var wg sync.WaitGroup
	t.Cleanup(func() { close(s.blockMadeUp); wg.Wait() })
	for range n {
		wg.Go(func() {
			if get(t, h, "/metrics", "Bearer one-made-up-token").Code == http.StatusTooManyRequests {
				refused.Add(1)
			}
			answered.Add(1)
		})
	}
	const held = 1 + DefaultMaxWaiting // the review, and those waiting on it
	for deadline := time.Now().Add(20 * time.Second); answered.Load() < n-held; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests with one made-up token whose review is held: after 20s %d answered 429 and %d are held (%d goroutines more), want %d answered 429 at once and %d held (one review, %d waiting on it)",
				n, refused.Load(), n-answered.Load(), runtime.NumGoroutine()-before, n-held, held, DefaultMaxWaiting)
		}
	}
	if r := refused.Load(); r != n-held {
		t.Errorf("%d of %d requests got 429, want %d", r, n, n-held)
	}
	// Settled: what the flood holds is a goroutine for each request held,
	// and the review's own (its HTTP connection).
	if more := runtime.NumGoroutine() - before; more > held+8 {
		t.Errorf("the flood holds %d goroutines more, want at most %d (%d requests held, and the review's connection)", more, held+8, held)
	}
	if s.reviews.Load() != 1 {
		t.Errorf("%d TokenReviews for one token, want 1", s.reviews.Load())
	}
}

// A request held for a review carries nothing more than its header, and a
// header of bounded weight: a request with a body (these endpoints read
// none; over HTTP/2 its data would wait in the stream's buffer, up to the
// flow-control window) is refused 413, and one whose header fields weigh
// more than MaxHeaderWeight, each counted as its name, its value and 32
// bytes (HTTP/2's measure: thousands of empty fields cost more parsed than
// on the wire) is refused 431, both before any review and at once.
func TestARequestWithABodyOrAHeavyHeaderIsNotHeld(t *testing.T) {
	s := newServer(t)
	s.blockMadeUp = make(chan struct{})
	g := s.guard(Options{ReviewTimeout: time.Hour})
	h := g.Wrap(ok, "/metrics")
	var wg sync.WaitGroup
	t.Cleanup(func() { close(s.blockMadeUp); wg.Wait() })
	wg.Go(func() { get(t, h, "/metrics", "Bearer one-made-up-token") }) // the review, held
	for deadline := time.Now().Add(20 * time.Second); s.inFlight.Load() < 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first review never started")
		}
	}
	withBody := httptest.NewRequest(http.MethodGet, "/metrics", strings.NewReader("a body"))
	heavy := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	for i := range 2_000 {
		heavy.Header.Set(fmt.Sprint("X-", i), "")
	}
	for _, c := range []struct {
		what string
		r    *http.Request
		want int
	}{
		{"a request with a body", withBody, http.StatusRequestEntityTooLarge},
		{"a request with 2,000 empty header fields", heavy, http.StatusRequestHeaderFieldsTooLarge},
	} {
		c.r.Header.Set("Authorization", "Bearer one-made-up-token")
		w := httptest.NewRecorder()
		done := make(chan struct{})
		wg.Go(func() { h.ServeHTTP(w, c.r); close(done) })
		select {
		case <-done:
			if w.Code != c.want {
				t.Errorf("%s, its token's review in flight: %d, want %d", c.what, w.Code, c.want)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("%s, its token's review in flight: still held after 20s, want %d at once", c.what, c.want)
		}
	}
	if s.reviews.Load() != 1 {
		t.Errorf("%d TokenReviews, want 1", s.reviews.Load())
	}
}

// Concurrent first requests with one made-up token wait on one review:
// one TokenReview, however many come at once (within the lane's bound).
func TestConcurrentRequestsForOneTokenCostOneReview(t *testing.T) {
	s := newServer(t)
	s.blockMadeUp = make(chan struct{})
	g := s.guard(Options{})
	h := g.Wrap(ok, "/metrics")
	const n = 20
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { get(t, h, "/metrics", "Bearer the-same-made-up-token") })
	}
	// All of them have looked at the cache already: each is in a review,
	// waits for a slot, or waits on another's review of the same token.
	for deadline := time.Now().Add(30 * time.Second); s.inFlight.Load() < 1 || s.inFlight.Load()+g.newToken.waiting.Load() < n; {
		if time.Now().After(deadline) {
			t.Fatalf("in flight %d, waiting %d", s.inFlight.Load(), g.newToken.waiting.Load())
		}
		time.Sleep(time.Millisecond)
	}
	close(s.blockMadeUp)
	wg.Wait()
	if r := s.reviews.Load(); r != 1 {
		t.Errorf("%d concurrent requests with one made-up token made %d TokenReviews, want 1", n, r)
	}
}

// Each lane's client starts at most DefaultQPS reviews a second, burst 1:
// made-up tokens alone, all in the first lane, reach the API server at
// most 5 + 5 times in their first second, well under the 10 a second both
// lanes together may send.
func TestMadeUpTokensGetAtMostTenReviewsASecond(t *testing.T) {
	s := newServer(t)
	var mu sync.Mutex
	var at []time.Time
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		at = append(at, time.Now())
		mu.Unlock()
		s.ServeHTTP(w, r)
	}))
	t.Cleanup(api.Close)
	g, err := New(&rest.Config{Host: api.URL, ContentConfig: rest.ContentConfig{ContentType: "application/json"}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := g.Wrap(ok, "/metrics")
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() { get(t, h, "/metrics", fmt.Sprintf("Bearer made-up-%d", i)) })
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(at) == 0 {
		t.Fatal("no TokenReview reached the API server")
	}
	inFirstSecond := 0
	for _, a := range at {
		if a.Sub(at[0]) <= time.Second {
			inFirstSecond++
		}
	}
	if inFirstSecond > 10 {
		t.Errorf("made-up tokens alone got %d TokenReviews to the API server within 1s of the first, want at most 10 (5 a second per lane, 10 for both)", inFirstSecond)
	}
}

// A token cannot be told from a made-up one before it is reviewed, so a
// granted scraper's rotated token (a projected service account token is
// replaced every hour or so) queues with a flood of made-up tokens in the
// first lane: it gets 429 with Retry-After while the flood holds the lane
// (never 401, never a cached refusal), and 200 once the flood has drained.
// The token it had keeps working meanwhile.
func TestARotatedTokenWaitsOutAFloodWith429(t *testing.T) {
	s := newServer(t)
	s.users["reader-token-rotated"] = "reader"
	s.blockMadeUp = make(chan struct{})
	g := s.guard(Options{})
	h := scraped(t, g, "before the flood")
	drain := heldFlood(t, g, h, "Bearer flood-%d", 200, s.blockMadeUp)
	for deadline := time.Now().Add(30 * time.Second); s.inFlight.Load() < DefaultMaxInFlight || g.newToken.waiting.Load() < DefaultMaxWaiting; {
		if time.Now().After(deadline) {
			t.Fatalf("the flood holds %d reviews and %d waiting", s.inFlight.Load(), g.newToken.waiting.Load())
		}
		time.Sleep(time.Millisecond)
	}
	if w := get(t, h, "/metrics", "Bearer reader-token"); w.Code != http.StatusOK {
		t.Fatalf("the old token during the flood: %d, want 200", w.Code)
	}
	if w := get(t, h, "/metrics", "Bearer reader-token-rotated"); w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
		t.Errorf("the granted user with its rotated token during a flood of made-up tokens: %d (Retry-After %q), want 429 with Retry-After (the documented bound)",
			w.Code, w.Header().Get("Retry-After"))
	}
	drain()
	if w := get(t, h, "/metrics", "Bearer reader-token-rotated"); w.Code != http.StatusOK {
		t.Errorf("the granted user with its rotated token once the flood drained: %d, want 200", w.Code)
	}
}

// An authenticated user with no RBAC (any pod's service account) shares
// the second lane with the refreshes ahead. Its concurrent requests wait on
// one SubjectAccessReview, and refreshes ahead have slots of their own: a
// burst of 200 of its requests every 40 s, each timed just before a
// scrape, makes one review a burst and never keeps the scraper's answers
// from being refreshed (every scrape gets 200). The attacker's reviews are
// held by the fake API server to make the timing deterministic; on a real
// server the lane's 5 a second does the same.
func TestAUserWithNoRBACCannotStarveAScraper(t *testing.T) {
	s := newServer(t)
	var mu sync.Mutex
	var hold chan struct{}    // when set, the attacker's SubjectAccessReviews wait on it
	var attacker atomic.Int32 // the attacker's SubjectAccessReviews
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		mu.Lock()
		h := hold
		mu.Unlock()
		if r.URL.Path == "/apis/authorization.k8s.io/v1/subjectaccessreviews" && bytes.Contains(body, []byte(`"user":"other"`)) {
			attacker.Add(1)
			if h != nil {
				<-h
			}
		}
		s.ServeHTTP(w, r)
	}))
	t.Cleanup(api.Close)
	g, err := New(&rest.Config{Host: api.URL, ContentConfig: rest.ContentConfig{ContentType: "application/json"}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	at := virtualClock(g)
	h := scraped(t, g, "the first scrape")
	if w := get(t, h, "/metrics", "Bearer other-token"); w.Code != http.StatusForbidden {
		t.Fatalf("the user with no RBAC: %d, want 403", w.Code)
	}
	burst := func() (release func()) {
		c := make(chan struct{})
		mu.Lock()
		hold = c
		mu.Unlock()
		var wg sync.WaitGroup
		var answered atomic.Int32
		for range 200 {
			wg.Go(func() { get(t, h, "/metrics", "Bearer other-token"); answered.Add(1) })
		}
		// Every request of the burst is in a review, waits for a slot or
		// on another's review of the same (user, verb, path), or was
		// answered 429 (the lane's waiting places were taken).
		for deadline := time.Now().Add(30 * time.Second); len(g.known.slots) < 1 || int32(len(g.known.slots))+g.known.waiting.Load()+answered.Load() < 200; {
			if time.Now().After(deadline) {
				t.Fatalf("the burst holds %d slots, %d waiting, %d answered", len(g.known.slots), g.known.waiting.Load(), answered.Load())
			}
			time.Sleep(time.Millisecond)
		}
		return func() {
			mu.Lock()
			hold = nil
			mu.Unlock()
			close(c)
			wg.Wait()
			g.bg.Wait()
		}
	}
	for _, d := range []time.Duration{40 * time.Second, 80 * time.Second, 120 * time.Second} {
		at(d - time.Second)
		release := func() {}
		if d > 40*time.Second {
			release = burst()
		}
		at(d)
		before := attacker.Load()
		w := get(t, h, "/metrics", "Bearer reader-token")
		release()
		if n := attacker.Load() - before; d == 80*time.Second && n > 1 {
			t.Errorf("one burst of a user with no RBAC, its refusal not cached, made %d SubjectAccessReviews, want 1", n)
		}
		if w.Code != http.StatusOK {
			t.Errorf("a scraper every 40 s, granted, while a user with no RBAC sends 200 requests at once every 40 s: the scrape at +%v got %d, want 200", d, w.Code)
		}
	}
}

// Refreshes ahead of answers that said yes have slots of their own: users
// with no RBAC (one request each, so coalescing does not merge them) that
// fill the second lane's 4 slots and queue behind them do not keep a
// granted scraper's answers from being refreshed ahead.
func TestRefreshAheadIsNotStarvedByUsersWithNoRBAC(t *testing.T) {
	s := newServer(t)
	const nobodies = 2 * DefaultMaxInFlight
	for i := range nobodies {
		s.users[fmt.Sprintf("nobody-token-%d", i)] = fmt.Sprintf("nobody-%d", i)
	}
	hold := make(chan struct{})
	var readerSARs atomic.Int32
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if r.URL.Path == "/apis/authorization.k8s.io/v1/subjectaccessreviews" {
			if bytes.Contains(body, []byte(`"user":"nobody-`)) {
				<-hold
			}
			if bytes.Contains(body, []byte(`"user":"reader"`)) {
				readerSARs.Add(1)
			}
		}
		s.ServeHTTP(w, r)
	}))
	t.Cleanup(api.Close)
	g := guardAt(api.URL, Options{})
	at := virtualClock(g)
	h := scraped(t, g, "the first scrape")
	release := heldFlood(t, g, h, "Bearer nobody-token-%d", nobodies, hold)
	for deadline := time.Now().Add(30 * time.Second); len(g.known.slots) < DefaultMaxInFlight || g.known.waiting.Load() < nobodies-DefaultMaxInFlight; {
		if time.Now().After(deadline) {
			t.Fatalf("the users with no RBAC hold %d slots, %d waiting", len(g.known.slots), g.known.waiting.Load())
		}
		time.Sleep(time.Millisecond)
	}
	at(DefaultAllowTTL/2 + time.Second)
	if w := get(t, h, "/metrics", "Bearer reader-token"); w.Code != http.StatusOK {
		t.Fatalf("the scrape that refreshes ahead: %d, want 200 from the cache", w.Code)
	}
	g.bg.Wait()
	if n := readerSARs.Load(); n != 2 {
		t.Errorf("with the second lane full of users with no RBAC, the granted scraper's answer was reviewed %d times, want 2 (the first, then the refresh ahead)", n)
	}
	release()
}
