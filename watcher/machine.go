package watcher

import (
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
	"k8s.io/apimachinery/pkg/util/resourceversion"
)

// State is where the list-then-watch loop is (see the package doc's diagram).
type State int

const (
	// Listing: the first list is under way; the store is empty.
	Listing State = iota
	// Watching: a WATCH stream applies events to the store.
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
	// List: a paginated LIST of everything, at resourceVersion "" (the
	// latest data, read consistently); its result replaces the store.
	List ActionKind = iota
	// WatchList: the same, as a WATCH with sendInitialEvents=true. When its
	// initial events end, the loop reports Outcome.Listed and reads on.
	WatchList
	// Watch: a WATCH from Action.RV, applying events until the stream ends.
	Watch
	// KeepReading: keep reading the stream that is open (a WatchList that just
	// delivered its initial state goes on with live events).
	KeepReading
	// Probe: a LIST of one item, to read the server's current
	// resourceVersion (after a silent stream: is the server behind us?).
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
	// Continue, on a List, resumes a list that failed on the way from the
	// page this token asks for (the pages before it are kept by the loop).
	Continue string
	// Delay is how long a Wait lasts.
	Delay time.Duration
	// Class and Err are the error behind this action, if any.
	Class ErrorClass
	Err   error
	// Reason explains the decision, for logs and --explain.
	Reason string
	// TimeTravel: the list just completed is older than the resourceVersion
	// we had: the server's history went backwards (an etcd restore).
	TimeTravel bool
	// Quiet, on a Watch: how long ago the streams before it from the same
	// resourceVersion began to deliver nothing, back to back (the backoff
	// waits between them count too). The watchdog's limit is on that
	// silence, not on one stream's: a server behind our resourceVersion
	// that ends each WATCH at its timeout, or a proxy that cuts idle
	// streams, sends nothing for ever in streams each shorter than the
	// limit, and a proxy that cuts them every few seconds spends most of
	// that silence in the waits.
	Quiet time.Duration
}

// Outcome is what happened to the last Action.
type Outcome struct {
	// At is when it happened (the end of the request, stream or wait).
	At time.Time
	// Err is why the request or stream ended (nil: it ended normally).
	Err error
	// RV: for a LIST, the list's resourceVersion; for a stream, the last
	// resourceVersion it delivered ("" if none); with Listed, the snapshot's.
	RV string
	// Continue: a List that failed after its first page, the token of the
	// page that failed.
	Continue string
	// Listed: a WatchList stream delivered its initial state (the bookmark
	// annotated k8s.io/initial-events-end) and is still open.
	Listed bool
	// Opened: the WATCH request was answered with a stream (false: it was
	// refused, failed, or answered with an error status).
	Opened bool
	// Frames counts the events and bookmarks a stream delivered.
	Frames int
	// Open is how long a stream stayed open, Timeout the timeoutSeconds it
	// asked the server for.
	Open, Timeout time.Duration
	// ErrorEvent: the stream ended with an ERROR event (Err is its status).
	ErrorEvent bool
	// Silent: the watchdog abandoned a stream that sent nothing for too long.
	Silent bool
}

// Backoff is the retry policy: after the n-th trouble in a row the loop waits
// d = min(Max, Initial·Factorⁿ), shortened at random by up to Jitter·d so that
// many clients do not retry in step. Max is a true cap: jitter never
// lengthens a delay. The count starts again after a trouble-free stretch of
// ResetAfter.
//
// The steps d come from an ExponentialBackOff (github.com/cenkalti/backoff/v4)
// with its randomization off: its own jitter spreads a step both ways (up to
// (1+RandomizationFactor)·MaxInterval, past the cap) from the global random
// source; the machine shortens each step itself, with the rand it was given.
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

