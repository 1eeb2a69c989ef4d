package watcher

import (
	"fmt"
	"time"
)

// State is where the list-then-watch loop is.
//
//	          ┌──────── list failed ───────┐
//	          ▼                            │
//	     ┌─────────┐  listed at RV    ┌──────────┐
//	───▶ │ Listing │ ───────────────▶ │ Watching │ ◀─┐ stream ended after a
//	     └─────────┘                  └──────────┘ ──┘ healthy run: re-WATCH
//	          ▲                         │      │       from the last RV
//	  back off│          error before   │      │ 410 Gone / Expired
//	    ┌────────────┐   any event      │      ▼
//	    │ BackingOff │ ◀────────────────┘ ┌───────────┐
//	    └────────────┘ ◀─ list failed ─── │ Relisting │ ── listed ─▶ Watching
//	                                      └───────────┘
//
// Listing is the first list (the store is empty; every object becomes an
// Added delta). Relisting is every later one: the result replaces the store
// and keys that disappeared come out as Deleted deltas. BackingOff waits, then
// returns to the state that failed.
type State int

const (
	Listing State = iota
	Watching
	BackingOff
	Relisting
	Stopped
)

func (s State) String() string {
	return [...]string{"Listing", "Watching", "BackingOff", "Relisting", "Stopped"}[s]
}

// Op is the request an Outcome reports on.
type Op int

const (
	OpList Op = iota
	OpWatch
)

// Outcome is what happened to one LIST (all its pages) or one WATCH stream.
type Outcome struct {
	Op  Op
	Err error
	// RV is, for a LIST, the list's resourceVersion; for a WATCH, the last
	// resourceVersion the stream delivered ("" if it delivered none).
	RV string
	// Events counts the events and bookmarks a WATCH delivered.
	Events int
	// Duration is how long a WATCH stream stayed open.
	Duration time.Duration
	// ErrorEvent: the WATCH stream ended with an ERROR event, the server's
	// own word that it cannot go on from here (Err is its status).
	ErrorEvent bool
}

// MinHealthyWatch: a watch that closes sooner than this without delivering
// anything was not healthy (the server or a proxy is refusing us politely),
// and the next attempt backs off. This is client-go's rule too.
const MinHealthyWatch = time.Second

// Machine is the loop's state and its transition rules, free of I/O: the loop
// performs the request the state calls for and feeds the Outcome to Step.
type Machine struct {
	State State
	// RV is the last resourceVersion we are synced to: from the last list,
	// then from every event and bookmark. A re-WATCH starts here.
	RV string
	// FromLatest means the next LIST must ask for the latest data
	// (resourceVersion "") because the RV we had is unavailable.
	FromLatest bool
	// Synced is true once a list has completed.
	Synced bool
	// WatchList: the list step is a WATCH with sendInitialEvents (see
	// Options.WatchList). It turns false, for good, if the server refuses it.
	WatchList bool
	// resume is the state BackingOff leads back to.
	resume State
	// relisted: a 410 sent us to relist and no watch has been healthy since.
	relisted bool
}

// Next tells the loop how to carry out a transition.
type Next struct {
	// MinDelay is the least time a BackingOff state must wait (the server's
	// Retry-After); the backoff may ask for longer.
	MinDelay time.Duration
	// ResetBackoff: the last stream was healthy; start the backoff afresh.
	ResetBackoff bool
	// Class is how the outcome's error was classified, Err the error itself.
	Class ErrorClass
	Err   error
	// Reason explains the transition, for logs and --explain.
	Reason string
}

// ListRV is the resourceVersion the next LIST asks for. The first list asks
// for "" (the latest data, read consistently, which the server paginates; "0"
// would be served from the watch cache in one unpaginated response), and so
// does a relist after a 410. Otherwise (a relist for another reason) it asks
// for data "not older than" our RV.
func (m *Machine) ListRV() string {
	if m.FromLatest {
		return ""
	}
	return m.RV
}

// Step applies an outcome and moves the machine to its next state.
func (m *Machine) Step(o Outcome) Next {
	class, retryAfter := Classify(o.Err)
	if class == Canceled {
		m.State = Stopped
		return Next{Class: class, Reason: "stopped"}
	}
	var next Next
	if o.Op == OpList {
		next = m.stepList(o, class, retryAfter)
	} else {
		next = m.stepWatch(o, class, retryAfter)
	}
	next.Err = o.Err
	return next
}

