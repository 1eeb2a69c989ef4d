package watcher

import (
	"math"
	"testing"
	"time"
)

// documentedSteps is the schedule the package doc gives: 1.6 s doubling to
// a 30 s cap.
var documentedSteps = []time.Duration{1600 * time.Millisecond, 3200 * time.Millisecond, 6400 * time.Millisecond,
	12800 * time.Millisecond, 25600 * time.Millisecond, 30 * time.Second, 30 * time.Second, 30 * time.Second, 30 * time.Second}

// The steps are the documented ones; Delay and the machine's waits (no
// jitter) are those steps.
func TestBackoffScheduleIsTheDocumentedOne(t *testing.T) {
	for n, want := range documentedSteps {
		if got := DefaultBackoff.Delay(n, 0); got != want {
			t.Fatalf("Delay(%d, 0) = %v; want %v", n, got, want)
		}
	}
	m := NewMachine(DefaultBackoff, false, func() float64 { return 0 })
	m.Start(t0)
	for n, want := range documentedSteps {
		if a := m.Step(Outcome{At: t0.Add(time.Duration(n) * time.Second), Err: errRefused}); a.Kind != Wait || a.Delay != want {
			t.Fatalf("trouble %d: %s %v; want a wait of %v", n, a.Kind, a.Delay, want)
		}
		m.Step(Outcome{At: t0.Add(time.Duration(n) * time.Second)})
	}
}

// The cap is a true cap and jitter only shortens: every delay is within
// [(1-Jitter)·d, d] for d = min(Max, Initial·Factorⁿ).
func TestBackoffDelayIsCapped(t *testing.T) {
	b := DefaultBackoff
	for n := range 80 {
		d := time.Duration(math.Min(float64(b.Max), float64(b.Initial)*math.Pow(b.Factor, float64(n))))
		for _, r := range []float64{0, 0.25, 0.5, 0.999} {
			got := b.Delay(n, r)
			if got > b.Max || got > d || got < time.Duration((1-b.Jitter)*float64(d))-time.Millisecond {
				t.Fatalf("Delay(%d, %v) = %v; want within [%v, %v]", n, r, got, time.Duration((1-b.Jitter)*float64(d)), d)
			}
		}
	}
}

// The waits are client-go's Reflector's (800 ms doubling, jitter 1.0: the
// n-th wait in a row in [0.8 s·2ⁿ, 1.6 s·2ⁿ]) until 1.6 s·2ⁿ passes the 30 s
// cap: the shortest first wait is 800 ms, not less. From there on these stay
// in [15 s, 30 s] where client-go's go on to [30 s, 60 s).
func TestBackoffWaitsAsClientGosReflector(t *testing.T) {
	const clientGoInit, clientGoMax = 800 * time.Millisecond, 30 * time.Second // reflector.go's defaultBackoffInit, defaultBackoffMax
	b := DefaultBackoff
	for n := range 12 {
		d := time.Duration(float64(clientGoInit) * math.Pow(2, float64(n)))
		lo, hi := d, 2*d      // client-go's jitter 1.0 lengthens: [d, 2d]
		if hi > clientGoMax { // ours is capped there: [15 s, 30 s]
			lo, hi = b.Max/2, b.Max
		}
		for _, r := range []float64{0, 0.25, 0.5, 0.75, 0.9999999} {
			if got := b.Delay(n, r); got < lo-time.Millisecond || got > hi {
				t.Fatalf("wait %d (r %v) = %v; want within client-go's [%v, %v]", n, r, got, lo, hi)
			}
		}
	}
}
