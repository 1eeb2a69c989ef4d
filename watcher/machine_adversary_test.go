package watcher

import (
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// pathsMissingErr is kube-apiserver's notfoundhandler answer while a process
// that has just started installs its API groups.
var pathsMissingErr = apierrors.NewServiceUnavailable("the request has been made before all known HTTP paths have been installed, please try again")

// From the review of c26aaf3 and 3cdac33 (written against 3cdac33; it holds since 70866c0, which counts only the relist of a server that said it had just started as made since it started): a LIST answered, then the WATCH that follows
// it answered 503 "before all known HTTP paths have been installed". The
// server that served the LIST had its paths installed; the one answering
// now has just started: it is another process, started after our list (an
// apiserver restarted on an etcd restored from a snapshot, its
// resourceVersion behind ours). The rule "a WATCH from a list made since the
// server started ... tries again" does not apply: the list was made before.
// The commit's claim, "time travel is still found at the first request that
// gets through", needs the first request after the wait to read the
// server's resourceVersion (a probe, or the relist); a WATCH from our
// resourceVersion against a restored watch cache is accepted and silent
// until the watchdog gives up on it (SilenceLimit, 150 s).
func TestAdversaryPathsMissingAfterTheListIsARestartedServer(t *testing.T) {
	s, _ := newScript(t, false)
	s.step(time.Second, Outcome{RV: "100"}, Action{Kind: Watch, RV: "100"}, Watching)
	a := s.m.Step(Outcome{At: s.now.Add(time.Second), Err: pathsMissingErr})
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

// From the review of c26aaf3 and 3cdac33 (written against 3cdac33; it holds since 70866c0, which counts only the relist of a server that said it had just started as made since it started): the same with a WATCH refused first: the
// server went away after our list (connection refused), so the probe's
// "paths not installed" is a process started after the list. The machine
// still counts the list as made "since the server started" (fresh: no stream
// opened since it) and WATCHes from it, skipping the probe it would have
// made for any other failure.
func TestAdversaryRefusedThenPathsMissingStillProbes(t *testing.T) {
	s, _ := newScript(t, false)
	s.step(time.Second, Outcome{RV: "100"}, Action{Kind: Watch, RV: "100"}, Watching)
	a := s.step(time.Second, Outcome{Err: errRefused}, Action{Kind: Wait, Delay: 1600 * time.Millisecond}, BackingOff)
	s.wait(a, Action{Kind: Probe}, Watching)
	a = s.step(time.Second, Outcome{Err: pathsMissingErr}, Action{Kind: Wait, Delay: 3200 * time.Millisecond}, BackingOff)
	s.now = s.now.Add(a.Delay)
	if next := s.m.Step(Outcome{At: s.now}); next.Kind != Probe && next.Kind != List {
		t.Fatalf("refused, then a probe answered 'paths not installed' (a server started after our list at 100): "+
			"after the wait %s rv %q (%s); want a probe or the relist, which read the server's resourceVersion", next.Kind, next.RV, next.Reason)
	}
}
