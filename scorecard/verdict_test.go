package scorecard

import (
	"testing"
	"time"
)

func TestVerdictThresholds(t *testing.T) {
	for _, c := range []struct {
		name string
		m    Measure
		want string
	}{
		{"calm and converged", Measure{Duration: 20 * time.Second, Lists: 2, Watches: 5, Busiest: 7, Converged: true}, Held},
		{"at the bound", Measure{Duration: time.Minute, Lists: 30, Watches: 30, Busiest: 60, Converged: true}, Held},
		{"one over the bound", Measure{Duration: time.Minute, Lists: 30, Watches: 30, WatchLists: 1, Busiest: 61, Converged: true}, Stormed},
		// A short fault is not scaled up: 30 requests in 20 s (90 a minute
		// on average) are a backoff's first, closer retries.
		{"a short fault's first retries", Measure{Duration: 20 * time.Second, Lists: 10, Watches: 20, Busiest: 30, Converged: true}, Held},
		{"a busy minute in a long fault", Measure{Duration: 3 * time.Minute, Watches: 100, Busiest: 61, Converged: true}, Stormed},
		{"a long fault spread thin", Measure{Duration: 3 * time.Minute, Watches: 150, Busiest: 55, Converged: true}, Held},
		// Further pages of a LIST are not requests of their own.
		{"pages do not count", Measure{Duration: 20 * time.Second, Lists: 2, Pages: 500, Watches: 2, Busiest: 4, Converged: true}, Held},
		{"not converged, deaf", Measure{Duration: 20 * time.Second, Watches: 3, Missing: 5}, Stalled},
		// Events after the fault are not enough: a relist's would count.
		{"not converged, heard something but not the canary", Measure{Duration: 20 * time.Second, Watches: 3, Missing: 5, EventsAfter: 7}, Stalled},
		{"not converged, following", Measure{Duration: 20 * time.Second, Watches: 3, Extra: 1, EventsAfter: 4, HeardCanary: true}, LostData},
		{"converged, a deletion never told", Measure{Duration: 20 * time.Second, Watches: 3, Converged: true, Undelivered: 1}, LostData},
		{"stormed and stalled", Measure{Duration: 20 * time.Second, Watches: 5000, Busiest: 5000, Missing: 5}, Stormed},
	} {
		if got, why := Verdict(c.m); got != c.want {
			t.Errorf("%s: %s (%s), want %s", c.name, got, why, c.want)
		}
	}
}
