package compare_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"rawwatch/codec"
	"rawwatch/compare"
	"rawwatch/internal/controlplane"
	"rawwatch/internal/testkit"
)

// dedicated starts an apiserver of its own on the shared etcd (restarting
// it, the forced relist, disturbs no other test) with extra flags, writes a
// kubeconfig for it, and builds cmd/compare, the consumers' binary.
func dedicated(t *testing.T, cp *controlplane.ControlPlane, name string, flags ...string) (a *controlplane.APIServer, kubeconfig, bin string) {
	t.Helper()
	a = testkit.APIServer(t, cp, name, flags...)
	dir := t.TempDir()
	kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := cp.WriteKubeconfig(kubeconfig, a); err != nil {
		t.Fatal(err)
	}
	bin = filepath.Join(dir, "compare")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/compare").CombinedOutput(); err != nil {
		t.Fatalf("building cmd/compare: %v\n%s", err, out)
	}
	return a, kubeconfig, bin
}

func TestMain(m *testing.M) { testkit.Main(m) }

// A short run of the whole harness against the local control plane: every
// consumer converges and passes, the report is written, and a consumer
// broken on purpose (it loses every 7th watch frame) fails its verdict — the
// verdict comes from what the consumers really did. Two consumers are first
// run alone, and what each cost the apiserver must be in the report.
func TestHarnessShortRunWithABrokenConsumer(t *testing.T) {
	cp := testkit.Shared.Get(t)
	ctx := context.Background()
	a, kubeconfig, bin := dedicated(t, cp, "apiserver-compare")
	dir := t.TempDir()
	const broken = compare.KindRawWatchList
	var progress strings.Builder
	report, err := compare.Run(ctx, compare.Options{
		Kubeconfig: kubeconfig, Objects: 300, UpdateRate: 200, UpdateDuration: 3 * time.Second,
		DeleteFraction: 0.5, Relist: true, RestartAPIServer: a.Restart, APIServerPID: a.PID,
		OutDir: filepath.Join(dir, "out"), Binary: bin, Writers: 8,
		Apply: true, Payload: 512, // real managedFields, a payload
		Break: map[string]int{broken: 7}, Progress: &progress,
		CostKinds: []string{compare.KindRaw, compare.KindInformerList}, IdleFor: 300 * time.Millisecond,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	if err := report.Write(filepath.Join(dir, "out")); err != nil {
		t.Fatal(err)
	}
	if len(report.Consumers) != len(compare.AllKinds) {
		t.Fatalf("%d consumers in the report", len(report.Consumers))
	}
	if report.Updates < 100 || report.Deletes != 150 || !report.Relist {
		t.Errorf("load: %d updates, %d deletes, relist %v", report.Updates, report.Deletes, report.Relist)
	}
	for _, c := range report.Consumers {
		if c.Kind == broken {
			if c.Verdict.OK || c.Verdict.Missing == 0 {
				t.Errorf("%s lost every 7th frame and still got %s", c.Kind, c.Verdict)
			}
			continue
		}
		if !c.Verdict.OK {
			t.Errorf("%s: %s", c.Kind, c.Verdict)
		}
		if c.Latency.Count != report.Updates+report.Deletes { // the updates include the probe after the relist
			t.Errorf("%s: %d latencies for %d updates and %d deletes", c.Kind, c.Latency.Count, report.Updates, report.Deletes)
		}
		if c.HeapAfterSync == 0 || c.RelistPeakHeap == 0 || c.SyncSeconds <= 0 || c.Relists < 1 || c.Requests.Watches < 2 {
			t.Errorf("%s: figures missing: %+v", c.Kind, c)
		}
	}
	if report.AllCorrect {
		t.Error("AllCorrect with a broken consumer")
	}
	if len(report.APIServerCosts) != 2 {
		t.Fatalf("%d API-server costs", len(report.APIServerCosts))
	}
	for _, c := range report.APIServerCosts {
		for _, w := range []compare.CostWindow{c.Sync, c.Relist} {
			// Each window reads every object (each carries a 512-byte
			// payload), costs the apiserver some CPU, and is sampled
			// before, during and after (the harness waits for late
			// samples: TestCostWindowSeriesOfLateSamples).
			var idle, after int
			for _, p := range w.Series {
				if p[0] < 0 {
					idle++
				} else if p[0] > w.Seconds {
					after++
				}
			}
			if !w.Done || w.Seconds <= 0 || w.BytesRead < 300*512 || w.CPUSeconds <= 0 || w.IdleCPURate < 0 ||
				w.IdleRSS <= 0 || w.IdleHeap <= 0 || w.PeakHeap <= 0 || w.PeakRSS < 0.8*w.IdleRSS || w.PeakLive <= 0 || w.Allocated <= 0 || w.WireBytes <= 0 || w.HighWaterRSS <= 0 ||
				w.SampleGap <= 0 || idle < 2 || after < 2 {
				t.Errorf("%s alone: implausible window (%d idle samples, %d after): %+v", c.Kind, idle, after, w)
			}
			if w.SampleGap > 5 { // scrapes every 100 ms: a busy machine answers late
				t.Logf("%s alone: no sample for %.1f s in a window", c.Kind, w.SampleGap)
			}
		}
	}
	if c := report.APIServerCosts[0]; c.Relist.BytesRead > 3*c.Sync.BytesRead || c.Sync.BytesRead > 3*c.Relist.BytesRead {
		t.Errorf("%s: %d bytes read at the initial sync, %d at the relist of the same objects", c.Kind, c.Sync.BytesRead, c.Relist.BytesRead)
	}
	md, _ := os.ReadFile(filepath.Join(dir, "out", "report.md"))
	svg, _ := os.ReadFile(filepath.Join(dir, "out", "report.svg"))
	js, _ := os.ReadFile(filepath.Join(dir, "out", "report.json"))
	for _, kind := range compare.AllKinds {
		if !strings.Contains(string(md), "| "+kind+" |") || !strings.Contains(string(svg), kind) || !strings.Contains(string(js), `"kind": "`+kind+`"`) {
			t.Errorf("%s missing from the report files", kind)
		}
	}
	if !strings.Contains(string(md), "server-side apply") || !strings.Contains(string(md), "heap per object vs informer") {
		t.Errorf("report.md says nothing of the applied objects' heap per object:\n%s", md)
	}
	if !strings.Contains(string(md), "API-server cost per consumer") || !strings.Contains(string(md), "| raw / informer-list |") ||
		!strings.Contains(string(svg), "apiserver heap in use") || !strings.Contains(string(js), `"apiserverCosts"`) {
		t.Errorf("the API-server costs are missing from the report files:\n%s", md)
	}
	if !strings.Contains(string(md), "FAIL") || strings.Count(string(svg), "<polyline") < 2*len(compare.AllKinds)-1 {
		t.Errorf("report.md or report.svg incomplete:\n%s", md)
	}
}

// With --wire cbor against an apiserver that serves CBOR, every consumer
// that can ask for CBOR reads nothing but CBOR (by its responses'
// Content-Type), and the report says so; the kinds that cannot ask read
// JSON and the report says they cannot. A consumer process that asked for
// CBOR and silently read JSON (its client-go without ClientsAllowCBOR, say,
// or a watcher fallen back) fails here.
func TestHarnessConsumersReadTheWireTheyAskFor(t *testing.T) {
	cp := testkit.Shared.Get(t)
	ctx := context.Background()
	_, kubeconfig, bin := dedicated(t, cp, "apiserver-compare-cbor", controlplane.CBORGate)
	out := filepath.Join(t.TempDir(), "out")
	var progress strings.Builder
	report, err := compare.Run(ctx, compare.Options{
		Kubeconfig: kubeconfig, Objects: 50, UpdateRate: 50, UpdateDuration: time.Second, DeleteFraction: 0.5,
		OutDir: out, Binary: bin, Writers: 4, Progress: &progress, Wire: codec.WireCBOR,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	if err := report.Write(out); err != nil {
		t.Fatal(err)
	}
	md, _ := os.ReadFile(filepath.Join(out, "report.md"))
	if len(report.Consumers) != len(compare.AllKinds) || report.Wire != codec.WireCBOR {
		t.Fatalf("%d consumers, wire %q in the report", len(report.Consumers), report.Wire)
	}
	cannot := 0
	for _, c := range report.Consumers {
		if !c.Verdict.OK {
			t.Errorf("%s: %s", c.Kind, c.Verdict)
		}
		want := codec.WireCBOR
		if !compare.CanAsk(c.Kind, want) {
			want = codec.WireJSON
			cannot++
		}
		if c.WireAsked != want || c.WireRead != string(want) || c.Bodies.CBOR+c.Bodies.JSON == 0 {
			t.Errorf("%s asked for %s and read %q (body bytes %+v); want %s", c.Kind, c.WireAsked, c.WireRead, c.Bodies, want)
		}
		if row := "| " + c.Kind + " | " + string(want) + " ("; !strings.Contains(string(md), row) {
			t.Errorf("report.md has no row %q", row)
		}
	}
	if cannot == 0 || strings.Count(string(md), ": cannot ask for cbor |") != cannot || strings.Contains(string(md), "**: asked for cbor") {
		t.Errorf("report.md must say which %d kinds cannot ask for CBOR, and flag none of those that asked:\n%s", cannot, md)
	}
}
