package compare_test

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"rawwatch/compare"
	"rawwatch/internal/testkit"
)

// A small relist storm against the real local control plane: 3 clients of
// two kinds, 300 objects. Checked is correctness, not speed: every client
// synced, relisted after the restart and ends with every object; the
// apiserver really restarted (its request counter starts again from zero);
// the samples cover the storm; the request counts are plausible.
func TestSmallRelistStorm(t *testing.T) {
	cp := testkit.Shared.Get(t)
	// A liveness bound, not a speed target: the run takes 1 to 2 minutes
	// on an idle machine; with two busy loops and other tests beside it
	// (make test, at load 14 to 17), one apiserver restart took 19.5 s and
	// the run ran out of a 3-minute bound while its second kind restarted.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	a, kubeconfig, bin := dedicated(t, cp, "apiserver-storm")
	dir := t.TempDir()
	const clients, objects = 3, 300
	kinds := []string{compare.KindRaw, compare.KindInformerList}
	var progress strings.Builder
	out := filepath.Join(dir, "out")
	r, err := compare.RunStorm(ctx, compare.StormOptions{
		Kubeconfig: kubeconfig, RestartAPIServer: a.Restart, APIServerPID: a.PID, Objects: objects, Payload: 256, Clients: clients,
		Kinds: kinds, Writers: 8, OutDir: out, Binary: bin, Progress: &progress,
		Baseline: true, BaselineFor: 2 * time.Second, Tail: time.Second,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	defer func() {
		if t.Failed() {
			t.Logf("progress:\n%s\nreport:\n%s", progress.String(), r.Markdown())
		}
	}()
	if len(r.Modes) != len(kinds) || r.Baseline == nil {
		t.Fatalf("%d modes, baseline %v", len(r.Modes), r.Baseline != nil)
	}
	if !r.AllCorrect {
		t.Error("not AllCorrect")
	}
	for i, m := range r.Modes {
		if m.Kind != kinds[i] || !m.Correct {
			t.Errorf("%s: correct %v: %s", m.Kind, m.Correct, m.Incorrect)
		}
		if len(m.Clients) != clients || m.RelistedClients != clients {
			t.Errorf("%s: %d clients reported, %d relisted", m.Kind, len(m.Clients), m.RelistedClients)
		}
		for j, c := range m.Clients {
			if c.StoreLen != objects || c.Missing+c.Stale+c.Extra != 0 || c.SyncedAt == 0 || c.SyncedAt >= m.KilledAt || c.RelistedAt <= m.KilledAt {
				t.Errorf("%s client %d: %+v (killed at %d, ready at %d)", m.Kind, j, c, m.KilledAt, m.ReadyAt)
			}
		}
		// Ready is when the harness's readiness poll first succeeded; a
		// client may relist before that poll does, so relists are ordered
		// after the kill only.
		if !(m.KilledAt < m.ReadyAt && m.KilledAt < m.DoneAt) {
			t.Errorf("%s: killed %d, ready %d, done %d", m.Kind, m.KilledAt, m.ReadyAt, m.DoneAt)
		}
		// The samples cover the storm: some before the kill, some between
		// ready and the last relist or just after, and the restarted
		// apiserver counts its requests from zero again.
		var before, after int
		for _, s := range m.Series {
			switch {
			case s[0] < 0:
				before++
			case s[0] >= m.RestartSeconds:
				after++
			}
		}
		if before == 0 || after == 0 || m.PeakRSS <= 0 || m.PeakHeap <= 0 || m.PeakLive <= 0 || m.Allocated <= 0 {
			t.Errorf("%s: %d samples before the kill, %d after ready; peaks %v / %v / %v, allocated %v", m.Kind, before, after, m.PeakRSS, m.PeakHeap, m.PeakLive, m.Allocated)
		}
		// The kernel's peak of the restarted apiserver's resident set is
		// at least every sample of it.
		if m.HighWaterRSS < m.PeakRSS {
			t.Errorf("%s: the kernel's peak RSS %v below the sampled peak %v", m.Kind, m.HighWaterRSS, m.PeakRSS)
		}
		// Every client relisted: at least one list each (paginated LIST
		// starts, or WatchLists), and a watch after it.
		q := m.Requests
		if q.ListStarts+q.WatchLists < clients || q.Watches < clients || q.Total < q.ListPages+q.Watches || q.Read < objects*256 || q.Wire <= 0 {
			t.Errorf("%s: implausible requests %+v", m.Kind, q)
		}
		if m.ConsumerMaxRSS <= 0 {
			t.Errorf("%s: consumer max RSS %d", m.Kind, m.ConsumerMaxRSS)
		}
	}
	if r.Baseline.HighWaterRSS <= 0 || r.Baseline.HighWaterRSS < r.Baseline.PeakRSS {
		t.Errorf("baseline: the kernel's peak RSS %v, sampled %v", r.Baseline.HighWaterRSS, r.Baseline.PeakRSS)
	}
	if !r.Modes[0].Restarted || !r.Modes[1].Restarted || !r.Baseline.Restarted {
		t.Errorf("no sign of a restart in the apiserver's own counters: %v %v %v", r.Baseline.Restarted, r.Modes[0].Restarted, r.Modes[1].Restarted)
	}
	// raw against informer-list, the kernel's RSS, sampled RSS, heap and
	// live heap; raw-watchlist/informer did not run.
	if len(r.Targets) != 4 || r.Targets[0].Ratio != math.Round(r.Modes[0].HighWaterRSS/r.Modes[1].HighWaterRSS*1000)/1000 ||
		r.Targets[1].Ratio != math.Round(r.Modes[0].PeakRSS/r.Modes[1].PeakRSS*1000)/1000 ||
		r.Targets[2].Ratio != math.Round(r.Modes[0].PeakHeap/r.Modes[1].PeakHeap*1000)/1000 {
		t.Errorf("targets: %+v", r.Targets)
	}
	if err := r.Write(out); err != nil {
		t.Fatal(err)
	}
	md, _ := os.ReadFile(filepath.Join(out, "storm.md"))
	svg, _ := os.ReadFile(filepath.Join(out, "storm.svg"))
	for _, k := range kinds {
		if !strings.Contains(string(md), "| "+k+" |") || !strings.Contains(string(svg), ">"+k+"<") {
			t.Errorf("%s missing from storm.md or storm.svg", k)
		}
	}
	if n := strings.Count(string(svg), "<polyline"); n != 2*(len(kinds)+1) {
		t.Errorf("%d lines in storm.svg, want %d", n, 2*(len(kinds)+1))
	}
}
