package authz

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// server is a fake API server's review side, served on loopback: tokens
// name users, and grants say which user may get which path.
type server struct {
	users       map[string]string          // token → user
	grants      map[string]map[string]bool // user → path → may get
	fail        atomic.Bool                // answer 500
	block       chan struct{}              // when set, reviews wait on it
	blockMadeUp chan struct{}              // when set, reviews of unknown tokens wait on it
	tokenErrors map[string]string          // token → the error a refusal names
	audiences   map[string][]string        // token → the audiences it was made for (none: the API server's)
	deaf        bool                       // an authenticator that ignores the audiences asked for
	askedFor    []string                   // the audiences the last TokenReview asked for
	reviews     atomic.Int32               // TokenReviews made
	access      atomic.Int32               // SubjectAccessReviews made
	inFlight    atomic.Int32
	maxInFlight atomic.Int32
	url         string
	mu          sync.Mutex // guards grants and lastSAR
	lastSAR     authzv1.SubjectAccessReviewSpec
}

func newServer(t testing.TB) *server {
	s := &server{
		users:  map[string]string{"reader-token": "reader", "other-token": "other"},
		grants: map[string]map[string]bool{"reader": {"/metrics": true}},
	}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

func (s *server) grant(user, path string, may bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.grants[user][path] = may
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	reply := func(obj any, err error) {
		w.Header().Set("Content-Type", "application/json")
		if err != nil {
			st := err.(apierrors.APIStatus).Status()
			w.WriteHeader(int(st.Code))
			obj = &st
		}
		json.NewEncoder(w).Encode(obj)
	}
	switch r.URL.Path {
	case "/apis/authentication.k8s.io/v1/tokenreviews":
		s.reviews.Add(1)
		n := s.inFlight.Add(1)
		defer s.inFlight.Add(-1)
		for {
			m := s.maxInFlight.Load()
			if n <= m || s.maxInFlight.CompareAndSwap(m, n) {
				break
			}
		}
		if s.block != nil {
			<-s.block
		}
		var tr authnv1.TokenReview
		if err := json.NewDecoder(r.Body).Decode(&tr); err != nil {
			reply(nil, apierrors.NewBadRequest(r.Header.Get("Content-Type")+": "+err.Error()))
			return
		}
		user, known := s.users[tr.Spec.Token]
		if !known && s.blockMadeUp != nil {
			<-s.blockMadeUp
		}
		if s.fail.Load() {
			reply(nil, apierrors.NewInternalError(fmt.Errorf("etcd is away")))
			return
		}
		s.mu.Lock()
		s.askedFor = tr.Spec.Audiences
		s.mu.Unlock()
		// As kube-apiserver: a review is answered with the audiences asked
		// for (by default the API server's own) the token was made for, or
		// not at all.
		apiServer := []string{"https://kubernetes.default.svc"}
		madeFor, asked, auds := s.audiences[tr.Spec.Token], tr.Spec.Audiences, []string(nil)
		if madeFor == nil {
			madeFor = apiServer
		}
		if asked == nil {
			asked = apiServer
		}
		for _, a := range asked {
			if slices.Contains(madeFor, a) {
				auds = append(auds, a)
			}
		}
		if s.deaf {
			auds = nil
		} else if len(auds) == 0 {
			known = false
		}
		if known {
			tr.Status = authnv1.TokenReviewStatus{Authenticated: true, Audiences: auds,
				User: authnv1.UserInfo{Username: user, UID: "uid-" + user, Groups: []string{"system:authenticated"}}}
		} else {
			tr.Status.Error = s.tokenErrors[tr.Spec.Token]
		}
		tr.APIVersion, tr.Kind = "authentication.k8s.io/v1", "TokenReview"
		reply(&tr, nil)
	case "/apis/authorization.k8s.io/v1/subjectaccessreviews":
		s.access.Add(1)
		if s.fail.Load() {
			reply(nil, apierrors.NewInternalError(fmt.Errorf("etcd is away")))
			return
		}
		var sar authzv1.SubjectAccessReview
		if err := json.NewDecoder(r.Body).Decode(&sar); err != nil {
			reply(nil, apierrors.NewBadRequest(r.Header.Get("Content-Type")+": "+err.Error()))
			return
		}
		s.mu.Lock()
		s.lastSAR = sar.Spec
		na := sar.Spec.NonResourceAttributes
		sar.Status.Allowed = na != nil && na.Verb == "get" && s.grants[sar.Spec.User][na.Path]
		s.mu.Unlock()
		sar.APIVersion, sar.Kind = "authorization.k8s.io/v1", "SubjectAccessReview"
		reply(&sar, nil)
	default:
		http.NotFound(w, r)
	}
}

// guard is a Guard that reviews through s, with no client-side rate limit.
func (s *server) guard(opts Options) *Guard { return guardAt(s.url, opts) }

// guardAt is a Guard that reviews through the API server at url, with no
// client-side rate limit.
func guardAt(url string, opts Options) *Guard {
	kube, err := kubernetes.NewForConfig(&rest.Config{Host: url, QPS: -1,
		ContentConfig: rest.ContentConfig{ContentType: "application/json"}})
	if err != nil {
		panic(err)
	}
	return NewForClient(kube, opts)
}

// virtualClock gives g a clock standing at t0 (Unix 1000) until at(d) sets
// it to t0 + d.
func virtualClock(g *Guard) (at func(d time.Duration)) {
	var mu sync.Mutex
	t0 := time.Unix(1000, 0)
	now := t0
	g.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	return func(d time.Duration) { mu.Lock(); now = t0.Add(d); mu.Unlock() }
}

// scraped is g guarding /metrics, scraped once by the granted scraper
// (reader-token): the test fails, saying when, unless that gets 200.
func scraped(t *testing.T, g *Guard, when string) http.Handler {
	t.Helper()
	h := g.Wrap(ok, "/metrics")
	if w := get(t, h, "/metrics", "Bearer reader-token"); w.Code != http.StatusOK {
		t.Fatalf("%s: %d, want 200", when, w.Code)
	}
	return h
}

// heldFlood sends n requests through g's handler h at once, with the bearer
// tokens fmt.Sprintf(token, 0..n-1), whose reviews the API server holds
// until hold is closed. release, run at the latest when the test ends,
// closes it and waits for those requests and g's refreshes ahead.
func heldFlood(t *testing.T, g *Guard, h http.Handler, token string, n int, hold chan struct{}) (release func()) {
	var wg sync.WaitGroup
	released := false
	release = func() {
		if !released {
			released = true
			close(hold)
			wg.Wait()
			g.bg.Wait()
		}
	}
	t.Cleanup(release)
	for i := range n {
		wg.Go(func() { get(t, h, "/metrics", fmt.Sprintf(token, i)) })
	}
	return release
}

func get(t *testing.T, h http.Handler, path, auth string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, path, nil)
	if auth != "" {
		r.Header.Set("Authorization", auth)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "secret metrics") })

