package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// The verdict can fail: a controller whose watch silently loses every
// MODIFIED and DELETED event (the proxy swallows them, and nothing relists)
// keeps ghosts and stale objects in its store, never sees the deletions, and
// never reconciles the updates. The command says so, and exits 1.
func TestLosingEventsFailsTheVerdict(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the chaos command on a local control plane of its own; skipped with -short")
	}
	var stdout, stderr strings.Builder
	if code := run([]string{"--break", "nonsense"}, &stdout, &stderr); code != 2 {
		t.Fatalf("an unknown --break: exit %d, want 2", code)
	}
	code := run([]string{"--objects=100", "--duration=8s", "--churn-rate=30", "--converge=10s", "--break=drop-events",
		"--controller-log=" + filepath.Join(t.TempDir(), "controller.log")}, &stdout, &stderr)
	out := stdout.String()
	t.Logf("\n%s", out)
	if code != 1 {
		t.Fatalf("exit %d, want 1; stderr:\n%s", code, stderr.String())
	}
	for _, want := range []string{
		"VERDICT: FAIL",
		"FAIL the store equals a fresh LIST",
		"FAIL every object's status.observedGeneration equals its metadata.generation",
		"FAIL all",
		"differences between the store and a fresh LIST",
		"deleted on the server, still in the store",
		"at an older or newer resourceVersion",
		"deletions the reconciler never saw",
		"objects whose status is not at their generation",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the report does not say %q", want)
		}
	}
}

// --budget measures the watcher's requests under a persistent fault and
// prints a row per fault; here one fault, briefly: every stream cut after
// its first frame, which the watcher must answer with backoff, not a storm.
func TestBudgetPrintsARowPerFault(t *testing.T) {
	var stdout, stderr strings.Builder
	if code := run([]string{"--budget", "--budget-faults=flap-cut,nonsense"}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), `unknown --budget-faults "nonsense"`) {
		t.Fatalf("an unknown fault: exit %d, want 2; stderr:\n%s", code, stderr.String())
	}
	stderr.Reset()
	code := run([]string{"--budget", "--budget-faults=flap-cut", "--budget-each=10s",
		"--controller-log=" + filepath.Join(t.TempDir(), "controller.log")}, &stdout, &stderr)
	out := stdout.String()
	t.Logf("\n%s", out)
	if code != 0 {
		t.Fatalf("exit %d, want 0; stderr:\n%s", code, stderr.String())
	}
	for _, want := range []string{"bound: 40 LISTs and WATCHes in any minute", "flap-cut ", "BUDGET: PASS"} {
		if !strings.Contains(out, want) {
			t.Errorf("the report does not say %q", want)
		}
	}
}
