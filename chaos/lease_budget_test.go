package chaos

import (
	"context"
	"net/http"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	"rawwatch/internal/testkit"
	"rawwatch/ring"
)

// Claim (leaseBound, chaos/replicas.go; docs/sharding.md, "What it costs":
// "each request retried by client-go after a Retry-After at most ⌊renew
// period / 1 s⌋ times within its round's timeout" — 373 a minute at a 1 s
// renew period, at most 3·(1+1) = 6 requests a round; and "a failing Lease
// API is retried at the same period, never faster").
//
// It does not hold for a server (or a proxy, a load balancer in front of
// it) that answers 500 or 429 with "Retry-After: 0": client-go's
// checkWait/retryAfterSeconds (rest/with_retry.go) take 0 as a wait of 0 s,
// and retry at once, up to the request's maxRetries, 10. Every GET and LIST
// of a round is then 11 requests within milliseconds, not 2: a ring member
// whose Lease API answers so makes 22 requests a round (its GET fails, so
// no UPDATE, then its LIST), 1,320 in a minute of ticks — 3.5 times the
// bound. (The production client's QPS 200, burst 400, as here, does not
// space them.) The chaos run's proxy answers with no Retry-After or a 1 s
// one, so its runs never met this; the bound is a fact about client-go's
// retries that is false at Retry-After: 0.
//
// Failed with (one round of a member renewing every 1 s, counted as the
// chaos run's leaseMeter counts; its client then kubernetes.NewForConfig):
//
//	one round made 22 requests on Leases (get 11, list 11): 60 rounds a minute make 1320, over leaseBound(1s) = 373
//
// The ring's client is now ring.NewClient, as internal/app's newMember
// builds it: it drops every response's Retry-After, so client-go does not
// retry, and the ring retries at its renew period (a round: GET, LIST).
func TestAdversaryRetryAfterZeroStormsTheLeaseBudget(t *testing.T) {
	url, served := testkit.FailingAPI(t, http.StatusInternalServerError)

	const renew = time.Second
	meter := newLeaseMeter(time.Now)
	cfg := &rest.Config{Host: url, QPS: 200, Burst: 400} // app.DefaultQPS, DefaultBurst
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			meter.count(req)
			return rt.RoundTrip(req)
		})
	})
	client, err := ring.NewClient(cfg) // as internal/app's newMember builds it
	if err != nil {
		t.Fatal(err)
	}
	clock := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	m, err := ring.New(ring.Config{Client: client, Namespace: "ns", Ring: "r", Identity: "m",
		LeaseDuration: 3 * renew, RenewPeriod: renew, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	// Run's first round starts at once; the fake clock never ticks, so it
	// is the only one. Wait until the server has been quiet for 500 ms.
	for last, quiet := int64(-1), time.Now(); ; time.Sleep(20 * time.Millisecond) {
		if n := served.Load(); n != last {
			last, quiet = n, time.Now()
		} else if n > 0 && time.Since(quiet) > 500*time.Millisecond {
			break
		}
	}
	round := meter.between(time.Time{}, time.Now().Add(time.Hour))
	n := 0
	for _, c := range round {
		n += c
	}
	cancel()
	<-done
	perMinute := int(time.Minute/renew) * n
	if bound := leaseBound(renew); perMinute > bound {
		t.Errorf("one round made %d requests on Leases (%s): %d rounds a minute make %d, over leaseBound(%v) = %d",
			n, verbs(round), int(time.Minute/renew), perMinute, renew, bound)
	}
}