func TestAnswers(t *testing.T) {
	s := newServer(t)
	h := s.guard(Options{}).Wrap(ok, "/metrics", "/ui/")
	for _, c := range []struct {
		name, path, auth string
		want             int
	}{
		{"no token", "/metrics", "", http.StatusUnauthorized},
		{"not a bearer token", "/metrics", "Basic cmVhZGVyOnB3", http.StatusUnauthorized},
		{"empty bearer token", "/metrics", "Bearer ", http.StatusUnauthorized},
		{"unknown token", "/metrics", "Bearer made-up", http.StatusUnauthorized},
		{"known, not granted", "/metrics", "Bearer other-token", http.StatusForbidden},
		{"granted", "/metrics", "Bearer reader-token", http.StatusOK},
		{"granted, lower-case scheme", "/metrics", "bearer reader-token", http.StatusOK},
		{"granted another path only", "/ui/", "Bearer reader-token", http.StatusForbidden},
	} {
		w := get(t, h, c.path, c.auth)
		if w.Code != c.want {
			t.Errorf("%s: %d %q, want %d", c.name, w.Code, w.Body.String(), c.want)
		}
		if (w.Code == http.StatusOK) != strings.Contains(w.Body.String(), "secret") {
			t.Errorf("%s: %d with body %q", c.name, w.Code, w.Body.String())
		}
		if w.Code == http.StatusUnauthorized && w.Header().Get("WWW-Authenticate") == "" {
			t.Errorf("%s: 401 without WWW-Authenticate", c.name)
		}
	}
	if s.lastSAR.User != "reader" || s.lastSAR.UID != "uid-reader" || len(s.lastSAR.Groups) != 1 ||
		s.lastSAR.NonResourceAttributes.Path != "/ui/" || s.lastSAR.NonResourceAttributes.Verb != "get" {
		t.Errorf("the last SubjectAccessReview asked %+v", s.lastSAR)
	}
}

