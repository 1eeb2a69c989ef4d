package authz

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	"k8s.io/client-go/rest"
)

// A request is held for reviews at most MaxWait plus ReviewTimeout,
// whatever the API server does (package doc; docs/operations.md: "each at
// most 12 s (2 s for a slot, 10 s for the review)"). A token the guard has
// not seen, on a path it has not authorized for that user, takes two
// reviews in turn: a TokenReview, then a SubjectAccessReview. Here the API
// server answers the TokenReview just before ReviewTimeout and never
// answers the SubjectAccessReview.
func TestARequestIsHeldAtMostMaxWaitAndReviewTimeout(t *testing.T) {
	const reviewTimeout, maxWait = 4 * time.Second, 100 * time.Millisecond
	done := make(chan struct{})
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if !strings.HasSuffix(r.URL.Path, "/tokenreviews") {
			select { // a SubjectAccessReview: no answer
			case <-r.Context().Done():
			case <-done:
			}
			return
		}
		select { // a TokenReview: answered late, but in time
		case <-time.After(reviewTimeout * 9 / 10):
		case <-r.Context().Done():
			return
		}
		var tr authnv1.TokenReview
		json.NewDecoder(r.Body).Decode(&tr)
		tr.APIVersion, tr.Kind = "authentication.k8s.io/v1", "TokenReview"
		tr.Status = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: "prometheus"}}
		json.NewEncoder(w).Encode(&tr)
	}))
	t.Cleanup(api.Close)
	t.Cleanup(func() { close(done) }) // (first: the server closes once its handlers return)
	g, err := New(&rest.Config{Host: api.URL}, Options{ReviewTimeout: reviewTimeout, MaxWait: maxWait})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	code := get(t, g.Wrap(ok, "/metrics"), "/metrics", "Bearer a-service-account-token").Code
	held := time.Since(start)
	// (Room for a busy machine: two reviews in turn each given their own
	// bound hold it nearly twice as long.)
	if bound := maxWait + reviewTimeout; held > bound+reviewTimeout/2 {
		t.Errorf("a request was held %v for reviews (answered %d), want at most MaxWait + ReviewTimeout = %v", held.Round(time.Millisecond), code, bound)
	}
}