// schedule is b's sequence of steps: an ExponentialBackOff that never stops
// (MaxElapsedTime 0) and reads the time from clock. With MaxElapsedTime 0 the
// time it reads (in NextBackOff and Reset) decides nothing; the clock is
// there so that it never reads the wall clock: the machine's is the time of
// the outcome it applies.
func (b Backoff) schedule(clock backoff.Clock) *backoff.ExponentialBackOff {
	s := &backoff.ExponentialBackOff{
		InitialInterval: b.Initial, Multiplier: b.Factor, MaxInterval: b.Max,
		RandomizationFactor: 0, MaxElapsedTime: 0, Stop: backoff.Stop, Clock: clock,
	}
	s.Reset()
	return s
}

// jittered is step d capped at Max (the schedule's first step is Initial,
// uncapped) and shortened by r·Jitter of itself.
func (b Backoff) jittered(d time.Duration, r float64) time.Duration {
	f := float64(min(d, b.Max))
	return time.Duration(f - r*b.Jitter*f)
}

// Delay is the wait after n troubles in a row; r in [0, 1) picks the jitter.
func (b Backoff) Delay(n int, r float64) time.Duration {
	s := b.schedule(clockAt{new(time.Time)})
	d := s.NextBackOff()
	for i := 0; i < n && d < b.Max; i++ {
		d = s.NextBackOff()
	}
	return b.jittered(d, r)
}

// clockAt is a backoff.Clock that reads *t.
type clockAt struct{ t *time.Time }

func (c clockAt) Now() time.Time { return *c.t }

// Machine decides, from each Outcome, the next Action. It holds the loop's
// whole state and does no I/O and reads no clock: the loop performs actions
// and reports what came of them, with the time.
type Machine struct {
	// State is where the loop is.
	State State
	// RV is the last resourceVersion the store is synced to: from the last
	// list, then from every event and bookmark. A re-WATCH starts here.
	RV string

	backoff Backoff
	rand    func() float64
	// schedule gives the backoff's steps: NextBackOff on trouble, Reset
	// after a trouble-free ResetAfter. step is the last it gave (capped at
	// Max), 0 since the last reset. now is the time of the outcome being
	// applied, the schedule's clock.
	schedule *backoff.ExponentialBackOff
	step     time.Duration
	now      time.Time
	// watchList: lists are WatchLists (off for good once the server refuses).
	watchList bool
	// doing is the action in flight; after is the one a Wait leads to.
	doing, after Action
	// calmSince is when the current trouble-free stretch began.
	calmSince time.Time
	// relisted: a 410 sent us to relist and no stream has been healthy since.
	relisted bool
	// erroredOn: a stream ended in an ERROR after it carried us on, and the
	// loop re-watched from there; no list and no healthy stream since.
	erroredOn bool
	// listRetried: the list in flight is already the immediate retry of a
	// list that failed with an expired resourceVersion or continue token.
	listRetried bool
	// fallback: lists use LIST because a WatchList failed on the way, until
	// a stream runs healthy (a server that cut or failed one WatchList
	// mostly does the same to the next, under the same trouble).
	fallback bool
	// forStart: the list in flight is the relist of a server that said it
	// had just started; fresh: that list is in the store and no stream has
	// opened since.
	forStart, fresh bool
	// quietSince: when the streams since the last frame, list or probe,
	// which delivered nothing, began (zero: none; Action.Quiet).
	quietSince time.Time
	// SilenceLimit, if set, is the watchdog's: a Watch due after that much
	// silence (Action.Quiet) is a Probe instead, as the watchdog would
	// have abandoned that WATCH as soon as it opened.
	SilenceLimit time.Duration
	// fromList: the WATCH in flight is the first from a list (its
	// resourceVersion a consistent read of the server).
	fromList bool
}

// NewMachine returns a machine in the Listing state. rand returns numbers in
// [0, 1) for the jitter.
func NewMachine(b Backoff, watchList bool, rand func() float64) *Machine {
	m := &Machine{State: Listing, backoff: b, rand: rand, watchList: watchList}
	m.schedule = b.schedule(clockAt{&m.now})
	return m
}