// With Options.Audiences, a token is taken only when the API server finds
// it made for one of them: the TokenReview asks for them, a token for the
// API server itself is refused, and so is every token when the server's
// authenticator ignores the audiences (it answers with none).
func TestATokenMustBeMadeForOneOfTheAudiences(t *testing.T) {
	s := newServer(t)
	s.users["scoped-token"] = "reader"
	s.audiences = map[string][]string{"scoped-token": {"rawwatch", "other"}}
	h := s.guard(Options{Audiences: []string{"rawwatch"}}).Wrap(ok, "/metrics")
	for _, c := range []struct {
		who, token string
		want       int
	}{
		{"a token made for the audience", "scoped-token", http.StatusOK},
		{"a token made for the API server", "reader-token", http.StatusUnauthorized},
	} {
		if w := get(t, h, "/metrics", "Bearer "+c.token); w.Code != c.want {
			t.Errorf("%s: %d, want %d", c.who, w.Code, c.want)
		}
		if s.mu.Lock(); !slices.Equal(s.askedFor, []string{"rawwatch"}) {
			t.Errorf("%s: the TokenReview asked for the audiences %q, want [rawwatch]", c.who, s.askedFor)
		}
		s.mu.Unlock()
	}
	s.deaf = true
	h = s.guard(Options{Audiences: []string{"rawwatch"}}).Wrap(ok, "/metrics")
	if w := get(t, h, "/metrics", "Bearer scoped-token"); w.Code != http.StatusUnauthorized {
		t.Errorf("an authenticator that answers with no audience: %d, want 401", w.Code)
	}
	// Without Audiences, the API server's audience: the scoped token is
	// not one it takes.
	s.deaf = false
	h = s.guard(Options{}).Wrap(ok, "/metrics")
	if w := get(t, h, "/metrics", "Bearer scoped-token"); w.Code != http.StatusUnauthorized {
		t.Errorf("without Audiences, a token made for others only: %d, want 401", w.Code)
	}
}

func TestDecisionsAreCachedForTheirTTL(t *testing.T) {
	s := newServer(t)
	g := s.guard(Options{TokenTTL: 2 * time.Minute, RefusedTTL: 30 * time.Second,
		AllowTTL: 2 * time.Minute, DenyTTL: 30 * time.Second})
	now := time.Unix(1000, 0)
	g.now = func() time.Time { return now }
	h := g.Wrap(ok, "/metrics")
	for range 100 {
		get(t, h, "/metrics", "Bearer reader-token")
		get(t, h, "/metrics", "Bearer other-token")
		get(t, h, "/metrics", "Bearer made-up")
	}
	counts := func(when string, reviews, access int32) {
		t.Helper()
		if r, a := s.reviews.Load(), s.access.Load(); r != reviews || a != access {
			t.Fatalf("%s: %d TokenReviews and %d SubjectAccessReviews, want %d and %d", when, r, a, reviews, access)
		}
	}
	counts("300 requests of 3 tokens", 3, 2)
	// The refusals expire; the other user's token is still known, only the
	// refusal of its access is asked again.
	now = now.Add(30 * time.Second)
	get(t, h, "/metrics", "Bearer reader-token")
	get(t, h, "/metrics", "Bearer other-token")
	get(t, h, "/metrics", "Bearer made-up")
	counts("after 30 s", 4, 3)
	// Half-way through their TTL the reader's answers are refreshed ahead,
	// while the request is answered from the cache.
	now = now.Add(30 * time.Second)
	if w := get(t, h, "/metrics", "Bearer reader-token"); w.Code != http.StatusOK {
		t.Fatalf("after 60 s: %d, want 200", w.Code)
	}
	g.bg.Wait()
	counts("after 60 s", 5, 4)
	// A permission taken away is seen within AllowTTL.
	s.grant("reader", "/metrics", false)
	now = now.Add(time.Minute)
	get(t, h, "/metrics", "Bearer reader-token") // served from the cache; refreshed
	g.bg.Wait()
	if w := get(t, h, "/metrics", "Bearer reader-token"); w.Code != http.StatusForbidden {
		t.Fatalf("a minute after the grant was taken away: %d, want 403", w.Code)
	}
}

