package watcher

import (
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Backoff is the retry policy: after the n-th trouble in a row the loop waits
// d = min(Max, Initial·Factorⁿ), shortened at random by up to Jitter·d (never
// lengthened: Max is a cap). The count restarts after ResetAfter of calm.
type Backoff struct {
	Initial, Max time.Duration
	Factor       float64
	Jitter       float64
	ResetAfter   time.Duration
}

// DefaultBackoff waits as client-go's Reflector does until the cap, with
// jitter that only shortens: its waits of [d, 2d] from 800 ms are these of
// [d/2, d] from 1.6 s; at the cap, these stay under 30 s.
var DefaultBackoff = Backoff{
	Initial: 1600 * time.Millisecond, Max: 30 * time.Second, Factor: 2, Jitter: 0.5,
	ResetAfter: 2 * time.Minute,
}

// schedule is b's steps, Initial·Factorⁿ: an ExponentialBackOff without its
// own jitter, which spreads a step both ways, past the cap, and without end.
func (b Backoff) schedule() *backoff.ExponentialBackOff {
	s := &backoff.ExponentialBackOff{
		InitialInterval: b.Initial, Multiplier: b.Factor, MaxInterval: b.Max,
		Stop: backoff.Stop, Clock: backoff.SystemClock,
	}
	s.Reset()
	return s
}

// jittered is step d shortened by r·Jitter of itself.
func (b Backoff) jittered(d time.Duration, r float64) time.Duration {
	f := float64(d)
	return time.Duration(f - r*b.Jitter*f)
}

// Delay is the wait after n troubles in a row; r in [0, 1) picks the jitter.
func (b Backoff) Delay(n int, r float64) time.Duration {
	s := b.schedule()
	d := s.NextBackOff()
	for ; n > 0 && d < b.Max; n-- {
		d = s.NextBackOff()
	}
	return b.jittered(min(d, b.Max), r)
}

// pacer is the machine's bookkeeping of the backoff.
type pacer struct {
	policy Backoff
	rand   func() float64
	// schedule gives the steps; step is the last it gave, 0 since a reset;
	// calmSince is when the trouble-free stretch began.
	schedule  *backoff.ExponentialBackOff
	step      time.Duration
	calmSince time.Time
}

// disturbed ends the trouble-free stretch; one of ResetAfter resets the backoff.
func (p *pacer) disturbed(now time.Time) {
	if now.Sub(p.calmSince) >= p.policy.ResetAfter {
		p.schedule.Reset()
		p.step = 0
	}
	p.calmSince = now
}

// backOff counts trouble at now and returns the wait before the next
// attempt: the next step, jittered, and at least minDelay (a Retry-After).
func (p *pacer) backOff(now time.Time, minDelay time.Duration) time.Duration {
	p.disturbed(now)
	p.step = min(p.schedule.NextBackOff(), p.policy.Max)
	return max(p.policy.jittered(p.step, p.rand()), minDelay)
}

// stagger is a random part of the last step, 0 since a reset: how long the
// first relist after trouble waits. It is not trouble: the step stays.
func (p *pacer) stagger() time.Duration {
	if p.step == 0 {
		return 0
	}
	return time.Duration(p.rand() * float64(p.step))
}
