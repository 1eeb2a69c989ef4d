package watcher

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/resourceversion"
)

// State is where the list-then-watch loop is (see the package doc's diagram).
type State int

const (
	// Listing: the first list is under way; the store is empty.
	Listing State = iota
	// Watching: a WATCH applies events to the store (or a probe runs).
	Watching
	// BackingOff: waiting before the next attempt, after trouble.
	BackingOff
	// Relisting: a later list, whose result replaces the store.
	Relisting
	// Stopped: the loop's context ended.
	Stopped
)

func (s State) String() string {
	return [...]string{"Listing", "Watching", "BackingOff", "Relisting", "Stopped"}[s]
}

// ActionKind names the one thing the loop performs next.
type ActionKind int

const (
	// List: a paginated LIST of everything, whose result replaces the store.
	List ActionKind = iota
	// WatchList: the same, as a WATCH with sendInitialEvents=true; at the
	// initial events' end the loop reports Outcome.Listed and reads on.
	WatchList
	// Watch: a WATCH from Action.RV, applying events until the stream ends.
	Watch
	// KeepReading: keep reading the open stream (a WatchList, listed).
	KeepReading
	// Probe: a LIST of one item, for the server's resourceVersion.
	Probe
	// Wait: sleep Action.Delay, then report an Outcome with no error.
	Wait
	// Stop: return.
	Stop
)

func (k ActionKind) String() string {
	return [...]string{"list", "watch-list", "watch", "keep reading", "probe", "wait", "stop"}[k]
}

// Action is the machine's answer to an Outcome: what to do next, and why.
type Action struct {
	Kind ActionKind
	// RV is where a Watch starts.
	RV string
	// Continue, on a List, resumes a failed list from this page's token.
	Continue string
	// Delay is how long a Wait lasts.
	Delay time.Duration
	// Class and Err are the error behind this action, if any.
	Class ErrorClass
	Err   error
	// Reason explains the decision, for logs and --explain.
	Reason string
	// TimeTravel: the list just completed is older than the resourceVersion
	// we had (an etcd restore).
	TimeTravel bool
	// Quiet, on a Watch: how long the streams before it from the same
	// resourceVersion, and the waits between, delivered nothing. The
	// watchdog counts it: a proxy may cut every idle stream short.
	Quiet time.Duration
}

// Outcome is what happened to the last Action.
type Outcome struct {
	// At is when it happened (the end of the request, stream or wait).
	At time.Time
	// Err is why the request or stream ended (nil: it ended normally).
	Err error
	// RV: a list's resourceVersion, or the last a stream delivered ("" if none).
	RV string
	// Continue: of a List that failed on the way, the failed page's token.
	Continue string
	// Listed: a WatchList delivered its initial state and is still open.
	Listed bool
	// Opened: the WATCH was answered with a stream.
	Opened bool
	// Frames counts the events and bookmarks a stream delivered.
	Frames int
	// Open is how long a stream stayed open, Timeout the timeoutSeconds asked.
	Open, Timeout time.Duration
	// ErrorEvent: the stream ended with an ERROR event (Err is its status).
	ErrorEvent bool
	// Silent: the watchdog abandoned a stream that sent nothing for too long.
	Silent bool
}

// Machine decides, from each Outcome, the next Action. It holds the loop's
// whole state and does no I/O and reads no clock: the loop performs actions
// and reports what came of them, with the time. Its state is the picture's
// State and the data that state carries (listing, watching); beside them it
// keeps how lists are made, the watchdog's silence and the backoff.
// docs/watcher.md gives the table of every decision of Step, which
// machine_table_test.go holds to it.
type Machine struct {
	// State is where the loop is.
	State State
	// RV is the last resourceVersion the store is synced to; a re-WATCH
	// starts here.
	RV string
	// SilenceLimit, if set: a Watch due after that much silence is a Probe.
	SilenceLimit time.Duration

	// doing is the action in flight.
	doing Action

	// What the state carries: Listing and Relisting a list, Watching the
	// streams from the last list, BackingOff the action after the wait.
	list  listing
	watch watching
	after Action

	// lists is how lists are made.
	lists listMethod
	// relisted: a 410 was relisted at once, and no stream has run healthy
	// since: the next relist waits out the backoff.
	relisted bool
	// quietSince is when the streams from RV that delivered nothing began
	// (zero: none, or a list or a probe heard from the server since).
	quietSince time.Time
	// pace is the backoff's bookkeeping; now, the time of the outcome being
	// applied, is its clock.
	pace pacer
	now  time.Time
}

