package compare_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"rawwatch/compare"
	"rawwatch/internal/testkit"
	"rawwatch/reconcile/myresource"
)

// Both controllers converge on the real control plane: 200 creates each,
// with Events and without. Every object reaches Processed, every status
// write and Event write is counted in the controller's transport, Events
// are off when the setting says so, and the report renders every run.
func TestConvergeBothKinds(t *testing.T) {
	cp := testkit.Shared.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const objects = 200
	var settings []compare.Setting
	for _, s := range []string{"200/400/2/all", "200/400/2/none"} {
		st, err := compare.ParseSetting(s)
		if err != nil {
			t.Fatal(err)
		}
		settings = append(settings, st)
	}
	var progress strings.Builder
	r, err := compare.RunConverge(ctx, compare.ConvergeOptions{
		Kubeconfig: cp.Kubeconfig, Objects: objects, Writers: 8, Settings: settings,
		Timeout: time.Minute, Progress: &progress,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	if len(r.Runs) != 4 {
		t.Fatalf("%d runs, want 4 (2 kinds × 2 settings)\n%s", len(r.Runs), progress.String())
	}
	checkConvergeRuns(t, r, objects)
	if ratios := r.Ratios(); len(ratios) != 2 {
		t.Errorf("ratios: %+v", ratios)
	}
	dir := t.TempDir()
	if err := r.Write(dir); err != nil {
		t.Fatal(err)
	}
	back, err := compare.ReadConvergeReport(filepath.Join(dir, "convergence.json"))
	if err != nil || len(back.Runs) != len(r.Runs) {
		t.Fatalf("reading the report back: %v", err)
	}
	md, _ := os.ReadFile(filepath.Join(dir, "convergence.md"))
	svg, _ := os.ReadFile(filepath.Join(dir, "convergence.svg"))
	for _, run := range r.Runs {
		if row := "| " + run.Kind + " | " + run.Setting.String() + " |"; !strings.Contains(string(md), row) {
			t.Errorf("convergence.md has no row %q", row)
		}
	}
	if n := strings.Count(string(svg), "<polyline"); n != 4 {
		t.Errorf("%d curves in convergence.svg, want 4", n)
	}
}

// checkConvergeRuns: every run converged with every object Processed, in
// order, with a status write per object and an Event write per object
// exactly when the setting asks for them, counted in the controller's
// transport, and a curve that ends at every object.
func checkConvergeRuns(t *testing.T, r *compare.ConvergeReport, objects int) {
	t.Helper()
	for _, run := range r.Runs {
		if !run.Converged || run.Processed != objects {
			t.Errorf("%s %s: converged %v, %d Processed", run.Kind, run.Setting, run.Converged, run.Processed)
		}
		if !(0 < run.P50Seconds && run.P50Seconds <= run.P90Seconds && run.P90Seconds <= run.AllSeconds) {
			t.Errorf("%s %s: times out of order: %v %v %v", run.Kind, run.Setting, run.P50Seconds, run.P90Seconds, run.AllSeconds)
		}
		if run.StatusWrites() < objects {
			t.Errorf("%s %s: %d status writes for %d objects: %v", run.Kind, run.Setting, run.StatusWrites(), objects, run.Requests)
		}
		if all := run.Setting.Events == myresource.EventsAll; all && run.EventWrites() < objects || !all && run.EventWrites() != 0 {
			t.Errorf("%s %s: %d Event writes for %d objects", run.Kind, run.Setting, run.EventWrites(), objects)
		}
		if run.Requests["WATCH myresources"] < 1 || run.Codes[200] < objects {
			t.Errorf("%s %s: requests %v, codes %v", run.Kind, run.Setting, run.Requests, run.Codes)
		}
		if run.CPUSeconds <= 0 {
			t.Errorf("%s %s: CPU %v s", run.Kind, run.Setting, run.CPUSeconds)
		}
		if n := len(run.Curve); n < 2 || run.Curve[n-1][1] != float64(objects) {
			t.Errorf("%s %s: curve ends at %v", run.Kind, run.Setting, run.Curve[n-1])
		}
	}
}

// The reconciler on the other anchors converges too: the informer
// controller with managedFields stripped, and a controller-runtime manager
// with its own Event recorder.
func TestConvergeAnchors(t *testing.T) {
	cp := testkit.Shared.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const objects = 100
	s, err := compare.ParseSetting("200/400/2/all")
	if err != nil {
		t.Fatal(err)
	}
	var progress strings.Builder
	r, err := compare.RunConverge(ctx, compare.ConvergeOptions{
		Kubeconfig: cp.Kubeconfig, Objects: objects, Writers: 8, Settings: []compare.Setting{s},
		Kinds: []string{compare.KindInformerStripped, compare.KindControllerRuntime}, Timeout: time.Minute, Progress: &progress,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	if len(r.Runs) != 2 {
		t.Fatalf("%d runs, want 2\n%s", len(r.Runs), progress.String())
	}
	checkConvergeRuns(t, r, objects)
}

func TestParseSetting(t *testing.T) {
	s, err := compare.ParseSetting("200/400/4/warnings")
	if err != nil || s.QPS != 200 || s.Burst != 400 || s.Workers != 4 || s.Events != myresource.EventsWarnings || s.String() != "200/400/4/warnings" {
		t.Errorf("got %+v, %v", s, err)
	}
	if d, err := compare.ParseSetting("defaults"); err != nil || !d.Defaults || d != compare.DefaultsSetting {
		t.Errorf("defaults: %+v, %v", d, err)
	}
	for _, bad := range []string{"", "50/100/2", "50/100/2/maybe", "50/100/2/events", "x/100/2/all", "0/100/2/all", "50/100/0/all", "50/0/2/all"} {
		if _, err := compare.ParseSetting(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	// RunConverge refuses what ParseSetting would, before it starts anything.
	for _, bad := range []compare.Setting{{QPS: 50, Burst: 100}, {QPS: 50, Burst: 100, Workers: 2, Events: "some"}} {
		if _, err := compare.RunConverge(context.Background(), compare.ConvergeOptions{Kubeconfig: "unused", Settings: []compare.Setting{bad}}); err == nil {
			t.Errorf("RunConverge accepted %+v", bad)
		}
	}
}
