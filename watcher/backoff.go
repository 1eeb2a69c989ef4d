package watcher

import "time"

// Backoff is the retry policy: after the n-th trouble in a row the loop waits
// d = min(Max, Initial·Factorⁿ), shortened at random by up to Jitter·d so that
// many clients do not retry in step. Max is a true cap: jitter never
// lengthens a delay. The count starts again after a trouble-free stretch of
// ResetAfter.
type Backoff struct {
	Initial, Max time.Duration
	Factor       float64
	Jitter       float64
	ResetAfter   time.Duration
}

// DefaultBackoff waits as client-go's Reflector does, with jitter that only
// shortens: steps of 1.6 s doubling to a 30 s cap, each shortened by up to
// half, so the n-th wait in a row lies in [0.8 s·2ⁿ, 1.6 s·2ⁿ], which is
// client-go's (800 ms doubling, jitter 1.0: [d, 2d]) until the cap, where
// client-go's reach [30 s, 60 s) and these stay in [15 s, 30 s]. Reset after
// 2 minutes without trouble.
var DefaultBackoff = Backoff{
	Initial: 1600 * time.Millisecond, Max: 30 * time.Second, Factor: 2, Jitter: 0.5,
	ResetAfter: 2 * time.Minute,
}

// step is the n-th step (from 0): Initial·Factorⁿ, at most Max.
func (b Backoff) step(n int) time.Duration {
	d := b.Initial
	for ; n > 0 && d < b.Max; n-- {
		d = time.Duration(float64(d) * b.Factor)
	}
	return min(d, b.Max)
}

// jittered is step d shortened by r·Jitter of itself.
func (b Backoff) jittered(d time.Duration, r float64) time.Duration {
	f := float64(d)
	return time.Duration(f - r*b.Jitter*f)
}

// Delay is the wait after n troubles in a row; r in [0, 1) picks the jitter.
func (b Backoff) Delay(n int, r float64) time.Duration { return b.jittered(b.step(n), r) }

// pacer is the machine's bookkeeping of the backoff: how many troubles came
// in a row, the last step it gave, and when the current trouble-free
// stretch began.
type pacer struct {
	policy Backoff
	rand   func() float64
	// troubles counts the troubles since the last reset; step is the last
	// step given, 0 since the last reset.
	troubles  int
	step      time.Duration
	calmSince time.Time
}

// disturbed ends the trouble-free stretch at now; a stretch of ResetAfter or
// more resets the backoff.
func (p *pacer) disturbed(now time.Time) {
	if now.Sub(p.calmSince) >= p.policy.ResetAfter {
		p.troubles, p.step = 0, 0
	}
	p.calmSince = now
}

// backOff counts trouble at now and returns the wait before the next
// attempt: the next step, jittered, and at least minDelay (a Retry-After).
func (p *pacer) backOff(now time.Time, minDelay time.Duration) time.Duration {
	p.disturbed(now)
	p.step = p.policy.step(p.troubles)
	p.troubles++
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