// listing is what a list carries, until it is in the store.
type listing struct {
	// restarted: it restarted at once, from the first page, after an
	// expired continue token or "too large resource version".
	restarted bool
	// forStart: it is the relist of a server that said it had just started.
	forStart bool
}

// watching is what the streams from one list carry, until the next list.
type watching struct {
	// fresh: the list was for a server that had just started, and no
	// stream has opened since.
	fresh bool
	// errored: a stream ended in an ERROR after it carried us on, and the
	// loop re-watched; no stream has run healthy since.
	errored bool
}

// listMethod is how lists are made.
type listMethod int

const (
	// byLIST: paginated LISTs (WatchList is off, or the server refused it).
	byLIST listMethod = iota
	// byWatchList: a WATCH with sendInitialEvents.
	byWatchList
	// byLISTUntilHealthy: LIST, since a WatchList failed on the way, until
	// a stream runs healthy.
	byLISTUntilHealthy
)

// NewMachine returns a machine in the Listing state. rand returns numbers in
// [0, 1) for the jitter.
func NewMachine(b Backoff, watchList bool, rand func() float64) *Machine {
	m := &Machine{State: Listing, lists: byLIST, pace: pacer{policy: b, rand: rand, schedule: b.schedule()}}
	if watchList {
		m.lists = byWatchList
	}
	return m
}

// Start is the first action: the first list.
func (m *Machine) Start(now time.Time) Action {
	m.now = now
	m.pace.calmSince = now
	return m.do(m.listAction("start: list everything"))
}

// Healthy reports whether a stream was trouble-free: it stayed open for
// ResetAfter, or ended on its own at its timeout, whatever it delivered.
func (m *Machine) Healthy(o Outcome) bool {
	if o.Open >= m.pace.policy.ResetAfter {
		return true
	}
	return o.Err == nil && !o.ErrorEvent && !o.Silent && o.Timeout > 0 && o.Open >= o.Timeout-o.Timeout/10
}

// end is an Outcome with its error classified.
type end struct {
	Outcome
	class      ErrorClass
	retryAfter time.Duration
}

// Step applies the outcome of the action in flight and returns the next one.
func (m *Machine) Step(o Outcome) Action {
	m.now = o.At
	e := end{Outcome: o}
	e.class, e.retryAfter = Classify(o.Err)
	if e.class == Canceled {
		m.State = Stopped
		return m.do(Action{Kind: Stop, Reason: "stopped"})
	}
	switch m.doing.Kind {
	case Wait:
		m.pace.calmSince = o.At
		m.State = m.stateFor(m.after)
		return m.do(m.after)
	case List:
		return m.listEnded(e)
	case WatchList:
		if o.Listed {
			return m.listed(o, KeepReading)
		}
		return m.watchListFailed(e)
	case Probe:
		return m.probed(e)
	}
	return m.streamEnded(e) // Watch, KeepReading
}

// listEnded: a LIST, every page of it, succeeded or failed.
func (m *Machine) listEnded(e end) Action {
	// An expired continue token (a compaction) or a server behind us.
	restart := e.class == Expired || e.class == TooLargeRV
	reason := fmt.Sprintf("list failed (%s): %v", e.class, e.Err)
	switch {
	case e.class == NoError:
		return m.listed(e.Outcome, Watch)
	case restart && !m.list.restarted:
		m.list.restarted = true
		return m.do(Action{Kind: List, Class: e.class, Err: e.Err,
			Reason: fmt.Sprintf("list failed (%v): list again from the latest", e.Err)})
	case restart:
		return m.trouble(e, e.retryAfter, Action{Kind: List}, reason)
	}
	// Anything else: after the backoff, from the page that failed.
	return m.trouble(e, e.retryAfter, Action{Kind: List, Continue: e.Continue}, reason)
}

// listed: a list (or a WatchList's initial state) is in the store at o.RV.
func (m *Machine) listed(o Outcome, next ActionKind) Action {
	a := Action{Kind: next, RV: o.RV, Reason: "listed at resourceVersion " + o.RV}
	if behind(o.RV, m.RV) {
		a.TimeTravel = true
		a.Reason = fmt.Sprintf("listed at resourceVersion %s, older than the %s we had: the server's history went back (an etcd restore?); the store now holds the server's state", o.RV, m.RV)
	}
	m.RV = o.RV
	m.watch = watching{fresh: m.list.forStart}
	m.list = listing{}
	m.State = Watching
	return m.do(a)
}

