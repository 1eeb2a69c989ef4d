package reconcile

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
)

// reconcileContext is the context one reconcile runs in: work's values and
// end, a deadline, and (klog.FromContext) the worker's logger
// with the key. It is
//
//	context.WithTimeout(klog.NewContext(work, klog.LoggerWithValues(logger, "key", key)), timeout)
//
// made lazily: that costs ten allocations and a runtime timer per key,
// where most reconciles find nothing to do, never ask for their logger and
// never wait on Done. Here the key costs one allocation; the logger is made
// when first asked for, and the channel, the timer and the watch on work
// when Done is first called (an API request does). Err needs none of them:
// it reads the clock and work. A context derived from it (context.WithCancel)
// follows it through Done, with a goroutine, as it follows any context not
// of package context.
type reconcileContext struct {
	work     context.Context
	deadline time.Time
	logger   klog.Logger // the worker's: without the key
	key      string

	mu     sync.Mutex
	keyed  any // the logger with the key, once asked for
	done   chan struct{}
	err    error
	byWork bool // err is work's: work ended first
	timer  *time.Timer
	noWork func() bool // stops the watch on work
}

// newReconcileContext makes the context of a reconcile that ends at
// deadline (its start, which the caller reads anyway, plus the timeout: one
// clock read per key fewer).
func newReconcileContext(work context.Context, logger klog.Logger, key string, deadline time.Time) *reconcileContext {
	if d, ok := work.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	return &reconcileContext{work: work, deadline: deadline, logger: logger, key: key}
}

func (c *reconcileContext) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *reconcileContext) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done != nil {
		return c.done
	}
	c.check()
	c.done = make(chan struct{})
	if c.err != nil {
		close(c.done)
		return c.done
	}
	c.timer = time.AfterFunc(time.Until(c.deadline), func() { c.end(context.DeadlineExceeded) })
	c.noWork = context.AfterFunc(c.work, c.endByWork)
	return c.done
}

func (c *reconcileContext) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.check()
	return c.err
}

// check ends the context if work ended or the deadline passed (c.mu held).
func (c *reconcileContext) check() {
	if c.err != nil {
		return
	}
	if err := c.work.Err(); err != nil {
		c.endLocked(err)
		c.byWork = true
	} else if !time.Now().Before(c.deadline) {
		c.endLocked(context.DeadlineExceeded)
	}
}

func (c *reconcileContext) Value(k any) any {
	switch k {
	case logrKey:
		return c.log()
	case causeKey:
		// context.Cause asks for the nearest cancel of package context,
		// and takes its cause if it has one, else Err. work's is the
		// cause only if work's end ended this context: after the deadline
		// or cancel, it is this context's Err, whatever work's end says.
		c.mu.Lock()
		c.check()
		ours := c.err != nil && !c.byWork
		c.mu.Unlock()
		if ours {
			return nil
		}
	}
	return c.work.Value(k)
}

// log is the worker's logger with the key, made once.
func (c *reconcileContext) log() klog.Logger {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.keyed == nil {
		c.keyed = klog.LoggerWithValues(c.logger, "key", c.key)
	}
	return c.keyed.(klog.Logger)
}

// cancel ends the context, once the reconcile returned: as a
// context.CancelFunc, it releases the timer and the watch on work.
func (c *reconcileContext) cancel() {
	c.end(context.Canceled)
	c.mu.Lock()
	timer, noWork := c.timer, c.noWork
	c.mu.Unlock()
	if timer != nil {
		timer.Stop()
		noWork()
	}
}

// endByWork ends the context as work did, unless it ended already.
func (c *reconcileContext) endByWork() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.endLocked(c.work.Err())
		c.byWork = true
	}
}

func (c *reconcileContext) end(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.endLocked(err)
}

func (c *reconcileContext) endLocked(err error) {
	if c.err != nil {
		return
	}
	c.err = err
	if c.done != nil {
		close(c.done)
	}
}

func (c *reconcileContext) String() string { return "reconcile context of " + c.key }

// logrKey is the key klog.NewContext stores a logger under (logr's own,
// unexported), causeKey the one context.Cause asks for (package
// context's): learnt by asking a context that records what it is asked.
var (
	logrKey  = probeKey(func(ctx context.Context) { logr.FromContextOrDiscard(ctx) })
	causeKey = probeKey(func(ctx context.Context) { _ = context.Cause(ctx) })
)

func probeKey(ask func(context.Context)) any {
	var p keyProbe
	ask(&p)
	return p.key
}

// keyProbe is a context, ended (context.Cause asks no value of one that is
// not), that records the key it is asked.
type keyProbe struct {
	context.Context
	key any
}

func (p *keyProbe) Value(k any) any {
	p.key = k
	return nil
}

func (p *keyProbe) Err() error { return context.Canceled }
