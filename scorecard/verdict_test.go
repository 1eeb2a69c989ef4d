package scorecard

import (
	"testing"
	"time"
)

// waits is n waits, each from at(i).
func waits(n int, at func(i int) time.Duration) []time.Duration {
	var out []time.Duration
	for i := range n {
		out = append(out, at(i))
	}
	return out
}

// backoff is a backoff's waits: from base, doubling, up to limit.
func backoff(n int, base, limit time.Duration) []time.Duration {
	return waits(n, func(i int) time.Duration { return min(base<<min(i, 20), limit) })
}

func fixed(n int, d time.Duration) []time.Duration {
	return waits(n, func(int) time.Duration { return d })
}

func TestTheEnvelopeDoublesEveryOtherRetryUpToItsCap(t *testing.T) {
	for n, want := range map[int]time.Duration{1: 0, 2: 0, 3: 400 * time.Millisecond, 4: 400 * time.Millisecond, 5: 800 * time.Millisecond,
		7: 1600 * time.Millisecond, 11: 6400 * time.Millisecond, 13: 10 * time.Second, 1000: 10 * time.Second} {
		if got := Envelope(n); got != want {
			t.Errorf("Envelope(%d) = %v, want %v", n, got, want)
		}
	}
}

func TestVerdictRules(t *testing.T) {
	calm := Measure{Converged: true, HeardCanary: true}
	with := func(f func(m *Measure)) Measure { m := calm; f(&m); return m }
	for _, c := range []struct {
		name string
		m    Measure
		want string
	}{
		{"calm and converged", calm, Held},
		// The spacing of the retries, whatever their number.
		{"client-go's backoff over 20 s", with(func(m *Measure) { m.Waits = backoff(5, 800*time.Millisecond, 30*time.Second) }), Held},
		{"client-go's backoff over 10 minutes", with(func(m *Measure) { m.Waits = backoff(30, 800*time.Millisecond, 30*time.Second) }), Held},
		{"the raw watcher's, capped at 15 to 30 s, with two relists at once", with(func(m *Measure) {
			m.Waits = append(fixed(2, 0), backoff(40, 800*time.Millisecond, 15*time.Second)...)
		}), Held},
		{"a fixed 10 s retry (the cap)", with(func(m *Measure) { m.Waits = fixed(60, 10*time.Second) }), Held},
		{"no backoff: thousands of retries at once", with(func(m *Measure) { m.Waits = fixed(5000, 0) }), Stormed},
		{"a fixed 400 ms retry over 20 s", with(func(m *Measure) { m.Waits = fixed(50, 400*time.Millisecond) }), Stormed},
		{"a fixed 1 s retry over 20 s", with(func(m *Measure) { m.Waits = fixed(20, time.Second) }), Stormed},
		{"a fixed 1 s retry, as long as it took to leave the envelope", with(func(m *Measure) { m.Waits = fixed(7, time.Second) }), Stormed},
		{"a fixed 1 s retry, six times", with(func(m *Measure) { m.Waits = fixed(6, time.Second) }), Held},
		{"a backoff reset by every frame (0.8 to 1.6 s every time)", with(func(m *Measure) {
			m.Waits = waits(12, func(i int) time.Duration { return 800*time.Millisecond + time.Duration(i)*50*time.Millisecond })
		}), Stormed},
		// A retry that waited the Retry-After asked is not judged.
		{"every retry as a Retry-After of 1 s asked", with(func(m *Measure) { m.AsAsked = 120; m.Chained = 10 }), Held},
		// Chained requests: a LIST's WATCH, a stream that ended cleanly.
		{"a relist a retry: LIST, WATCH", with(func(m *Measure) { m.Waits = backoff(5, time.Second, time.Minute); m.Chained = 5 }), Held},
		{"at the chain bound", with(func(m *Measure) { m.Waits = backoff(5, time.Second, time.Minute); m.Chained = 3*6 + 10 }), Held},
		{"one over it", with(func(m *Measure) { m.Waits = backoff(5, time.Second, time.Minute); m.Chained = 3*6 + 11 }), Stormed},
		{"a WatchList asked again at once whenever it ends cleanly", with(func(m *Measure) { m.Chained = 6000 }), Stormed},
		// Not following: stalled, whatever the handler missed.
		{"not converged, deaf", Measure{Missing: 5}, Stalled},
		{"not converged, heard events but not the canary", Measure{Missing: 5, EventsAfter: 7, NotHeard: 3}, Stalled},
		// Following, and yet wrong: lost data.
		{"heard the canary, the store wrong", Measure{Extra: 1, EventsAfter: 4, HeardCanary: true}, LostData},
		{"converged, a deletion never heard", with(func(m *Measure) { m.HeardExtra = 1 }), LostData},
		{"converged, a ghost re-ADD", with(func(m *Measure) { m.HeardExtra, m.Ghosts = 1, 1 }), LostData},
		{"converged, creates never heard", with(func(m *Measure) { m.NotHeard = 20 }), LostData},
		{"converged, updates heard at an older resourceVersion", with(func(m *Measure) { m.HeardStale = 20 }), LostData},
		{"converged, the canary never heard (a deaf handler)", Measure{Converged: true, HeardStale: 1}, LostData},
		// Worst first.
		{"stormed and stalled", Measure{Waits: fixed(5000, 0), Missing: 5}, Stormed},
		{"stormed and lost data", Measure{Waits: fixed(5000, 0), Converged: true, NotHeard: 1}, LostData},
		{"crashed", Measure{Crashed: true, Waits: fixed(5000, 0), Converged: true, NotHeard: 1}, Crashed},
	} {
		if got, why := Verdict(c.m); got != c.want {
			t.Errorf("%s: %s (%s), want %s", c.name, got, why, c.want)
		}
	}
}