// watchListFailed: a WatchList ended before its initial state was in.
func (m *Machine) watchListFailed(e end) Action {
	switch e.class {
	case Refused:
		// A server without the WatchList feature: LIST from now on.
		m.lists = byLIST
		return m.do(Action{Kind: List, Class: e.class, Err: e.Err,
			Reason: fmt.Sprintf("server refused WatchList (%v): falling back to paginated LIST", e.Err)})
	case Throttled, Denied:
		return m.trouble(e, e.retryAfter, m.doing, fmt.Sprintf("watch-list failed (%s): %v", e.class, e.Err))
	}
	// Anything else: LIST, at once, until a stream runs healthy.
	m.lists = byLISTUntilHealthy
	return m.do(Action{Kind: List, Class: e.class, Err: e.Err,
		Reason: fmt.Sprintf("watch-list failed before its initial events ended (%v): LIST instead", e.Err)})
}

// probed: the server's resourceVersion, asked after trouble.
func (m *Machine) probed(e end) Action {
	switch {
	case e.class != NoError:
		return m.trouble(e, e.retryAfter, m.afterUnopened(e.Err), fmt.Sprintf("probe failed (%s): %v", e.class, e.Err))
	case behind(e.RV, m.RV):
		a := m.relist()
		a.Reason = fmt.Sprintf("the server is at resourceVersion %s, behind our %s: its history went back (an etcd restore?); relist", e.RV, m.RV)
		return m.do(a)
	}
	return m.do(Action{Kind: Watch, RV: m.RV,
		Reason: fmt.Sprintf("the server is at resourceVersion %s: re-watch from %s", e.RV, m.RV)})
}

// streamEnded: a WATCH (or a WatchList read on) ended, or could not open.
func (m *Machine) streamEnded(e end) Action {
	from := m.RV
	silence := m.countSilence(e.Outcome)
	if e.RV != "" {
		m.RV = e.RV
	}
	if e.Opened {
		m.watch.fresh = false
	}
	healthy := m.Healthy(e.Outcome)
	if healthy { // it forgives the trouble before it
		m.relisted, m.watch.errored = false, false
		if m.lists == byLISTUntilHealthy {
			m.lists = byWatchList
		}
	}
	// An ERROR before progress is a 410 in other words: relist. One after
	// progress re-watches after the backoff, once before a healthy stream.
	errored := e.ErrorEvent && e.class == Transient
	stuck := errored && (m.RV == from || m.watch.errored)
	if errored && !healthy && !stuck {
		m.watch.errored = true
	}
	switch {
	case e.class == Expired, e.class == TooLargeRV, stuck:
		return m.relistAfterGone(e)
	case e.Silent:
		// A dead connection, or a server behind us: ask where it is.
		reason := fmt.Sprintf("watch silent for %s: abandoned; is the server behind resourceVersion %s?", silence.Round(time.Second), m.RV)
		if e.Frames > 0 { // silent for the limit after its last frame
			reason = fmt.Sprintf("watch silent since its last frame (of %d): abandoned; is the server behind resourceVersion %s?", e.Frames, m.RV)
		}
		return m.do(Action{Kind: Probe, Class: e.class, Err: e.Err, Reason: reason})
	case healthy && e.class == NoError:
		return m.do(Action{Kind: Watch, RV: m.RV,
			Reason: fmt.Sprintf("watch ended after %d frames: re-watch from resourceVersion %s", e.Frames, m.RV)})
	}
	reason := fmt.Sprintf("watch failed (%s) after %d frames in %s: %v", e.class, e.Frames, e.Open.Round(time.Millisecond), e.Err)
	if e.Err == nil {
		reason = fmt.Sprintf("watch closed after %d frames in %s, before its timeout", e.Frames, e.Open.Round(time.Millisecond))
	}
	resume := Action{Kind: Watch, RV: m.RV}
	if !e.Opened {
		resume = m.afterUnopened(e.Err)
	}
	return m.trouble(e, e.retryAfter, resume, reason)
}

// countSilence adds a stream that delivered nothing to the silence before
// it; a frame ends the count. It returns the silence up to this stream's end.
func (m *Machine) countSilence(o Outcome) time.Duration {
	began := o.At.Add(-o.Open)
	if !m.quietSince.IsZero() {
		began = m.quietSince
	}
	m.quietSince = time.Time{}
	if o.Opened && o.Frames == 0 && !o.Silent {
		m.quietSince = began
	}
	return o.At.Sub(began)
}

