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

// A ring member's requests on Leases stay within leaseBound when its server
// (or a proxy, a load balancer in front of it) answers 500 with
// "Retry-After: 0": client-go takes that for a wait of 0 s and retries at
// once, up to a request's maxRetries (10), which would make every GET and
// LIST of a round 11 requests. The ring's client (ring.NewClient, as
// app's newMember builds it) drops every response's Retry-After,
// so the ring retries at its renew period: one round here is a GET and a
// LIST.
func TestRetryAfterZeroDoesNotStormTheLeaseBudget(t *testing.T) {
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
	client, err := ring.NewClient(cfg) // as app's newMember builds it
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
