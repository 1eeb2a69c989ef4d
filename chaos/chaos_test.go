package chaos_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"

	"rawwatch/chaos"
	"rawwatch/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// The short chaos run: 1,000 objects churned for 60 s under every fault.
// `make chaos` is the full one (10,000 objects).

// fileLogger is a logger writing to a file, and a func that returns the
// file's last lines.
func fileLogger(t *testing.T) (klog.Logger, func() string) {
	logFile := filepath.Join(t.TempDir(), "controller.log")
	f, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	tail := func() string {
		b, _ := os.ReadFile(logFile)
		lines := strings.Split(string(b), "\n")
		return strings.Join(lines[max(0, len(lines)-80):], "\n")
	}
	return textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(f), textlogger.Verbosity(2))), tail
}

// run makes a chaos run with cfg (the controller's log to a file), prints
// its report, and fails the test on any loss. How soon the controller
// converged after the faults is a measurement (cmd/chaos holds it to
// MaxConvergence): on a busy machine under -race it is reported, not
// failed; that it converged at all (the store equals a fresh LIST, every
// status caught up, within Converge) is a loss check and fails.
//
// On a failure the controller's last log lines come first and the
// failures last: CI shows a long output's head and tail only.
func run(t *testing.T, cfg chaos.Config) *chaos.Report {
	var tail func() string
	cfg.Logger, tail = fileLogger(t)
	cfg.Logf = t.Logf
	rep, err := chaos.Run(context.Background(), testkit.Shared.Get(t), cfg)
	if err != nil {
		t.Logf("the controller's log, last lines:\n%s", tail())
		t.Fatal(err)
	}
	var out strings.Builder
	rep.Print(&out)
	t.Logf("\n%s", out.String())
	if f := rep.Verdict.Failures(); len(f) > 0 {
		t.Logf("the controller's log, last lines:\n%s", tail())
		t.Fatalf("the controller lost something:\n%s", strings.Join(f, "\n"))
	}
	if slow := rep.Failures(); len(slow) > 0 {
		t.Logf("slower than cmd/chaos allows (a busy machine?): %s", strings.Join(slow, "; "))
	}
	return rep
}

func TestShortChaosRunLosesNothing(t *testing.T) {
	rep := run(t, chaos.Config{})
	// A PASS means something only if the faults really happened. The
	// watcher backs off after every fault, a cut included, so a periodic cut
	// finds a stream about half the time; the least numbers are what every
	// run reached when checked over repeated runs.
	phase := map[string]chaos.PhaseReport{}
	for _, p := range rep.Phases {
		phase[p.Name] = p
	}
	// Each kind of fault must have met the watcher at least once (how often
	// varies with the machine's load: under -race on two cores, fewer
	// streams are open when a fault comes).
	for what, c := range map[string]struct{ got, least int64 }{
		"watch streams cut":     {rep.Proxy.Cut, 1},
		"410 ERROR events sent": {rep.Proxy.Expired, 1},
		"410s from the server":  {rep.Proxy.UpstreamGone, 1},
		"relists":               {rep.Relists, 2},
		"etcd compactions":      {int64(rep.Compactions), 2},
		"apiserver restarts":    {int64(rep.Restarts), 1},
		// (Under load a 6 s phase may pass while the watcher waits: the two
		// flapping phases together must have met it. The freeze is not
		// required to outlast the watchdog here: a stream opened late in it
		// is thawed before the silence limit. The watchdog is shown in
		// watcher/sim_test.go and by chaos --budget's long freeze.)
		"streams cut or ended by the flapping faults": {phase["flap-cut"].Cut + phase["flap-error"].ErrorEvents, 1},
		"deletions":        {rep.Deletes, 100},
		"re-created names": {rep.Recreates, 10},
		"updates":          {rep.Updates, 1000},
		"reconciles":       {rep.Reconciles, 2000},
	} {
		if c.got < c.least {
			t.Errorf("%s: %d, want at least %d: the run did not test what it claims", what, c.got, c.least)
		}
	}
}

// The short chaos run with three sharded replicas: the same faults, and one
// replica killed at 40% (no clean leave: its Lease stays) and another
// started at 55%. The verdict adds: the stores of the live replicas tile
// the objects, and no key is ever reconciled by two replicas at once.
func TestShortShardedChaosRunLosesNothing(t *testing.T) {
	rep := run(t, chaos.Config{Replicas: 3, RingLease: 6 * time.Second, RingRenew: time.Second})
	if len(rep.Killed) != 1 || len(rep.Started) != 1 {
		t.Errorf("killed %v, started %v: want one of each", rep.Killed, rep.Started)
	}
	if rep.Reconciles < 2000 || rep.Relists < 2 {
		t.Errorf("%d reconciles, %d relists: the run did not test what it claims", rep.Reconciles, rep.Relists)
	}
}
