package authz

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"rawwatch/internal/testkit"
)

// An unauthenticated caller chooses the token and the path. Neither may be
// kept: 64 refusals of made-up tokens on paths of 1 MiB (over
// MaxHeaderWeight: refused before any review) keep next to nothing, and the
// refusal is remembered by the token alone, so a made-up token costs one
// TokenReview whatever the paths it is sent on.
func TestRefusalsKeepNothingTheCallerChose(t *testing.T) {
	s := newServer(t)
	g := s.guard(Options{})
	h := g.Wrap(ok, "/metrics")
	long := "/" + strings.Repeat("a", 1<<20)
	before := testkit.HeapAfterGC()
	for i := range 64 {
		if w := get(t, h, long, fmt.Sprintf("Bearer made-up-%d", i)); w.Code != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("a made-up token on a 1 MiB path: %d, want 431", w.Code)
		}
	}
	if grew := int64(testkit.HeapAfterGC()) - int64(before); grew > 8<<20 {
		t.Errorf("64 refused requests on 1 MiB paths left the heap %d MiB larger, want under 8", grew>>20)
	}
	s.reviews.Store(0)
	for i := range 100 {
		get(t, h, fmt.Sprintf("/metrics/%d", i), "Bearer made-up")
	}
	if r := s.reviews.Load(); r != 1 {
		t.Errorf("one made-up token on 100 paths made %d TokenReviews, want 1", r)
	}
	runtime.KeepAlive(g)
}

// Only the paths the server routes are authorized: a known token on a path
// nobody serves gets 404 without a SubjectAccessReview, and a method other
// than GET or HEAD 405, so that what a caller sends cannot grow the cache of
// decisions or the API server's work.
func TestOnlyRoutedPathsAreAuthorized(t *testing.T) {
	s := newServer(t)
	g := s.guard(Options{})
	h := g.Wrap(ok, "/metrics")
	for i := range 100 {
		if w := get(t, h, fmt.Sprintf("/metrics/%d", i), "Bearer reader-token"); w.Code != http.StatusNotFound {
			t.Fatalf("a known token on a path not served: %d, want 404", w.Code)
		}
	}
	r := httptest.NewRequest("BREW", "/metrics", nil)
	r.Header.Set("Authorization", "Bearer reader-token")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusMethodNotAllowed {
		t.Errorf("BREW /metrics: %d, want 405", w.Code)
	}
	if a := s.access.Load(); a != 0 {
		t.Errorf("paths not served made %d SubjectAccessReviews, want 0", a)
	}
	if w := get(t, h, "/metrics", "Bearer reader-token"); w.Code != http.StatusOK || s.access.Load() != 1 {
		t.Errorf("the routed path: %d after %d SubjectAccessReviews, want 200 after 1", w.Code, s.access.Load())
	}
}

// A flood of made-up tokens whose reviews never end must not refuse a
// known token: its authentication and its grant stay cached, and are
// refreshed ahead through a lane the made-up tokens cannot enter. 40
// scrapes 15 s apart (10 minutes, longer than every TTL) all get 200.
func TestAFloodOfMadeUpTokensDoesNotStarveAKnownToken(t *testing.T) {
	s := newServer(t)
	s.blockMadeUp = make(chan struct{})
	g := s.guard(Options{})
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	g.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	h := scraped(t, g, "before the flood")
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() { get(t, h, "/metrics", fmt.Sprintf("Bearer flood-%d", i)) })
	}
	for deadline := time.Now().Add(30 * time.Second); s.inFlight.Load() < DefaultMaxInFlight; {
		if time.Now().After(deadline) {
			t.Fatalf("the flood holds %d reviews, want %d", s.inFlight.Load(), DefaultMaxInFlight)
		}
		time.Sleep(time.Millisecond)
	}
	refused := 0
	for range 40 {
		mu.Lock()
		now = now.Add(15 * time.Second)
		mu.Unlock()
		if w := get(t, h, "/metrics", "Bearer reader-token"); w.Code != http.StatusOK {
			refused++
		}
		g.bg.Wait() // the refresh ahead, if one started
	}
	close(s.blockMadeUp)
	wg.Wait()
	if refused > 0 {
		t.Errorf("%d of 40 scrapes with a known token were refused during a flood of made-up tokens, want 0", refused)
	}
}

// The refusal tells an unauthenticated caller nothing: not the API server's
// reason, not its own path.
func TestTheRefusalSaysNothing(t *testing.T) {
	s := newServer(t)
	s.tokenErrors = map[string]string{"stolen": "service account token has been invalidated"}
	h := s.guard(Options{}).Wrap(ok, "/metrics")
	for _, c := range []struct{ path, auth string }{
		{"/metrics", "Bearer stolen"},
		{"/metrics", ""},
		{"/<script>alert(1)</script>", ""},
		{"/metrics", "Basic cmVhZGVyOnB3"},
	} {
		w := get(t, h, c.path, c.auth)
		if w.Code != http.StatusUnauthorized || w.Body.String() != "Unauthorized\n" {
			t.Errorf("%s with %q: %d %q, want 401 %q", c.path, c.auth, w.Code, w.Body.String(), "Unauthorized\n")
		}
	}
}