// Start is the first action: the first list.
func (m *Machine) Start(now time.Time) Action {
	m.now, m.calmSince = now, now
	m.schedule.Reset()
	return m.do(m.list("start: list everything"))
}

// Healthy reports whether a stream ran well enough to count as trouble-free:
// it stayed open for the backoff's ResetAfter, or ended on its own at its
// timeout (the server closes every WATCH after timeoutSeconds). What it
// delivered before ending does not matter: a stream that breaks after one
// frame is a flapping stream, not a healthy one.
func (m *Machine) Healthy(o Outcome) bool {
	if o.Open >= m.backoff.ResetAfter {
		return true
	}
	return o.Err == nil && !o.ErrorEvent && !o.Silent && o.Timeout > 0 && o.Open >= o.Timeout-o.Timeout/10
}

// Step applies the outcome of the action in flight and returns the next one.
func (m *Machine) Step(o Outcome) Action {
	m.now = o.At
	class, retryAfter := Classify(o.Err)
	if class == Canceled {
		m.State = Stopped
		return m.do(Action{Kind: Stop, Reason: "stopped"})
	}
	switch m.doing.Kind {
	case Wait:
		m.calmSince = o.At
		m.State = m.stateFor(m.after)
		return m.do(m.after)
	case List:
		return m.stepList(o, class, retryAfter)
	case Probe:
		return m.stepProbe(o, class, retryAfter)
	case WatchList:
		if o.Listed {
			return m.listed(o, KeepReading)
		}
		return m.stepWatchListFailed(o, class, retryAfter)
	default: // Watch, KeepReading
		return m.stepWatch(o, class, retryAfter)
	}
}

func (m *Machine) stepList(o Outcome, class ErrorClass, retryAfter time.Duration) Action {
	switch {
	case class == NoError:
		return m.listed(o, Watch)
	case class == Expired || class == TooLargeRV:
		// A continue token expired (etcd compacted the snapshot the pages are
		// read from) or the server is behind: list again at once from the
		// latest data; a second failure in a row backs off.
		if !m.listRetried {
			m.listRetried = true
			return m.do(Action{Kind: List, Class: class, Err: o.Err,
				Reason: fmt.Sprintf("list failed (%v): list again from the latest", o.Err)})
		}
	}
	// Anything else (refused, cut, 5xx, 429) retries after the backoff, from
	// the page that failed: its continue token still serves the same
	// snapshot, until etcd compacts it (then the token is Expired, above,
	// and the list starts again from the first page). A list longer than
	// the gaps between a server's outages completes all the same.
	resume := Action{Kind: List, Continue: o.Continue}
	if class == Expired || class == TooLargeRV {
		resume.Continue = "" // that token is no good: from the first page
	}
	return m.trouble(o.At, retryAfter, resume, class, o.Err, fmt.Sprintf("list failed (%s): %v", class, o.Err))
}

// stepProbe: the server's current resourceVersion, after a silent stream or
// a WATCH that could not open.
func (m *Machine) stepProbe(o Outcome, class ErrorClass, retryAfter time.Duration) Action {
	if class != NoError {
		return m.trouble(o.At, retryAfter, m.afterUnopened(o.Err), class, o.Err, fmt.Sprintf("probe failed (%s): %v", class, o.Err))
	}
	resume := Action{Kind: Watch, RV: m.RV}
	if c, err := resourceversion.CompareResourceVersion(o.RV, m.RV); err == nil && c < 0 {
		a := m.relist()
		a.Reason = fmt.Sprintf("the server is at resourceVersion %s, behind our %s: its history went back (an etcd restore?); relist", o.RV, m.RV)
		return m.do(a)
	}
	resume.Reason = fmt.Sprintf("the server is at resourceVersion %s: re-watch from %s", o.RV, m.RV)
	return m.do(resume)
}

