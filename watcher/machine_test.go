package watcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	gr         = schema.GroupResource{Group: "example.com", Resource: "myresources"}
	errExpired = apierrors.NewResourceExpired("too old resource version: 2 (216)")
	errGone    = apierrors.NewGone("gone")
	errRefused = fmt.Errorf("dial tcp 127.0.0.1:6443: %w", syscall.ECONNREFUSED)
	err429     = apierrors.NewTooManyRequests("slow down", 7)
	err403     = apierrors.NewForbidden(gr, "", errors.New("RBAC says no"))
	err500     = apierrors.NewInternalError(errors.New("boom"))
	errTooLrg  = &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: 504, Reason: metav1.StatusReasonTimeout,
		Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge}}},
	}}
)

func TestClassifySortsErrorsByTheLoopsNextStep(t *testing.T) {
	cases := []struct {
		err   error
		class ErrorClass
		after time.Duration
	}{
		{nil, NoError, 0},
		{context.Canceled, Canceled, 0},
		{fmt.Errorf("wrapped: %w", context.Canceled), Canceled, 0},
		{errExpired, Expired, 0},
		{errGone, Expired, 0},
		{apierrors.FromObject(&metav1.Status{Status: "Failure", Code: 410, Reason: "SomethingNew"}), Expired, 0},
		{errors.New(`watch ERROR: too old resource version: 5 (9)`), Transient, 0}, // words alone: errors_test.go
		{errTooLrg, TooLargeRV, 0},
		{err429, Throttled, 7 * time.Second},
		{err403, Denied, 0},
		{apierrors.NewUnauthorized("who are you"), Denied, 0},
		{errRefused, Transient, 0},
		{io.ErrUnexpectedEOF, Transient, 0},
		{err500, Transient, 0},
		{apierrors.NewBadRequest("resourceVersionMatch is forbidden for watch"), Refused, 0},
		{apierrors.NewInvalid(schema.GroupKind{Kind: "ListOptions"}, "", nil), Refused, 0},
	}
	for _, c := range cases {
		class, after := Classify(c.err)
		if class != c.class || after != c.after {
			t.Errorf("Classify(%v) = %s, %v; want %s, %v", c.err, class, after, c.class, c.after)
		}
	}
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// script drives a machine (no jitter: r = 0 gives the full delay) through
// outcomes, checking each action.
type script struct {
	t   *testing.T
	m   *Machine
	now time.Time
}

func newScript(t *testing.T, watchList bool) (*script, Action) {
	m := NewMachine(DefaultBackoff, watchList, func() float64 { return 0 })
	return &script{t: t, m: m, now: t0}, m.Start(t0)
}

// step lets d pass, feeds o (its At set), and checks the action's Kind, RV
// (if want.RV != "") and Delay, and the state.
func (s *script) step(d time.Duration, o Outcome, want Action, state State) Action {
	s.t.Helper()
	s.now = s.now.Add(d)
	o.At = s.now
	got := s.m.Step(o)
	if got.Kind != want.Kind || (want.RV != "" && got.RV != want.RV) || got.Continue != want.Continue || got.Delay != want.Delay || s.m.State != state {
		s.t.Fatalf("after %+v: got %s rv %q continue %q delay %v state %s (%s); want %s rv %q continue %q delay %v state %s",
			o, got.Kind, got.RV, got.Continue, got.Delay, s.m.State, got.Reason, want.Kind, want.RV, want.Continue, want.Delay, state)
	}
	return got
}

// brokenAfterProgress: listed at resourceVersion 10, a stream carries the
// loop to 12 and ends in a 500 ERROR; it waits and re-watches from 12.
func (s *script) brokenAfterProgress() {
	s.step(0, listed10, Action{Kind: Watch, RV: "10"}, Watching)
	a := s.step(time.Second, Outcome{RV: "12", Opened: true, Frames: 1, Err: err500, ErrorEvent: true, Open: time.Second, Timeout: fiveMin},
		Action{Kind: Wait, Delay: 1600 * time.Millisecond}, BackingOff)
	s.wait(a, Action{Kind: Watch, RV: "12"}, Watching)
}

// wait carries out a Wait action.
func (s *script) wait(a Action, then Action, state State) {
	s.t.Helper()
	if a.Kind != Wait {
		s.t.Fatalf("want a wait, got %s", a.Kind)
	}
	s.step(a.Delay, Outcome{}, then, state)
}

var (
	cut      = io.ErrUnexpectedEOF
	fiveMin  = 5 * time.Minute
	listed10 = Outcome{RV: "10"}
)

func TestMachineListsThenRewatchesAStreamThatRanItsCourse(t *testing.T) {
	s, a := newScript(t, false)
	if a.Kind != List || s.m.State != Listing {
		t.Fatalf("start: %s in %s, want list in Listing", a.Kind, s.m.State)
	}
	s.step(time.Second, listed10, Action{Kind: Watch, RV: "10"}, Watching)
	// The server ends the stream at its timeout: re-watch at once.
	s.step(fiveMin, Outcome{RV: "20", Frames: 7, Open: fiveMin, Timeout: fiveMin}, Action{Kind: Watch, RV: "20"}, Watching)
	// A stream that stayed open the whole reset window counts as healthy,
	// even one that broke: the backoff starts from the beginning.
	s.step(3*time.Minute, Outcome{RV: "30", Err: cut, Open: 3 * time.Minute, Timeout: fiveMin}, Action{Kind: Wait, Delay: 1600 * time.Millisecond}, BackingOff)
}

// A stream that delivers a frame and breaks is not healthy, however many
// frames it had: the steps grow 1.6, 3.2, 6.4 ... to the 30 s cap.
func TestMachineFlappingStreamsBackOff(t *testing.T) {
	s, _ := newScript(t, false)
	s.step(0, listed10, Action{Kind: Watch, RV: "10"}, Watching)
	want := []time.Duration{1600 * time.Millisecond, 3200 * time.Millisecond, 6400 * time.Millisecond,
		12800 * time.Millisecond, 25600 * time.Millisecond, 30 * time.Second, 30 * time.Second, 30 * time.Second}
	for i, d := range want {
		a := s.step(10*time.Millisecond, Outcome{RV: fmt.Sprint(11 + i), Opened: true, Frames: 1, Err: cut, Open: 10 * time.Millisecond, Timeout: fiveMin},
			Action{Kind: Wait, Delay: d}, BackingOff)
		s.wait(a, Action{Kind: Watch, RV: fmt.Sprint(11 + i)}, Watching)
	}
	// A stream that closes cleanly long before its timeout is no better.
	s.step(time.Second, Outcome{Opened: true, Frames: 3, Open: time.Second, Timeout: fiveMin}, Action{Kind: Wait, Delay: 30 * time.Second}, BackingOff)
}

// The backoff starts again only after a trouble-free stretch of ResetAfter.
func TestMachineBackoffResetsAfterATroubleFreeStretch(t *testing.T) {
	s, _ := newScript(t, false)
	s.step(0, listed10, Action{Kind: Watch}, Watching)
	for _, d := range documentedSteps[:5] {
		a := s.step(0, Outcome{Opened: true, Err: cut, Timeout: fiveMin}, Action{Kind: Wait, Delay: d}, BackingOff)
		s.wait(a, Action{Kind: Watch}, Watching)
	}
	// Open 2 minutes, then cut: healthy; the wait is the first again.
	s.step(2*time.Minute, Outcome{Opened: true, Err: cut, Open: 2 * time.Minute, Timeout: fiveMin}, Action{Kind: Wait, Delay: 1600 * time.Millisecond}, BackingOff)
}

// A 410 relists at once the first time; another before any healthy stream
// backs off; a healthy stream makes the next 410 immediate again.
func TestMachineRelistsA410AtOnceOnlyOnceBeforeAHealthyStream(t *testing.T) {
	s, _ := newScript(t, false)
	s.step(0, listed10, Action{Kind: Watch}, Watching)
	s.step(time.Second, Outcome{Err: errExpired, ErrorEvent: true, Open: time.Second, Timeout: fiveMin}, Action{Kind: List}, Relisting)
	s.step(0, Outcome{RV: "50"}, Action{Kind: Watch, RV: "50"}, Watching)
	a := s.step(0, Outcome{Err: errGone, Timeout: fiveMin}, Action{Kind: Wait, Delay: 1600 * time.Millisecond}, BackingOff)
	s.wait(a, Action{Kind: List}, Relisting)
	s.step(0, Outcome{RV: "60"}, Action{Kind: Watch, RV: "60"}, Watching)
	s.step(fiveMin, Outcome{Open: fiveMin, Timeout: fiveMin}, Action{Kind: Watch, RV: "60"}, Watching)
	s.step(0, Outcome{Err: errExpired, ErrorEvent: true, Timeout: fiveMin}, Action{Kind: List}, Relisting)
}

// The first relist right after trouble (the server was away, and so it was
// for every client) starts after a random part of the last backoff step, so
// that a fleet back from one outage does not relist at once; it is not
// trouble (the next backoff is the one it would have been). A 410 with no
// trouble in the last two minutes relists at once.
func TestMachineRelistAfterTroubleIsStaggered(t *testing.T) {
	s := &script{t: t, m: NewMachine(DefaultBackoff, false, func() float64 { return 0.5 }), now: t0}
	s.m.Start(t0)
	s.step(0, listed10, Action{Kind: Watch}, Watching)
	// The server goes away: the stream is cut, the next WATCH refused.
	a := s.step(time.Second, Outcome{Opened: true, Err: cut, Open: time.Second, Timeout: fiveMin}, Action{Kind: Wait, Delay: 1200 * time.Millisecond}, BackingOff)
	s.wait(a, Action{Kind: Watch, RV: "10"}, Watching)
	a = s.step(0, Outcome{Err: errRefused}, Action{Kind: Wait, Delay: 2400 * time.Millisecond}, BackingOff)
	s.wait(a, Action{Kind: Probe}, Watching)
	s.step(0, Outcome{RV: "12"}, Action{Kind: Watch, RV: "10"}, Watching)
	// Back, restarted: 410. Half (rand 0.5) of the last step (3.2 s), 1.6 s.
	a = s.step(0, Outcome{Err: errGone, Timeout: fiveMin}, Action{Kind: Wait, Delay: 1600 * time.Millisecond}, Relisting)
	s.wait(a, Action{Kind: List}, Relisting)
	s.step(time.Second, Outcome{RV: "50"}, Action{Kind: Watch, RV: "50"}, Watching)
	// Another 410 before a healthy stream is trouble: the third step.
	a = s.step(0, Outcome{Err: errGone, Timeout: fiveMin}, Action{Kind: Wait, Delay: 4800 * time.Millisecond}, BackingOff)
	s.wait(a, Action{Kind: List}, Relisting)
	// Much later, after a stream that ran its course: a 410 relists at once.
	s.step(time.Second, Outcome{RV: "60"}, Action{Kind: Watch, RV: "60"}, Watching)
	s.step(fiveMin, Outcome{Open: fiveMin, Timeout: fiveMin}, Action{Kind: Watch, RV: "60"}, Watching)
	s.step(time.Second, Outcome{Err: errGone, Open: time.Second, Timeout: fiveMin}, Action{Kind: List}, Relisting)
}

// An ERROR event that is not a 410 (a 500: "etcd event received with
// PrevKv=nil") relists too; so does a "too large resource version" on a
// WATCH, which is what a server restored from an older etcd snapshot says.
func TestMachineRelistsAnErrorBeforeProgressOrATooLargeRV(t *testing.T) {
	s, _ := newScript(t, false)
	s.step(0, listed10, Action{Kind: Watch}, Watching)
	s.step(time.Second, Outcome{Err: err500, ErrorEvent: true, Timeout: fiveMin}, Action{Kind: List}, Relisting)
	s.step(0, Outcome{RV: "50"}, Action{Kind: Watch, RV: "50"}, Watching)
	s.step(fiveMin, Outcome{Open: fiveMin, Timeout: fiveMin}, Action{Kind: Watch, RV: "50"}, Watching)
	s.step(0, Outcome{Err: errTooLrg, Timeout: fiveMin}, Action{Kind: List}, Relisting)
	// The relist finds an older resourceVersion: time travel, reported.
	a := s.step(0, Outcome{RV: "40"}, Action{Kind: Watch, RV: "40"}, Watching)
	if !a.TimeTravel || s.m.RV != "40" {
		t.Errorf("time travel not reported (%v) or RV %q not taken", a.TimeTravel, s.m.RV)
	}
}

// A 500 or a refusal on a WATCH is retried from the same resourceVersion
// after the backoff, without relisting; a 429 waits its Retry-After.
func TestMachineWatchFailuresRewatchWithoutRelist(t *testing.T) {
	s, _ := newScript(t, false)
	s.step(0, listed10, Action{Kind: Watch}, Watching)
	// The WATCH never opened: when the wait is over, a probe asks where the
	// server is first (it may have come back restored from an older backup).
	a := s.step(0, Outcome{Err: errRefused}, Action{Kind: Wait, Delay: 1600 * time.Millisecond}, BackingOff)
	s.wait(a, Action{Kind: Probe}, Watching)
	s.step(0, Outcome{RV: "12"}, Action{Kind: Watch, RV: "10"}, Watching)
	a = s.step(0, Outcome{Err: err500}, Action{Kind: Wait, Delay: 3200 * time.Millisecond}, BackingOff)
	s.wait(a, Action{Kind: Probe}, Watching)
	s.step(0, Outcome{RV: "12"}, Action{Kind: Watch, RV: "10"}, Watching)
	a = s.step(0, Outcome{Err: err429}, Action{Kind: Wait, Delay: 7 * time.Second}, BackingOff)
	s.wait(a, Action{Kind: Probe}, Watching)
	s.step(0, Outcome{RV: "12"}, Action{Kind: Watch, RV: "10"}, Watching)
	// A stream that opened and then broke resumes with the WATCH itself.
	a = s.step(time.Second, Outcome{Opened: true, Err: cut, Open: time.Second, Timeout: fiveMin}, Action{Kind: Wait, Delay: 12800 * time.Millisecond}, BackingOff)
	s.wait(a, Action{Kind: Watch, RV: "10"}, Watching)
}

// A list whose continue token expired restarts at once, during the first
// list and during a relist alike; a second failure in a row backs off.
func TestMachineExpiredListRestartsOnceAtOnce(t *testing.T) {
	s, _ := newScript(t, false)
	s.step(0, Outcome{Err: errExpired}, Action{Kind: List}, Listing)
	a := s.step(0, Outcome{Err: errExpired}, Action{Kind: Wait, Delay: 1600 * time.Millisecond}, BackingOff)
	s.wait(a, Action{Kind: List}, Listing)
	s.step(0, listed10, Action{Kind: Watch}, Watching)
	s.step(fiveMin, Outcome{Err: errGone, Open: fiveMin, Timeout: fiveMin}, Action{Kind: List}, Relisting)
	s.step(0, Outcome{Err: errExpired}, Action{Kind: List}, Relisting)
	s.step(0, Outcome{RV: "90"}, Action{Kind: Watch, RV: "90"}, Watching)
}

// A list that fails after its first page resumes from the page that failed,
// after the backoff; an expired token starts again from the first page.
func TestMachineListResumesFromTheFailedPage(t *testing.T) {
	s, _ := newScript(t, false)
	a := s.step(0, Outcome{Err: err500, Continue: "page-3"}, Action{Kind: Wait, Delay: 1600 * time.Millisecond}, BackingOff)
	s.wait(a, Action{Kind: List, Continue: "page-3"}, Listing)
	a = s.step(0, Outcome{Err: cut, Continue: "page-4"}, Action{Kind: Wait, Delay: 3200 * time.Millisecond}, BackingOff)
	s.wait(a, Action{Kind: List, Continue: "page-4"}, Listing)
	s.step(0, Outcome{Err: errExpired, Continue: "page-4"}, Action{Kind: List}, Listing)
	a = s.step(0, Outcome{Err: errExpired, Continue: "page-2"}, Action{Kind: Wait, Delay: 6400 * time.Millisecond}, BackingOff)
	s.wait(a, Action{Kind: List}, Listing)
	s.step(0, listed10, Action{Kind: Watch, RV: "10"}, Watching)
}

// A server without WatchList (400/422) gets LIST from then on; a WatchList
// that fails on the way (an ERROR 500 during its initial events, a cut)
// falls back to LIST, until a stream runs healthy.
func TestMachineWatchListFallsBackToList(t *testing.T) {
	s, a := newScript(t, true)
	if a.Kind != WatchList {
		t.Fatalf("start: %s, want watch-list", a.Kind)
	}
	s.step(0, Outcome{Err: err500, ErrorEvent: true}, Action{Kind: List}, Listing)
	s.step(0, listed10, Action{Kind: Watch}, Watching)
	s.step(fiveMin, Outcome{Err: errGone, Open: fiveMin, Timeout: fiveMin}, Action{Kind: WatchList}, Relisting)
	s.step(0, Outcome{RV: "20", Listed: true}, Action{Kind: KeepReading}, Watching)
	s.step(fiveMin, Outcome{Open: fiveMin, Timeout: fiveMin, RV: "30"}, Action{Kind: Watch, RV: "30"}, Watching)
	s.step(0, Outcome{Err: errGone}, Action{Kind: WatchList}, Relisting)
	s.step(0, Outcome{Err: apierrors.NewBadRequest("no WatchList here")}, Action{Kind: List}, Relisting)
	s.step(0, Outcome{RV: "40"}, Action{Kind: Watch}, Watching)
	s.step(fiveMin, Outcome{Err: errGone, Open: fiveMin, Timeout: fiveMin}, Action{Kind: List}, Relisting)
}

// The watchdog's abandoned stream costs a probe of the server's
// resourceVersion, at once: one request per silence limit, no storm. A
// server at or past ours gets a re-watch; one behind ours (restored from an
// older etcd snapshot, sending nothing to a WATCH from our "future") a relist.
func TestMachineSilentStreamProbesTheServer(t *testing.T) {
	s, _ := newScript(t, false)
	s.step(0, listed10, Action{Kind: Watch}, Watching)
	silent := Outcome{Err: ErrSilent, Silent: true, Open: 150 * time.Second, Timeout: fiveMin}
	s.step(150*time.Second, silent, Action{Kind: Probe}, Watching)
	s.step(0, Outcome{RV: "12"}, Action{Kind: Watch, RV: "10"}, Watching)
	s.step(150*time.Second, silent, Action{Kind: Probe}, Watching)
	a := s.step(0, Outcome{Err: errRefused}, Action{Kind: Wait, Delay: 1600 * time.Millisecond}, BackingOff)
	s.wait(a, Action{Kind: Probe}, Watching)
	s.step(0, Outcome{RV: "10"}, Action{Kind: Watch, RV: "10"}, Watching)
	s.step(150*time.Second, silent, Action{Kind: Probe}, Watching)
	s.step(0, Outcome{RV: "7"}, Action{Kind: List}, Relisting)
	if a := s.step(0, Outcome{RV: "7"}, Action{Kind: Watch, RV: "7"}, Watching); !a.TimeTravel {
		t.Error("the relist at an older resourceVersion is not reported as time travel")
	}
}

// The watchdog's silence adds up across streams from the same
// resourceVersion that deliver nothing, however each one ended (at its
// timeout, or cut by a proxy that drops idle connections): every Watch says
// how long the streams before it were silent, and the watcher's watchdog
// gives the next one only the rest of its limit. A frame, a list or a
// probe starts the count again; the waits between streams count too. With
// a WATCH timeout under the limit, a server behind our resourceVersion ends
// every stream at its timeout with nothing: only the sum finds it.
func TestMachineSilenceAddsUpAcrossStreams(t *testing.T) {
	s, _ := newScript(t, false)
	quiet := func(a Action, want time.Duration) {
		t.Helper()
		if a.Quiet != want {
			t.Fatalf("%s from %s: Quiet %v, want %v (%s)", a.Kind, a.RV, a.Quiet, want, a.Reason)
		}
	}
	minute := time.Minute
	ranItsCourse := Outcome{Opened: true, Open: minute, Timeout: minute}
	quiet(s.step(0, listed10, Action{Kind: Watch, RV: "10"}, Watching), 0)
	quiet(s.step(minute, ranItsCourse, Action{Kind: Watch, RV: "10"}, Watching), minute)
	quiet(s.step(minute, ranItsCourse, Action{Kind: Watch, RV: "10"}, Watching), 2*minute)
	// A bookmark: the server is there; the count starts again.
	quiet(s.step(minute, Outcome{Opened: true, RV: "11", Frames: 1, Open: minute, Timeout: minute}, Action{Kind: Watch, RV: "11"}, Watching), 0)
	// Cut after 20 s with nothing: a wait, then a Watch that carries the
	// 20 s and the wait's 1.6 s.
	a := s.step(20*time.Second, Outcome{Opened: true, Err: cut, Open: 20 * time.Second, Timeout: minute}, Action{Kind: Wait, Delay: 1600 * time.Millisecond}, BackingOff)
	quiet(s.step(a.Delay, Outcome{}, Action{Kind: Watch, RV: "11"}, Watching), 21600*time.Millisecond)
	quiet(s.step(minute, ranItsCourse, Action{Kind: Watch, RV: "11"}, Watching), 81600*time.Millisecond)
	// The watchdog fires in the next stream, after the 68.4 s left: a
	// probe, and the Watch after it starts from nothing.
	probe := s.step(68400*time.Millisecond, Outcome{Opened: true, Err: ErrSilent, Silent: true, Open: 68400 * time.Millisecond, Timeout: minute}, Action{Kind: Probe}, Watching)
	if !strings.Contains(probe.Reason, "silent for 2m30s") {
		t.Errorf("the probe's reason %q does not say the silence was 2m30s in all", probe.Reason)
	}
	quiet(s.step(0, Outcome{RV: "11"}, Action{Kind: Watch, RV: "11"}, Watching), 0)
	// A WATCH that could not open is no silence: a wait and a probe.
	quiet(s.step(minute, ranItsCourse, Action{Kind: Watch, RV: "11"}, Watching), minute)
	a = s.step(0, Outcome{Err: errRefused}, Action{Kind: Wait, Delay: 1600 * time.Millisecond}, BackingOff)
	s.wait(a, Action{Kind: Probe}, Watching)
	quiet(s.step(0, Outcome{RV: "11"}, Action{Kind: Watch, RV: "11"}, Watching), 0)
}

func TestMachineStopsWhenItsContextEnds(t *testing.T) {
	s, _ := newScript(t, false)
	s.step(0, Outcome{Err: context.Canceled}, Action{Kind: Stop}, Stopped)
}

// An ERROR event (a 500) after the stream carried the resourceVersion on is
// a broken stream: back off and re-watch from where it got to, no relist.
// One that comes before any progress (the server cannot go on from there:
// "PrevKv=nil") relists, as before.
func TestMachineErrorAfterProgressRewatches(t *testing.T) {
	s, _ := newScript(t, false)
	s.brokenAfterProgress()
	// A bookmark at the same resourceVersion is no progress.
	s.step(time.Second, Outcome{RV: "12", Opened: true, Frames: 1, Err: err500, ErrorEvent: true, Open: time.Second, Timeout: fiveMin},
		Action{Kind: List}, Relisting)
}

// A WATCH, or a probe, that kube-apiserver answers with its word that it
// has just started (its watch cache will begin after our resourceVersion)
// is followed, after the wait, by a relist: not by a probe and then a
// WATCH that would meet 410; but a WATCH from a list made since it started
// is tried again. Any other failure to open still probes first.
func TestMachineStartingServerRelistsWithoutAProbe(t *testing.T) {
	cacheStarting := apierrors.NewTooManyRequests("storage is (re)initializing", 2)
	pathsMissing := apierrors.NewServiceUnavailable("the request has been made before all known HTTP paths have been installed, please try again")
	s, _ := newScript(t, false)
	s.step(0, listed10, Action{Kind: Watch, RV: "10"}, Watching)
	// The apiserver restarts: the stream is cut, the next WATCH hangs until
	// the new process answers that its watch cache is not ready.
	a := s.step(time.Second, Outcome{Opened: true, Err: cut, Open: time.Second, Timeout: fiveMin}, Action{Kind: Wait, Delay: 1600 * time.Millisecond}, BackingOff)
	s.wait(a, Action{Kind: Watch, RV: "10"}, Watching)
	a = s.step(5*time.Second, Outcome{Err: cacheStarting}, Action{Kind: Wait, Delay: 3200 * time.Millisecond}, BackingOff)
	s.wait(a, Action{Kind: List}, Relisting)
	s.step(0, Outcome{RV: "30"}, Action{Kind: Watch, RV: "30"}, Watching)
	// The cache is still starting: it began before that list, so the WATCH
	// from the list's resourceVersion is tried again, not another relist.
	a = s.step(0, Outcome{Err: cacheStarting}, Action{Kind: Wait, Delay: 6400 * time.Millisecond}, BackingOff)
	s.wait(a, Action{Kind: Watch, RV: "30"}, Watching)
	// That was the relist after a 410: another before a healthy stream waits.
	a = s.step(0, Outcome{Err: errGone, Timeout: fiveMin}, Action{Kind: Wait, Delay: 12800 * time.Millisecond}, BackingOff)
	s.wait(a, Action{Kind: List}, Relisting)
	s.step(0, Outcome{RV: "40"}, Action{Kind: Watch, RV: "40"}, Watching)
	// A list made before the server said it started (this one, after the
	// 410) is no reason to retry the WATCH: that server may be another.
	a = s.step(0, Outcome{Err: cacheStarting}, Action{Kind: Wait, Delay: 25600 * time.Millisecond}, BackingOff)
	s.wait(a, Action{Kind: List}, Relisting)
	s.step(0, Outcome{RV: "45"}, Action{Kind: Watch, RV: "45"}, Watching)
	// A probe answered "paths not installed yet" relists too.
	s.step(fiveMin, Outcome{Opened: true, Open: fiveMin, Timeout: fiveMin}, Action{Kind: Watch, RV: "45"}, Watching)
	a = s.step(0, Outcome{Err: errRefused}, Action{Kind: Wait, Delay: 1600 * time.Millisecond}, BackingOff)
	s.wait(a, Action{Kind: Probe}, Watching)
	a = s.step(0, Outcome{Err: pathsMissing}, Action{Kind: Wait, Delay: 3200 * time.Millisecond}, BackingOff)
	s.wait(a, Action{Kind: List}, Relisting)
}

// A LIST answered, then the WATCH that follows it answered 503 "before all
// known HTTP paths have been installed": the server that served the LIST
// had its paths installed, so the one answering has started since, another
// process (an apiserver restarted on an etcd restored from a snapshot, its
// resourceVersion behind ours). The first request after the wait reads the
// server's resourceVersion (a probe, or the relist): a WATCH from ours
// against a restored watch cache is accepted and silent until the watchdog
// gives up on it.
func TestMachineAsksAServerStartedSinceTheListWhereItIs(t *testing.T) {
	s, _ := newScript(t, false)
	s.step(time.Second, Outcome{RV: "100"}, Action{Kind: Watch, RV: "100"}, Watching)
	a := s.m.Step(Outcome{At: s.now.Add(time.Second), Err: pathsMissing})
	if a.Kind != Wait {
		t.Fatalf("after a 503 'paths not installed': %s (%s), want a wait", a.Kind, a.Reason)
	}
	s.now = s.now.Add(time.Second)
	next := s.m.Step(Outcome{At: s.now.Add(a.Delay)})
	if next.Kind == Watch {
		// What follows against the restored server (at resourceVersion 50,
		// with a watch cache): the WATCH from 100 is accepted and silent.
		s.now = s.now.Add(a.Delay)
		limit := DefaultSilenceLimit
		probe := s.m.Step(Outcome{At: s.now.Add(limit), Opened: true, Silent: true, Err: ErrSilent, Open: limit, Timeout: fiveMin})
		t.Fatalf("after the wait: %s from resourceVersion %q (%s), not a request that reads the server's "+
			"resourceVersion; the server restarted after our list (it served it with its paths installed), so an etcd "+
			"restore behind it is found only after the WATCH's silence limit (%s), then %s",
			next.Kind, next.RV, next.Reason, limit, probe.Kind)
	}
}

// The same with a WATCH refused first: the server went away after our list
// (connection refused), so the probe's "paths not installed" is a process
// started after the list, and the list is not one made since it started:
// after the wait, a probe or the relist, not a WATCH from the list.
func TestMachineAsksAServerStartedAfterARefusalWhereItIs(t *testing.T) {
	s, _ := newScript(t, false)
	s.step(time.Second, Outcome{RV: "100"}, Action{Kind: Watch, RV: "100"}, Watching)
	a := s.step(time.Second, Outcome{Err: errRefused}, Action{Kind: Wait, Delay: 1600 * time.Millisecond}, BackingOff)
	s.wait(a, Action{Kind: Probe}, Watching)
	a = s.step(time.Second, Outcome{Err: pathsMissing}, Action{Kind: Wait, Delay: 3200 * time.Millisecond}, BackingOff)
	s.now = s.now.Add(a.Delay)
	if next := s.m.Step(Outcome{At: s.now}); next.Kind != Probe && next.Kind != List {
		t.Fatalf("refused, then a probe answered 'paths not installed' (a server started after our list at 100): "+
			"after the wait %s rv %q (%s); want a probe or the relist, which read the server's resourceVersion", next.Kind, next.RV, next.Reason)
	}
}

// The first ERROR after progress of the streams from a list re-watches; a
// second relists. A reshard that cuts the re-WATCH after such an ERROR
// lists, and the streams from that list start afresh: the first of them
// that ends in an ERROR after an event re-watches, no second list for one
// broken stream.
func TestMachineAReshardsListRenewsTheRewatchAfterAnError(t *testing.T) {
	s, _ := newScript(t, false)
	s.brokenAfterProgress()
	// The loop cuts that WATCH for a new shard: a list of it.
	if r := s.m.Resharded(); r.Kind != List {
		t.Fatalf("Resharded: %s, want List", r.Kind)
	}
	s.step(time.Second, Outcome{RV: "20"}, Action{Kind: Watch, RV: "20"}, Watching)
	// The first stream from that list ends in an ERROR after an event.
	s.now = s.now.Add(time.Second)
	got := s.m.Step(Outcome{At: s.now, RV: "21", Opened: true, Frames: 1, Err: err500, ErrorEvent: true, Open: time.Second, Timeout: fiveMin})
	if got.Kind != Wait {
		t.Fatalf("the first stream since a list (made for a reshard) ended in an ERROR after an event: %s (%s); "+
			"want a wait and a re-watch from 21: the stream before the list set errored and it outlived the list", got.Kind, got.Reason)
	}
}

// A healthy stream that ends in an ERROR after progress re-watches, however
// many in a row: two streams, each open ten minutes and carrying a change a
// second, each ended by an ERROR (a 500 from an apiserver whose etcd
// hiccupped), are not a server that ERRORs after every event (which keeps
// the store a wait behind), and a relist would cost a full LIST for a store
// one event behind at most.
func TestMachineHealthyStreamsEndingInAnErrorRewatch(t *testing.T) {
	s, _ := newScript(t, false)
	s.step(0, listed10, Action{Kind: Watch, RV: "10"}, Watching)
	rv := 10
	for i := range 2 {
		rv += 600
		s.now = s.now.Add(10 * time.Minute)
		o := Outcome{At: s.now, RV: fmt.Sprint(rv), Opened: true, Frames: 600, Err: err500, ErrorEvent: true, Open: 10 * time.Minute, Timeout: 0}
		if !s.m.Healthy(o) {
			t.Fatalf("a stream open 10 minutes is not healthy")
		}
		a := s.m.Step(o)
		if a.Kind != Wait {
			t.Fatalf("stream %d (open 10m, 600 events, then an ERROR): %s (%s), want a wait and a re-watch from %d", i+1, a.Kind, a.Reason, rv)
		}
		s.wait(a, Action{Kind: Watch, RV: fmt.Sprint(rv)}, Watching)
	}
}

// The request bound (watcher/doc.go: at most 40 requests in any minute;
// at the cap two LISTs and four WATCHes a minute: each relist's WATCH
// follows it at once) under a server that
// sends an ERROR after every event, the LISTs succeeding: the shortest
// jitter (r close to 1) and none (r = 0).
func TestMachineHoldsTheRequestBoundUnderAnErrorAfterEveryEvent(t *testing.T) {
	for _, r := range []float64{0, 0.999} {
		var at []time.Time // request times
		var kind []ActionKind
		driveBrokenStreams(t, r, 20*time.Minute, func(int) bool { return true }, func(d ActionKind, now time.Time) {
			at, kind = append(at, now), append(kind, d)
		})
		most, lists, watches := 0, 0, 0
		for i := range at {
			n, l, w := 0, 0, 0
			for j := i; j < len(at) && at[j].Sub(at[i]) < time.Minute; j++ {
				n++
				if kind[j] == List {
					l++
				} else {
					w++
				}
			}
			most = max(most, n)
			if at[i].Sub(t0) > 10*time.Minute { // the backoff is at its cap
				lists, watches = max(lists, l), max(watches, w)
			}
		}
		t.Logf("r=%v: %d requests in 20 minutes, at most %d in a minute; at the cap at most %d LISTs and %d WATCHes in a minute", r, len(at), most, lists, watches)
		if most > 40 || lists > 2 || watches > 4 {
			t.Errorf("r=%v: %d requests in a minute (bound 40); at the cap %d LISTs and %d WATCHes in a minute, "+
				"where watcher/doc.go says two LISTs and four WATCHes for streams that carry an event and then an ERROR", r, most, lists, watches)
		}
	}
}

// A stream cut in between does not renew the re-watch after an ERROR: a
// server whose streams each carry one event and then break, every other one
// with an ERROR and the others cut (a proxy that flaps both ways), is
// relisted from; otherwise every stream carries the store one change on,
// one backoff wait apart, and it falls behind for as long as the fault
// lasts.
func TestMachineRelistsUnderAnErrorAfterEveryOtherEvent(t *testing.T) {
	lists, streams := 0, 0
	driveBrokenStreams(t, 0, 10*time.Minute, func(n int) bool { return n%2 == 0 }, func(d ActionKind, _ time.Time) {
		if d == List {
			lists++
		} else {
			streams++
		}
	})
	if lists < 2 {
		t.Errorf("10 minutes of streams that each carry one event and break, every other one with an ERROR: %d WATCHes, "+
			"%d LISTs (the first); the store took in one change a stream and never relisted", streams, lists)
	}
}

// driveBrokenStreams steps a machine whose jitter draws r for d of streams
// that each carry one change and end: in an ERROR where errs(n) says (n
// counts the streams from 1), cut otherwise; every LIST succeeds in 100 ms.
// request hears of each LIST and WATCH as it is made.
func driveBrokenStreams(t *testing.T, r float64, d time.Duration, errs func(n int) bool, request func(ActionKind, time.Time)) {
	t.Helper()
	m := NewMachine(DefaultBackoff, false, func() float64 { return r })
	now := t0
	a := m.Start(now)
	rv, streams := 10, 0
	for now.Sub(t0) < d {
		var o Outcome
		switch a.Kind {
		case Wait:
			now = now.Add(a.Delay)
		case List:
			request(List, now)
			rv++
			now = now.Add(100 * time.Millisecond)
			o = Outcome{RV: fmt.Sprint(rv)}
		case Watch:
			request(Watch, now)
			streams++
			rv++ // the one change the stream carries
			now = now.Add(100 * time.Millisecond)
			o = Outcome{RV: fmt.Sprint(rv), Opened: true, Frames: 1, Err: cut, Open: 100 * time.Millisecond, Timeout: fiveMin}
			if errs(streams) {
				o.Err, o.ErrorEvent = err500, true
			}
		default:
			t.Fatalf("r=%v: unexpected %s (%s)", r, a.Kind, a.Reason)
		}
		o.At = now
		a = m.Step(o)
	}
}

// A server behind every list it serves (one restored between each list and
// its WATCH): every LIST succeeds at a newer resourceVersion, every WATCH is
// refused "too large resource version", and every WatchList is cut before
// its initial events end. Each refusal relists, as a 410 does; the request
// bound (40 in any minute) holds, and at the cap a list comes at least every
// two capped waits (no stall) and at most four LISTs and four WATCHes a
// minute (no storm).
func TestMachineHoldsTheRequestBoundWhenEveryWatchIsTooLarge(t *testing.T) {
	for _, wl := range []bool{false, true} {
		for _, r := range []float64{0, 0.999} {
			m := NewMachine(DefaultBackoff, wl, func() float64 { return r })
			now := t0
			a := m.Start(now)
			var at []time.Time
			var kind []ActionKind
			rv, refusedFrom := 100, map[string]int{}
			for now.Sub(t0) < 30*time.Minute {
				var o Outcome
				switch a.Kind {
				case Wait:
					now = now.Add(a.Delay)
				case List:
					now = now.Add(100 * time.Millisecond)
					rv += 10
					o = Outcome{RV: fmt.Sprint(rv)}
				case WatchList:
					now = now.Add(100 * time.Millisecond)
					o = Outcome{Opened: true, Frames: 3, Err: cut, Open: 100 * time.Millisecond, Timeout: fiveMin}
				case Watch:
					now = now.Add(100 * time.Millisecond)
					if refusedFrom[a.RV]++; refusedFrom[a.RV] > 2 {
						t.Fatalf("watchList=%v r=%v: WATCH from %s refused %d times without a list between", wl, r, a.RV, refusedFrom[a.RV])
					}
					o = Outcome{Err: errTooLrg, Timeout: fiveMin}
				case Probe:
					now = now.Add(100 * time.Millisecond)
					o = Outcome{RV: fmt.Sprint(rv)}
				default:
					t.Fatalf("unexpected %s (%s)", a.Kind, a.Reason)
				}
				if a.Kind != Wait {
					at, kind = append(at, now), append(kind, a.Kind)
				}
				o.At = now
				a = m.Step(o)
			}
			most, lists, watches, gap := 0, 0, 0, time.Duration(0)
			var lastList time.Time
			for i := range at {
				n, l, w := 0, 0, 0
				for j := i; j < len(at) && at[j].Sub(at[i]) < time.Minute; j++ {
					n++
					switch kind[j] {
					case List, WatchList:
						l++
					default:
						w++
					}
				}
				most = max(most, n)
				if at[i].Sub(t0) > 10*time.Minute {
					lists, watches = max(lists, l), max(watches, w)
					if kind[i] == List && !lastList.IsZero() {
						gap = max(gap, at[i].Sub(lastList))
					}
				}
				if kind[i] == List {
					lastList = at[i]
				}
			}
			t.Logf("watchList=%v r=%v: %d requests in 30 min, at most %d a minute; at the cap %d lists, %d watches a minute, lists at most %s apart",
				wl, r, len(at), most, lists, watches, gap)
			if most > 40 || lists > 4 || watches > 4 || gap > 2*DefaultBackoff.Max+time.Second {
				t.Errorf("watchList=%v r=%v: %d requests in a minute (bound 40); at the cap %d lists and %d watches a minute, lists %s apart",
					wl, r, most, lists, watches, gap)
			}
		}
	}
}
