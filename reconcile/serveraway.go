package reconcile

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// ServerAway reports whether err says the API server, not the object, is at
// fault: unreachable, 5xx, 429 or a timeout; retryAfter is the delay it
// asked for. Anything else (a 4xx, the reconciler's own) is the object's.
func ServerAway(err error) (away bool, retryAfter time.Duration) {
	if err == nil || errors.Is(err, context.Canceled) {
		return false, 0
	}
	if s, ok := apierrors.SuggestsClientDelay(err); ok {
		retryAfter = time.Duration(s) * time.Second
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		code := status.Status().Code
		return code >= 500 || code == 429 || apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err), retryAfter
	}
	var urlErr *url.Error
	var netErr net.Error
	return errors.As(err, &urlErr) || errors.As(err, &netErr) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.ErrUnexpectedEOF) ||
		utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err), retryAfter
}

// Default delays of the pause the workers take while the server is away.
const (
	DefaultPauseInitial = 500 * time.Millisecond
	DefaultPauseMax     = 30 * time.Second
)

// pause is the workers' shared answer to a server that is away (a per-key
// backoff would blame every object): all pause, doubling from Initial to
// Max with every wave of failures (reconciles begun before a pause belong
// to its wave); the key goes back as it was; a success ends it.
type pause struct {
	Initial, Max time.Duration

	mu    sync.Mutex
	until time.Time // workers take no key before this
	set   time.Time // when the current wave's pause was set
	waves int       // waves of failures in a row
}

// failed records a server-away failure of a reconcile begun at began, and
// returns how long the workers pause from now.
func (p *pause) failed(now, began time.Time, retryAfter time.Duration) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.waves == 0 || began.After(p.set) {
		p.waves++
		d := p.Initial
		for i := 1; i < p.waves && d < p.Max; i++ {
			d *= 2
		}
		d = max(min(d, p.Max), retryAfter)
		if until := now.Add(d); until.After(p.until) {
			p.until = until
		}
		p.set = now
	}
	return p.until.Sub(now)
}

// succeeded ends an outage: the next failure starts from Initial.
func (p *pause) succeeded() {
	p.mu.Lock()
	p.waves = 0
	p.mu.Unlock()
}

// wait blocks until the pause is over; false if ctx ended first.
func (p *pause) wait(ctx context.Context) bool {
	for {
		p.mu.Lock()
		d := time.Until(p.until)
		p.mu.Unlock()
		if d <= 0 {
			return ctx.Err() == nil
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
}