// relistAfterGone: the server cannot go on from our resourceVersion. The
// first relist since a healthy stream is at once; another waits the backoff.
func (m *Machine) relistAfterGone(e end) Action {
	reason := fmt.Sprintf("watch from resourceVersion %s ended (%v): relist", m.RV, e.Err)
	if m.relisted {
		return m.trouble(e, 0, m.relist(), reason)
	}
	m.relisted = true
	m.pace.disturbed(e.At)
	a := m.relist()
	// Right after trouble, every client of a restarted server meets its 410
	// together: a random part of the last step spreads their lists.
	if d := m.pace.stagger(); d > 0 {
		a.Reason = fmt.Sprintf("relist, %s after the 410 (staggered, so that clients back from the same outage do not all relist at once)", d.Round(time.Millisecond))
		m.after = a
		return m.do(Action{Kind: Wait, Delay: d, Class: e.class, Err: e.Err,
			Reason: fmt.Sprintf("%s, after a random part of the last backoff step (%s)", reason, d.Round(time.Millisecond))})
	}
	a.Class, a.Err, a.Reason = e.class, e.Err, reason
	return m.do(a)
}

// afterUnopened follows the backoff after a WATCH that could not open, or a
// failed probe: a probe (was the server restored?). A server just started
// is relisted, as after a 410, unless the store holds that relist (fresh).
func (m *Machine) afterUnopened(err error) Action {
	switch {
	case serverStarting(err) && m.watch.fresh:
		return Action{Kind: Watch, RV: m.RV}
	case serverStarting(err):
		m.relisted, m.list.forStart = true, true
		return m.listAction("relist")
	}
	return Action{Kind: Probe}
}

// Resharded: the watcher's shard changed, and the action in flight was cut
// short. A list follows at once, and the backoff is untouched.
func (m *Machine) Resharded() Action {
	m.list.restarted = false
	if m.lists == byLISTUntilHealthy {
		m.lists = byWatchList
	}
	a := m.listAction("the shard changed: list it")
	m.State = m.stateFor(a)
	return m.do(a)
}

// relist is the action that starts a relist.
func (m *Machine) relist() Action {
	m.State = Relisting
	return m.listAction("relist")
}

// listAction is a list, made as lists are made now.
func (m *Machine) listAction(reason string) Action {
	if m.lists == byWatchList {
		return Action{Kind: WatchList, Reason: reason}
	}
	return Action{Kind: List, Reason: reason}
}

// trouble: wait out the backoff (at least minDelay, the server's
// Retry-After), then do next.
func (m *Machine) trouble(e end, minDelay time.Duration, next Action, reason string) Action {
	d := m.pace.backOff(e.At, minDelay)
	next.Class, next.Err, next.Reason = 0, nil, "waited "+d.Round(time.Millisecond).String()
	m.after = next
	m.State = BackingOff
	return m.do(Action{Kind: Wait, Delay: d, Class: e.class, Err: e.Err, Reason: reason})
}

// do makes a the action in flight. A Watch carries the silence before it (a
// Probe once that reaches the limit); a list or a probe ends the silence.
func (m *Machine) do(a Action) Action {
	if a.Kind == Watch && !m.quietSince.IsZero() {
		a.Quiet = m.now.Sub(m.quietSince)
		if m.SilenceLimit > 0 && a.Quiet >= m.SilenceLimit {
			a = Action{Kind: Probe, Reason: fmt.Sprintf("the streams from resourceVersion %s sent nothing for %s, with the waits between: is the server behind it?", m.RV, a.Quiet.Round(time.Second))}
		}
	}
	switch a.Kind {
	case List, WatchList, Probe:
		m.quietSince = time.Time{}
	}
	m.doing = a
	return a
}

// stateFor is the state in which action a runs.
func (m *Machine) stateFor(a Action) State {
	switch {
	case a.Kind == Stop:
		return Stopped
	case a.Kind != List && a.Kind != WatchList:
		return Watching
	case m.RV == "":
		return Listing
	}
	return Relisting
}

// behind reports whether resourceVersion rv is older than ours ("" is not).
func behind(rv, ours string) bool {
	c, err := resourceversion.CompareResourceVersion(rv, ours)
	return err == nil && c < 0
}