// listed: a list (or a WatchList's initial state) is in the store at o.RV.
func (m *Machine) listed(o Outcome, next ActionKind) Action {
	a := Action{Kind: next, RV: o.RV, Reason: "listed at resourceVersion " + o.RV}
	m.erroredOn = false
	if m.RV != "" {
		if c, err := resourceversion.CompareResourceVersion(o.RV, m.RV); err == nil && c < 0 {
			a.TimeTravel = true
			a.Reason = fmt.Sprintf("listed at resourceVersion %s, older than the %s we had: the server's history went back (an etcd restore?); the store now holds the server's state", o.RV, m.RV)
		}
	}
	m.RV, m.listRetried, m.fresh, m.forStart = o.RV, false, m.forStart, false
	m.fromList = next == Watch
	m.State = Watching
	return m.do(a)
}

// stepWatchListFailed: a WatchList ended before its initial state was in.
func (m *Machine) stepWatchListFailed(o Outcome, class ErrorClass, retryAfter time.Duration) Action {
	switch class {
	case Refused:
		// An apiserver without the WatchList feature rejects the request's
		// parameters (400 or 422): use the paginated LIST from now on.
		m.watchList = false
		return m.do(Action{Kind: List, Class: class, Err: o.Err,
			Reason: fmt.Sprintf("server refused WatchList (%v): falling back to paginated LIST", o.Err)})
	case Throttled, Denied:
		return m.trouble(o.At, retryAfter, m.doing, class, o.Err, fmt.Sprintf("watch-list failed (%s): %v", class, o.Err))
	}
	// Anything else (an ERROR event or a cut during the initial events: an
	// apiserver whose etcd cannot report progress does that every time):
	// list with LIST, at once, this time, and in every relist until a stream
	// runs healthy: then the next relist tries WatchList again. (client-go's
	// reflector asks for a WatchList at every relist, one request more each
	// time the trouble lasts.)
	m.fallback = true
	return m.do(Action{Kind: List, Class: class, Err: o.Err,
		Reason: fmt.Sprintf("watch-list failed before its initial events ended (%v): LIST instead", o.Err)})
}

