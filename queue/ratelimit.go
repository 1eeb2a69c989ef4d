package queue

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// A RateLimiter decides how long a failed key waits before its next try.
type RateLimiter interface {
	// When returns the delay before key's next try, and counts the try.
	When(key string) time.Duration
	// Forget clears key's history, after it finally succeeded.
	Forget(key string)
	// Retries is how many times When was called for key since the last Forget.
	Retries(key string) int
}

// The defaults of DefaultRateLimiter, client-go's workqueue's, named once:
// flags, wiring and docs use these.
const (
	// DefaultRetryBase and DefaultRetryMax bound a key's exponential delay.
	DefaultRetryBase = 5 * time.Millisecond
	DefaultRetryMax  = 1000 * time.Second
	// DefaultRetryQPS and DefaultRetryBurst size the token bucket all
	// retries share, so that many failing keys cannot flood the API server.
	DefaultRetryQPS   = 10
	DefaultRetryBurst = 100
)

// DefaultRateLimiter is what client-go's workqueue uses: per-key exponential
// backoff from 5 ms to 1000 s, and an overall token bucket of 10 retries per
// second (burst 100).
func DefaultRateLimiter() RateLimiter { return NewRateLimiter(DefaultRetryBase, DefaultRetryMax) }

// NewRateLimiter is DefaultRateLimiter with other per-key bounds.
func NewRateLimiter(base, max time.Duration) RateLimiter {
	return MaxOf(NewExponentialLimiter(base, max), NewBucketLimiter(DefaultRetryQPS, DefaultRetryBurst))
}

// ExponentialLimiter delays the n-th retry of a key by base·2ⁿ, at most max.
type ExponentialLimiter struct {
	base, max time.Duration
	mu        sync.Mutex
	failures  map[string]int
}

// NewExponentialLimiter returns a per-key exponential limiter.
func NewExponentialLimiter(base, max time.Duration) *ExponentialLimiter {
	return &ExponentialLimiter{base: base, max: max, failures: map[string]int{}}
}

func (l *ExponentialLimiter) When(key string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.failures[key]
	l.failures[key] = n + 1
	d := float64(l.base) * math.Pow(2, float64(n))
	if d > float64(l.max) {
		return l.max
	}
	return time.Duration(d)
}

func (l *ExponentialLimiter) Forget(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.failures, key)
}

func (l *ExponentialLimiter) Retries(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failures[key]
}

// BucketLimiter spaces all retries, of every key, through one token bucket.
type BucketLimiter struct{ bucket *rate.Limiter }

// NewBucketLimiter allows qps retries per second with bursts of burst.
func NewBucketLimiter(qps float64, burst int) *BucketLimiter {
	return &BucketLimiter{bucket: rate.NewLimiter(rate.Limit(qps), burst)}
}

func (l *BucketLimiter) When(string) time.Duration { return l.bucket.Reserve().Delay() }
func (l *BucketLimiter) Forget(string)             {}
func (l *BucketLimiter) Retries(string) int        { return 0 }

// MaxOf combines limiters: a key waits for the longest of their delays.
func MaxOf(limiters ...RateLimiter) RateLimiter { return maxOf(limiters) }

type maxOf []RateLimiter

func (m maxOf) When(key string) time.Duration {
	var d time.Duration
	for _, l := range m {
		d = max(d, l.When(key))
	}
	return d
}

func (m maxOf) Forget(key string) {
	for _, l := range m {
		l.Forget(key)
	}
}

func (m maxOf) Retries(key string) int {
	n := 0
	for _, l := range m {
		n = max(n, l.Retries(key))
	}
	return n
}
