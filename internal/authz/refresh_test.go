package authz

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
)

// When the API server's authenticator fails (a token webhook down, the
// service account's lookup timing out), kube-apiserver answers the
// TokenReview 201 with authenticated false and status.error set. A refresh
// ahead that meets one such answer keeps the old answer until it expires:
// a granted scraper is still let in after the glitch.
func TestAnAuthenticatorErrorOnARefreshKeepsTheAnswer(t *testing.T) {
	s := newServer(t)
	var glitch atomic.Bool
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if glitch.Load() && r.URL.Path == "/apis/authentication.k8s.io/v1/tokenreviews" {
			var tr authnv1.TokenReview
			json.NewDecoder(r.Body).Decode(&tr)
			tr.APIVersion, tr.Kind = "authentication.k8s.io/v1", "TokenReview"
			tr.Status = authnv1.TokenReviewStatus{Error: "[invalid bearer token, context deadline exceeded]"}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			json.NewEncoder(w).Encode(&tr)
			return
		}
		s.ServeHTTP(w, r)
	}))
	t.Cleanup(api.Close)
	g := guardAt(api.URL, Options{})
	at := virtualClock(g)
	h := scraped(t, g, "the first scrape")
	at(61 * time.Second)
	glitch.Store(true)
	if w := get(t, h, "/metrics", "Bearer reader-token"); w.Code != http.StatusOK {
		t.Fatalf("the scrape that refreshes ahead: %d, want 200 from the cache", w.Code)
	}
	g.bg.Wait()
	glitch.Store(false)
	at(76 * time.Second)
	if w := get(t, h, "/metrics", "Bearer reader-token"); w.Code != http.StatusOK {
		t.Errorf("a granted scraper 15 s after one refresh ahead met an authenticator error (status.error, not a refusal): %d, want 200", w.Code)
	}
}

// The bound of that: a token whose refreshes ahead all meet
// status.error (a real refusal naming a reason looks the same) is let in
// until TokenTTL after the server last said yes, then refused.
func TestARefusalWithAnErrorIsBelievedWhenTheTokenExpires(t *testing.T) {
	s := newServer(t)
	g := s.guard(Options{})
	at := virtualClock(g)
	h := scraped(t, g, "the first scrape")
	// The service account is deleted: its token is refused with a reason.
	s.tokenErrors = map[string]string{"reader-token": "service account rawwatch/reader has been deleted"}
	delete(s.users, "reader-token")
	for _, d := range []time.Duration{61 * time.Second, 90 * time.Second, DefaultTokenTTL - time.Second} {
		at(d)
		if w := get(t, h, "/metrics", "Bearer reader-token"); w.Code != http.StatusOK {
			t.Fatalf("at +%v, before the token's answer expires: %d, want 200 from the cache", d, w.Code)
		}
		g.bg.Wait()
	}
	at(DefaultTokenTTL)
	if w := get(t, h, "/metrics", "Bearer reader-token"); w.Code != http.StatusUnauthorized {
		t.Errorf("at +%v, TokenTTL after the server last said yes: %d, want 401", DefaultTokenTTL, w.Code)
	}
}