func (m *Machine) stepWatch(o Outcome, class ErrorClass, retryAfter time.Duration) Action {
	from, fromList := m.RV, m.fromList
	m.fromList = false
	began := o.At.Add(-o.Open)
	if !m.quietSince.IsZero() {
		began = m.quietSince
	}
	silence := o.At.Sub(began) // with the streams and waits before, if it delivered nothing
	m.quietSince = time.Time{}
	if o.Opened && o.Frames == 0 && !o.Silent {
		m.quietSince = began
	}
	if o.RV != "" {
		m.RV = o.RV
	}
	if o.Opened {
		m.fresh = false
	}
	healthy := m.Healthy(o)
	if healthy {
		m.relisted, m.erroredOn, m.fallback = false, false, false
	}
	// An ERROR event (typically a 500) before the stream carried us past
	// the resourceVersion it started from is the server's word that it
	// cannot serve this watch from there: after etcd compacted exactly up
	// to the next change, the apiserver says "etcd event received with
	// PrevKv=nil" on every re-watch from there. A WATCH from a
	// resourceVersion the server has not reached (after an etcd restore
	// sent it back in time) fails with "Too large resource version" on
	// every try. Either way re-watching would fail forever: relist, as for
	// a 410. An ERROR after the stream moved our resourceVersion on says
	// nothing of where the next WATCH starts: it is a broken stream, and the
	// loop re-watches from there after the backoff (if the server cannot go
	// on from there either, that WATCH's ERROR comes first and relists).
	// Once: the next such stream before a list or a healthy stream (cuts
	// and refusals between do not count) relists. A server
	// that sends an ERROR after every event would otherwise keep the store
	// one event a backoff wait behind, falling further behind for as long as
	// the fault lasts; a relist every other stream keeps it within two waits
	// (TestAdversaryErrorAfterEachEventKeepsUp).
	errored := o.ErrorEvent && class == Transient
	stuck := errored && (m.RV == from || m.erroredOn)
	switch {
	case stuck: // relists
		m.erroredOn = false
	case errored && !healthy:
		m.erroredOn = true
	}
	switch {
	case class == TooLargeRV && fromList && !o.Opened:
		// "Too large resource version" for a WATCH from the list just made:
		// the list was a consistent read, so the server's history has
		// reached that resourceVersion, and the apiserver answering the
		// WATCH lags the one that listed (an HA control plane whose watch
		// caches are not in step). Another list would only move our
		// resourceVersion further ahead of it: wait, and re-watch from
		// there. Once: if that WATCH is refused too, the relist follows (an
		// etcd restore between the list and the WATCH is found by it, one
		// wait later).
		return m.trouble(o.At, retryAfter, Action{Kind: Watch, RV: m.RV}, class, o.Err,
			fmt.Sprintf("watch from resourceVersion %s, just listed, refused (%v): the server answering it lags; re-watch", m.RV, o.Err))
	case class == Expired, class == TooLargeRV, stuck:
		reason := fmt.Sprintf("watch from resourceVersion %s ended (%v): relist", m.RV, o.Err)
		// The first relist does not wait out the backoff, whatever it grew
		// to while the server was away: it is what recovers us. Another
		// before any healthy stream backs off.
		if m.relisted {
			return m.trouble(o.At, 0, m.relist(), class, o.Err, reason)
		}
		m.relisted = true
		m.disturbed(o.At)
		a := m.relist()
		// Right after trouble, though, the server was most likely away for
		// every client, and every client comes back to a 410 within the
		// same backoff step: a fleet that relisted at once would make the
		// restarted apiserver serve all its lists together. So the first
		// relist after trouble starts after a random part of the last
		// backoff step (full jitter): the fleet's relists spread over that
		// step, as client-go's Reflector spreads them over [d, 2d] by
		// waiting its whole jittered backoff. A 410 with no trouble in the
		// last ResetAfter (a compaction under a healthy stream) relists at
		// once. The stagger is not trouble: the backoff does not grow.
		if m.step > 0 {
			if d := time.Duration(m.rand() * float64(m.step)); d > 0 {
				a.Reason = fmt.Sprintf("relist, %s after the 410 (staggered, so that clients back from the same outage do not all relist at once)", d.Round(time.Millisecond))
				m.after = a
				return m.do(Action{Kind: Wait, Delay: d, Class: class, Err: o.Err,
					Reason: fmt.Sprintf("%s, after a random part of the last backoff step (%s)", reason, d.Round(time.Millisecond))})
			}
		}
		a.Class, a.Err, a.Reason = class, o.Err, reason
		return m.do(a)
	case o.Silent:
		// The watchdog abandoned a stream that sent nothing, not even a
		// bookmark, for longer than the server's bookmark cadence allows.
		// Either the connection died, or the server is behind our
		// resourceVersion (restored from an older etcd snapshot: its watch
		// cache accepts a WATCH from the "future" and sends nothing, not even
		// bookmarks, until it gets there). Ask it where it is, at once: it
		// cost one request per silence limit.
		reason := fmt.Sprintf("watch silent for %s: abandoned; is the server behind resourceVersion %s?", silence.Round(time.Second), m.RV)
		if o.Frames > 0 { // silent for the limit after its last frame
			reason = fmt.Sprintf("watch silent since its last frame (of %d): abandoned; is the server behind resourceVersion %s?", o.Frames, m.RV)
		}
		return m.do(Action{Kind: Probe, Class: class, Err: o.Err, Reason: reason})
	case healthy && class == NoError:
		return m.do(Action{Kind: Watch, RV: m.RV,
			Reason: fmt.Sprintf("watch ended after %d frames: re-watch from resourceVersion %s", o.Frames, m.RV)})
	}
	reason := fmt.Sprintf("watch failed (%s) after %d frames in %s: %v", class, o.Frames, o.Open.Round(time.Millisecond), o.Err)
	if o.Err == nil {
		reason = fmt.Sprintf("watch closed after %d frames in %s, before its timeout", o.Frames, o.Open.Round(time.Millisecond))
	}
	resume := Action{Kind: Watch, RV: m.RV}
	if !o.Opened {
		resume = m.afterUnopened(o.Err)
	}
	return m.trouble(o.At, retryAfter, resume, class, o.Err, reason)
}