func TestAFailedReviewIsNeitherAllowedNorCached(t *testing.T) {
	s := newServer(t)
	h := s.guard(Options{}).Wrap(ok, "/metrics", "/ui/")
	s.fail.Store(true)
	for range 3 {
		w := get(t, h, "/metrics", "Bearer reader-token")
		if w.Code != http.StatusServiceUnavailable || strings.Contains(w.Body.String(), "secret") {
			t.Fatalf("the API server answering 500: %d %q, want 503", w.Code, w.Body.String())
		}
		if w.Header().Get("Retry-After") == "" {
			t.Errorf("503 without Retry-After")
		}
	}
	if r := s.reviews.Load(); r != 3 {
		t.Fatalf("%d TokenReviews for 3 requests while failing, want 3 (a failure is not cached)", r)
	}
	s.fail.Store(false)
	if w := get(t, h, "/metrics", "Bearer reader-token"); w.Code != http.StatusOK {
		t.Fatalf("after the API server recovered: %d, want 200", w.Code)
	}
}

func TestAHugeHeaderIsRefusedUnread(t *testing.T) {
	s := newServer(t)
	h := s.guard(Options{}).Wrap(ok, "/metrics", "/ui/")
	w := get(t, h, "/metrics", "Bearer "+strings.Repeat("x", DefaultMaxTokenBytes))
	if w.Code != http.StatusUnauthorized || s.reviews.Load() != 0 {
		t.Fatalf("a %d-byte token: %d after %d reviews, want 401 after none", DefaultMaxTokenBytes, w.Code, s.reviews.Load())
	}
}

// A flood of made-up tokens: at most MaxInFlight reviews at once, at most
// MaxWaiting requests wait for one (MaxWait at most), the rest are answered
// 429 at once, and the caches stay bounded.
func TestAFloodOfTokensIsBounded(t *testing.T) {
	s := newServer(t)
	s.block = make(chan struct{})
	g := s.guard(Options{MaxInFlight: 4, MaxWaiting: 8, MaxWait: 100 * time.Millisecond, MaxEntries: 50})
	h := g.Wrap(ok, "/metrics")
	var wg sync.WaitGroup
	codes := make(chan int, 200)
	for i := range 200 {
		wg.Go(func() { codes <- get(t, h, "/metrics", fmt.Sprintf("Bearer flood-%d", i)).Code })
	}
	// The 196 that found no free slot were answered without a review.
	deadline := time.After(30 * time.Second)
	for refused := 0; refused < 196; refused++ {
		select {
		case c := <-codes:
			if c != http.StatusTooManyRequests {
				t.Fatalf("a request beyond the in-flight bound got %d, want 429", c)
			}
		case <-deadline:
			t.Fatalf("only %d of 196 requests beyond the bound were refused", refused)
		}
	}
	close(s.block)
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != http.StatusUnauthorized {
			t.Errorf("a reviewed made-up token got %d, want 401", c)
		}
	}
	if m := s.maxInFlight.Load(); m > 4 {
		t.Errorf("%d reviews in flight at once, bound 4", m)
	}
	for i := range 500 { // sequential: each reviewed, each cached
		get(t, h, "/metrics", fmt.Sprintf("Bearer more-%d", i))
	}
	if _, refused, _ := g.Len(); refused > 50 {
		t.Errorf("%d cached refusals, bound 50", refused)
	}
	if w := get(t, h, "/metrics", "Bearer reader-token"); w.Code != http.StatusOK {
		t.Errorf("after the flood the reader got %d, want 200", w.Code)
	}
}

// The path every scrape takes: a cached decision.
func BenchmarkCachedDecision(b *testing.B) {
	s := newServer(b)
	g := s.guard(Options{AllowTTL: time.Hour})
	routed := map[string]bool{"/metrics": true}
	r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	r.Header.Set("Authorization", "Bearer reader-token")
	if st, _ := g.check(r, routed); st != http.StatusOK {
		b.Fatal(st)
	}
	for b.Loop() {
		if st, _ := g.check(r, routed); st != http.StatusOK {
			b.Fatal(st)
		}
	}
}
