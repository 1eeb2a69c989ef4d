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

// The defaults of DefaultRateLimiter, client-go's workqueue's.
const (
	// DefaultRetryBase and DefaultRetryMax bound a key's exponential delay.
	DefaultRetryBase = 5 * time.Millisecond
	DefaultRetryMax  = 1000 * time.Second
	// DefaultRetryQPS and DefaultRetryBurst size the token bucket all
	// retries share.
	DefaultRetryQPS   = 10
	DefaultRetryBurst = 100
)

// DefaultRateLimiter is client-go's workqueue's: per-key exponential
// backoff, and a token bucket all keys share.
func DefaultRateLimiter() RateLimiter { return NewRateLimiter(DefaultRetryBase, DefaultRetryMax) }

// NewRateLimiter is DefaultRateLimiter with other per-key bounds.
func NewRateLimiter(base, max time.Duration) RateLimiter {
	return newBucketed(NewExponentialLimiter(base, max), DefaultRetryQPS, DefaultRetryBurst)
}

// bucketed is an ExponentialLimiter whose delays are at least those of one
// token bucket all keys share, so that failing keys cannot flood the server.
type bucketed struct {
	*ExponentialLimiter
	bucket *rate.Limiter
}

func newBucketed(l *ExponentialLimiter, qps float64, burst int) *bucketed {
	return &bucketed{l, rate.NewLimiter(rate.Limit(qps), burst)}
}

func (l *bucketed) When(key string) time.Duration {
	return max(l.ExponentialLimiter.When(key), l.bucket.Reserve().Delay())
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
