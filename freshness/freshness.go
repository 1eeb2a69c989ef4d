// Package freshness answers an operator's question that no informer library
// does: how far behind the server is my cache, right now?
//
// client-go exposes only the last resourceVersion, which says where the cache
// is, not when. Three measures say when, each exported by package metrics
// and shown on the live page (package ui):
//
//   - Silence (rawwatch_watch_silence_seconds): time since the server last
//     said anything about the resource — a list page, an event or a
//     bookmark. The apiserver bookmarks a quiet watch about every minute, so
//     a healthy cache is never silent for much longer; a stream that hangs
//     shows here before the watchdog (--watch-silence-limit) cuts it.
//   - Delivery lag (rawwatch_watch_event_delivery_lag_seconds): for each
//     ADDED or MODIFIED event, its arrival minus the write time the server
//     records in the object (watcher.WrittenAt). Free, on every event, but coarse:
//     the server keeps whole seconds, so a lag reads up to a second long,
//     and it includes the clock skew between the apiserver and us.
//   - The probe (--freshness-probe, Probe): every interval, the replica that
//     works writes a heartbeat annotation holding the time to nanoseconds
//     into an object of its own, and times the heartbeat's way through the
//     controller: write, event (the frame decoded), store (applied),
//     reconcile (a worker finished reconciling that version).
//
// The probe's path:
//
//	Probe.Run ── PATCH heartbeat=t0 ──▶ apiserver ── WATCH frame ──▶ decoder (t1)
//	                                                                    │
//	worker: Reconcile done (t3) ◀── queue ◀── handler ◀── store.Upsert (t2)
//
//	rawwatch_freshness_probe_seconds{stage="event"}     = t1 - t0
//	rawwatch_freshness_probe_seconds{stage="store"}     = t2 - t0
//	rawwatch_freshness_probe_seconds{stage="reconcile"} = t3 - t0
//
// Event and store are microseconds apart here, because nothing stands
// between the decoder and the store; an informer has a DeltaFIFO and a
// goroutine hop there. Every replica measures event and store from the
// leader's heartbeats; only the leader reconciles, and only it writes them.
// The heartbeat changes an annotation, not the spec: the reconcile finds
// nothing to write, so the probe costs one PATCH per interval.
//
// Nothing here does I/O but Probe.Run, which calls the Write it is given.
package freshness

import (
	"context"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"rawwatch/observe"
	"rawwatch/reconcile"
	"rawwatch/watcher"
)

// Annotation holds a heartbeat's write time (RFC 3339, nanoseconds).
const Annotation = "rawwatch.example.com/heartbeat"

// DefaultName is the name of the probe's object.
const DefaultName = "rawwatch-freshness-probe"

// Stage is how far a heartbeat got.
type Stage string

const (
	// Event: its WATCH frame was read and decoded.
	Event Stage = "event"
	// Store: it was applied to the store.
	Store Stage = "store"
	// Reconcile: a worker finished reconciling the object holding it.
	Reconcile Stage = "reconcile"
)

// The events a Probe reports.
type (
	// Beat: a heartbeat written at Written; Err says why the write failed.
	Beat struct {
		Written time.Time
		Err     error
	}
	// Measured: the heartbeat written at Written reached Stage after Took.
	Measured struct {
		Stage   Stage
		Took    time.Duration
		Written time.Time
	}
)

// Probe writes heartbeats (Run) and times them (Observe: plug it into the
// fan-out that hears the watcher and the workers).
type Probe struct {
	// Key is the store key of the probe's object (namespace/name).
	Key string
	// Interval between heartbeats.
	Interval time.Duration
	// Write stores the heartbeat written at t in the object (creating it
	// if needed).
	Write func(ctx context.Context, t time.Time) error
	// Observer hears Beat and Measured.
	Observer observe.Observer

	mu      sync.Mutex
	seen    time.Time // the newest heartbeat that reached the store
	pending time.Time // ...and is not reconciled yet
	started bool      // a reconcile of Key began after it reached the store
}

// WriteTimeout is the least time a heartbeat write is given (at least an
// Interval).
const WriteTimeout = 5 * time.Second

// Run writes a heartbeat every Interval until ctx ends. A failed write is
// reported and tried again at the next tick, never sooner: the probe adds at
// most one request per Interval, whatever the server answers.
func (p *Probe) Run(ctx context.Context) {
	tick := time.NewTicker(p.Interval)
	defer tick.Stop()
	for {
		t := time.Now()
		// A write the server never answers must not stop the heartbeats.
		wctx, cancel := context.WithTimeout(ctx, max(p.Interval, WriteTimeout))
		err := p.Write(wctx, t)
		cancel()
		if err != nil && ctx.Err() == nil {
			klog.FromContext(ctx).V(1).Info("Freshness heartbeat not written", "err", err)
		}
		if ctx.Err() == nil {
			p.report(Beat{Written: t, Err: err})
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Observe times heartbeats on their way: watcher.Received of the probe's
// object gives event and store, the next reconcile of it that starts after
// that and succeeds gives reconcile. Older heartbeats (a relist, a replay)
// are not measured again.
func (p *Probe) Observe(e observe.Event) {
	var out []Measured
	p.mu.Lock()
	switch e := e.(type) {
	case watcher.Received:
		if e.Key != p.Key || e.Object == nil {
			break
		}
		t0, err := time.Parse(time.RFC3339Nano, e.Object.GetAnnotations()[Annotation])
		if err != nil || !t0.After(p.seen) {
			break
		}
		p.seen, p.pending, p.started = t0, t0, false
		out = append(out, Measured{Stage: Event, Took: e.Arrived.Sub(t0), Written: t0},
			Measured{Stage: Store, Took: time.Since(t0), Written: t0})
	case reconcile.Started:
		if e.Key == p.Key && !p.pending.IsZero() {
			p.started = true
		}
	case reconcile.Finished:
		if e.Key == p.Key && p.started && e.Err == nil {
			out = append(out, Measured{Stage: Reconcile, Took: time.Since(p.pending), Written: p.pending})
			p.pending, p.started = time.Time{}, false
		}
	}
	p.mu.Unlock()
	for _, m := range out {
		p.report(m)
	}
}

func (p *Probe) report(e observe.Event) {
	if p.Observer != nil {
		p.Observer.Observe(e)
	}
}
