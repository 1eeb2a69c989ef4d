package authz

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

// server is a fake API server's review side: tokens name users, and grants
// say which user may get which path.
type server struct {
	users       map[string]string          // token → user
	grants      map[string]map[string]bool // user → path → may get
	fail        atomic.Bool                // answer 500
	block       chan struct{}              // when set, reviews wait on it
	reviews     atomic.Int32               // TokenReviews made
	access      atomic.Int32               // SubjectAccessReviews made
	inFlight    atomic.Int32
	maxInFlight atomic.Int32
	lastSAR     authzv1.SubjectAccessReviewSpec
	mu          sync.Mutex
}

func (s *server) guard(opts Options) *Guard {
	kube := fake.NewClientset()
	kube.PrependReactor("create", "tokenreviews", func(a clienttesting.Action) (bool, runtime.Object, error) {
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
		if s.fail.Load() {
			return true, nil, apierrors.NewInternalError(fmt.Errorf("etcd is away"))
		}
		tr := a.(clienttesting.CreateAction).GetObject().(*authnv1.TokenReview).DeepCopy()
		if user, ok := s.users[tr.Spec.Token]; ok {
			tr.Status = authnv1.TokenReviewStatus{Authenticated: true,
				User: authnv1.UserInfo{Username: user, UID: "uid-" + user, Groups: []string{"system:authenticated"}}}
		}
		return true, tr, nil
	})
	kube.PrependReactor("create", "subjectaccessreviews", func(a clienttesting.Action) (bool, runtime.Object, error) {
		s.access.Add(1)
		if s.fail.Load() {
			return true, nil, apierrors.NewServiceUnavailable("etcd is away")
		}
		sar := a.(clienttesting.CreateAction).GetObject().(*authzv1.SubjectAccessReview).DeepCopy()
		s.mu.Lock()
		s.lastSAR = sar.Spec
		s.mu.Unlock()
		na := sar.Spec.NonResourceAttributes
		sar.Status.Allowed = na != nil && na.Verb == "get" && s.grants[sar.Spec.User][na.Path]
		return true, sar, nil
	})
	return NewForClient(kube, opts)
}

func newServer() *server {
	return &server{
		users:  map[string]string{"reader-token": "reader", "other-token": "other"},
		grants: map[string]map[string]bool{"reader": {"/metrics": true}},
	}
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
	s := newServer()
	h := s.guard(Options{}).Wrap(ok)
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

func TestDecisionsAreCachedForTheirTTL(t *testing.T) {
	s := newServer()
	g := s.guard(Options{AllowTTL: 10 * time.Second, DenyTTL: 5 * time.Second})
	now := time.Unix(1000, 0)
	g.now = func() time.Time { return now }
	h := g.Wrap(ok)
	for range 100 {
		get(t, h, "/metrics", "Bearer reader-token")
		get(t, h, "/metrics", "Bearer other-token")
		get(t, h, "/metrics", "Bearer made-up")
	}
	if r, a := s.reviews.Load(), s.access.Load(); r != 3 || a != 2 {
		t.Fatalf("300 requests of 3 tokens made %d TokenReviews and %d SubjectAccessReviews, want 3 and 2", r, a)
	}
	now = now.Add(5 * time.Second) // the refusals expire, the grant does not
	get(t, h, "/metrics", "Bearer reader-token")
	get(t, h, "/metrics", "Bearer other-token")
	get(t, h, "/metrics", "Bearer made-up")
	if r := s.reviews.Load(); r != 5 {
		t.Fatalf("after 5 s: %d TokenReviews, want 5 (the two refusals reviewed again)", r)
	}
	now = now.Add(5 * time.Second)
	if w := get(t, h, "/metrics", "Bearer reader-token"); w.Code != http.StatusOK || s.reviews.Load() != 6 {
		t.Fatalf("after 10 s: %d, %d TokenReviews, want 200 and 6", w.Code, s.reviews.Load())
	}
	// A permission taken away is seen within AllowTTL.
	s.grants["reader"]["/metrics"] = false
	now = now.Add(10 * time.Second)
	if w := get(t, h, "/metrics", "Bearer reader-token"); w.Code != http.StatusForbidden {
		t.Fatalf("10 s after the grant was taken away: %d, want 403", w.Code)
	}
}

func TestAFailedReviewIsNeitherAllowedNorCached(t *testing.T) {
	s := newServer()
	h := s.guard(Options{}).Wrap(ok)
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
	s := newServer()
	h := s.guard(Options{}).Wrap(ok)
	w := get(t, h, "/metrics", "Bearer "+strings.Repeat("x", DefaultMaxTokenBytes))
	if w.Code != http.StatusUnauthorized || s.reviews.Load() != 0 {
		t.Fatalf("a %d-byte token: %d after %d reviews, want 401 after none", DefaultMaxTokenBytes, w.Code, s.reviews.Load())
	}
}

// A flood of made-up tokens: at most MaxInFlight reviews at once, the rest
// answered 429 at once, and the cache stays bounded.
func TestAFloodOfTokensIsBounded(t *testing.T) {
	s := newServer()
	s.block = make(chan struct{})
	g := s.guard(Options{MaxInFlight: 4, MaxEntries: 50})
	h := g.Wrap(ok)
	var wg sync.WaitGroup
	codes := make(chan int, 200)
	for i := range 200 {
		wg.Go(func() { codes <- get(t, h, "/metrics", fmt.Sprintf("Bearer flood-%d", i)).Code })
	}
	// The 196 that found no free slot were answered without waiting.
	deadline := time.After(10 * time.Second)
	refused := 0
	for refused < 196 {
		select {
		case c := <-codes:
			if c != http.StatusTooManyRequests {
				t.Fatalf("a request beyond the in-flight bound got %d, want 429", c)
			}
			refused++
		case <-deadline:
			t.Fatalf("only %d of 196 requests beyond the bound were refused at once", refused)
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
	if n := g.Len(); n > 50 {
		t.Errorf("%d cached decisions, bound 50", n)
	}
	if w := get(t, h, "/metrics", "Bearer reader-token"); w.Code != http.StatusOK {
		t.Errorf("after the flood the reader got %d, want 200", w.Code)
	}
}

func TestVerbs(t *testing.T) {
	for method, want := range map[string]string{"GET": "get", "HEAD": "get", "POST": "post", "DELETE": "delete"} {
		if got := verbOf(method); got != want {
			t.Errorf("verbOf(%s) = %s, want %s", method, got, want)
		}
	}
}

// The path every scrape takes: a cached decision.
func BenchmarkCachedDecision(b *testing.B) {
	s := newServer()
	g := s.guard(Options{AllowTTL: time.Hour})
	r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	r.Header.Set("Authorization", "Bearer reader-token")
	if st, msg := g.Check(r); st != http.StatusOK {
		b.Fatal(st, msg)
	}
	for b.Loop() {
		if st, _ := g.Check(r); st != http.StatusOK {
			b.Fatal(st)
		}
	}
}