// afterUnopened is what follows the backoff after a WATCH that could not
// even open (the server unreachable, restarting, failing), or a probe that
// failed. When we get through again, the server may be another one,
// restored from an older etcd snapshot: the first request is a probe of
// its resourceVersion, which costs no more than the WATCH it precedes. But
// a server that said it has just started (serverStarting: its watch cache
// begins after our resourceVersion once anything was written) would answer
// the WATCH after the probe with 410, and the relist after that tells its
// resourceVersion as well as the probe: relist at once, two requests
// fewer. It counts as the relist after the 410 (another before a healthy
// stream backs off). A WATCH from that relist (no stream opened since)
// answered in the same words tries again after the wait rather than
// relisting once more: a watch cache that was already initializing began
// its history before that list. (One created after it, when the relist
// followed a 503 of a server still installing its paths, may begin after
// it: then that WATCH meets 410, and the relist after it backs off. A
// cache that is not ready yet hands a LIST with a limit to etcd, so the
// relist is read at etcd's revision, and a cache whose own first list comes
// one write later answers "too old resource version: X (X+1)". client-go's
// relist asks for no limit, which that cache refuses with 429 until it is
// ready; listing so would trade this race (two requests, when a write falls
// between the two reads) for a refusal whenever the relist comes before the
// cache is ready (one request), and give up the page-by-page resume:
// docs/scorecard.md, apiserver-restart.)
func (m *Machine) afterUnopened(err error) Action {
	switch {
	case serverStarting(err) && m.fresh:
		return Action{Kind: Watch, RV: m.RV}
	case serverStarting(err):
		m.relisted, m.forStart = true, true
		return m.list("relist")
	}
	return Action{Kind: Probe}
}

// Resharded: the watcher's shard changed, and the action in flight, if any,
// was cut short (its outcome does not matter). The store holds what it had
// of the new shard; the rest must be listed: a list, at once. It is not
// trouble (the backoff is untouched), and the loop reshards only between
// actions other than a Wait, so a backoff under way is waited out first.
func (m *Machine) Resharded() Action {
	m.listRetried, m.fallback, m.erroredOn = false, false, false
	a := m.list("the shard changed: list it")
	m.State = m.stateFor(a)
	return m.do(a)
}

// relist is the action that starts a relist.
func (m *Machine) relist() Action {
	m.State = Relisting
	return m.list("relist")
}

func (m *Machine) list(reason string) Action {
	if m.watchList && !m.fallback {
		return Action{Kind: WatchList, Reason: reason}
	}
	return Action{Kind: List, Reason: reason}
}

// disturbed marks the end of a trouble-free stretch at now; a stretch of
// ResetAfter or more resets the backoff.
func (m *Machine) disturbed(now time.Time) {
	if now.Sub(m.calmSince) >= m.backoff.ResetAfter {
		m.schedule.Reset()
		m.step = 0
	}
	m.calmSince = now
}

// trouble: wait out the backoff (at least minDelay, the server's
// Retry-After), then do next.
func (m *Machine) trouble(now time.Time, minDelay time.Duration, next Action, class ErrorClass, err error, reason string) Action {
	m.disturbed(now)
	m.step = min(m.schedule.NextBackOff(), m.backoff.Max)
	d := max(m.backoff.jittered(m.step, m.rand()), minDelay)
	next.Class, next.Err, next.Reason = 0, nil, "waited "+d.Round(time.Millisecond).String()
	m.after = next
	m.State = BackingOff
	return m.do(Action{Kind: Wait, Delay: d, Class: class, Err: err, Reason: reason})
}

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