func (m *Machine) stepList(o Outcome, class ErrorClass, retryAfter time.Duration) Next {
	if class == NoError {
		m.RV, m.FromLatest, m.Synced = o.RV, false, true
		m.State = Watching
		return Next{Reason: "listed at resourceVersion " + o.RV}
	}
	if class == Refused && m.WatchList {
		// An apiserver without the WatchList feature rejects the request's
		// parameters (400 or 422): use the paginated LIST from now on.
		m.WatchList = false
		return Next{Class: class, Reason: fmt.Sprintf("server refused WatchList (%v): falling back to paginated LIST", o.Err)}
	}
	if (class == Expired || class == TooLargeRV) && !m.FromLatest {
		// The RV (or continue token) we listed with is unusable: list again,
		// at once, from the latest data. A second failure backs off.
		m.FromLatest = true
		return Next{Class: class, Reason: fmt.Sprintf("list at resourceVersion %q failed (%v): list again from the latest", m.RV, o.Err)}
	}
	return m.backoff(m.State, class, retryAfter, fmt.Sprintf("list failed (%s): %v", class, o.Err))
}

func (m *Machine) stepWatch(o Outcome, class ErrorClass, retryAfter time.Duration) Next {
	if o.RV != "" {
		m.RV = o.RV
	}
	healthy := o.Events > 0 || o.Duration >= MinHealthyWatch
	if healthy {
		m.relisted = false
	}
	// An ERROR event other than 410 (typically a 500) still means the
	// server cannot serve this watch from our resourceVersion: after etcd
	// compacted exactly up to the next change, the apiserver has that event
	// but not the object before it, and says "etcd event received with
	// PrevKv=nil" on every re-watch from there. Re-watching would fail
	// forever; as client-go does, relist.
	serverGaveUp := o.ErrorEvent && class == Transient
	if serverGaveUp {
		class = Expired
	}
	switch {
	case class == Expired:
		// The server no longer has the history after our RV. Relist from
		// the latest data: a LIST "not older than" our RV could be served
		// from etcd at exactly that RV (it is not compacted yet), and a
		// WATCH from it would expire again, forever. This happens after
		// every apiserver restart: its new watch cache starts after our RV.
		m.FromLatest = true
		reason := fmt.Sprintf("resourceVersion %s expired (%v): relist from the latest", m.RV, o.Err)
		if serverGaveUp {
			reason = fmt.Sprintf("the server ended the watch from resourceVersion %s with an error (%v): relist from the latest", m.RV, o.Err)
		}
		// The first 410 relists at once, whatever the backoff grew to while
		// the server was away: the relist is what recovers us. A 410 again
		// before any healthy watch means something is wrong: back off.
		if m.relisted && !healthy {
			return m.backoff(Relisting, class, 0, reason)
		}
		m.relisted = true
		m.State = Relisting
		return Next{Class: class, ResetBackoff: healthy, Reason: reason}
	case class == Throttled:
		return m.backoff(Watching, class, retryAfter, fmt.Sprintf("watch throttled: %v", o.Err))
	case healthy:
		reason := fmt.Sprintf("watch ended after %d events: re-watch from resourceVersion %s", o.Events, m.RV)
		if o.Err != nil {
			reason = fmt.Sprintf("watch broke after %d events (%v): re-watch from resourceVersion %s", o.Events, o.Err, m.RV)
		}
		m.State = Watching
		return Next{Class: class, ResetBackoff: true, Reason: reason}
	case class == NoError:
		return m.backoff(Watching, class, 0, "watch closed at once with no events")
	default:
		return m.backoff(Watching, class, retryAfter, fmt.Sprintf("watch failed (%s): %v", class, o.Err))
	}
}

func (m *Machine) backoff(resume State, class ErrorClass, minDelay time.Duration, reason string) Next {
	m.resume = resume
	m.State = BackingOff
	return Next{MinDelay: minDelay, Class: class, Reason: reason}
}

// BackoffDone ends a BackingOff state: the machine returns to the step that failed.
func (m *Machine) BackoffDone() {
	if m.State == BackingOff {
		m.State = m.resume
	}
}
