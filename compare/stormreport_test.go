package compare

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The storm's targets compare each raw kind with the informer that gets its
// state the same way, absolute and above the no-client restart, and survive
// a round trip through storm.json.
func TestStormTargetsAndRendering(t *testing.T) {
	const mb = 1 << 20
	r := &StormReport{Clients: 50, Objects: 10000,
		Baseline: &StormMode{Kind: "none", Correct: true, PeakRSS: 300 * mb, PeakHeap: 200 * mb, PeakLive: 150 * mb, HighWaterRSS: 400 * mb},
		Modes: []StormMode{
			{Kind: KindRaw, Correct: true, PeakRSS: 400 * mb, PeakHeap: 250 * mb, PeakLive: 180 * mb, HighWaterRSS: 500 * mb, Series: [][3]float64{{-1, 290, 190}, {2, 400, 250}}},
			{Kind: KindRawWatchList, Correct: true, PeakRSS: 500 * mb, PeakHeap: 300 * mb, PeakLive: 200 * mb, HighWaterRSS: 600 * mb},
			{Kind: KindInformer, Correct: true, PeakRSS: 450 * mb, PeakHeap: 320 * mb, PeakLive: 210 * mb, HighWaterRSS: 650 * mb},
			{Kind: KindInformerList, Correct: false, Incorrect: "client 3: 2 missing", PeakRSS: 700 * mb, PeakHeap: 600 * mb, PeakLive: 300 * mb, HighWaterRSS: 900 * mb, Series: [][3]float64{{0, 300, 200}, {5, 700, 600}}},
		}}
	r.Targets = stormTargets(r)
	want := []struct {
		ratio, above float64
		met          bool
		note         bool
	}{
		{0.556, 0.2, false, true},   // raw / informer-list, the kernel's RSS: 500/900; 100/500; informer-list incorrect
		{0.571, 0.25, false, true},  // sampled RSS: 400/700; (100)/(400)
		{0.417, 0.125, false, true}, // heap: 250/600; 50/400
		{0.6, 0.2, false, true},     // live heap: 180/300; 30/150
		{0.923, 0.8, true, false},   // raw-watchlist / informer, the kernel's RSS: 600/650; 200/250
		{1.111, 1.333, false, false},
		{0.938, 0.833, true, false},
		{0.952, 0.833, true, false}, // live heap: 200/210; 50/60
	}
	if len(r.Targets) != len(want) {
		t.Fatalf("%d targets: %+v", len(r.Targets), r.Targets)
	}
	for i, w := range want {
		g := r.Targets[i]
		if g.Ratio != w.ratio || g.AboveBaseline != w.above || g.Met != w.met || (g.Note != "") != w.note {
			t.Errorf("target %d: %+v, want %+v", i, g, w)
		}
	}
	dir := t.TempDir()
	if err := r.Write(dir); err != nil {
		t.Fatal(err)
	}
	back, err := ReadStormReport(filepath.Join(dir, "storm.json"))
	if err != nil {
		t.Fatal(err)
	}
	if back.Markdown() != r.Markdown() {
		t.Errorf("storm.json does not render the same:\n%s\n%s", back.Markdown(), r.Markdown())
	}
	md := r.Markdown()
	svg, _ := os.ReadFile(filepath.Join(dir, "storm.svg"))
	if !strings.Contains(md, "| no clients (baseline: a restart and one one-item LIST) | 0.0 s | 400.0 MiB / 300.0 MiB") || !strings.Contains(md, "| informer-list | 5.0 s | 900.0 MiB / 700.0 MiB") || !strings.Contains(md, "**no**: client 3: 2 missing") ||
		strings.Count(string(svg), "<polyline") != 4 {
		t.Errorf("report:\n%s\n%s", md, svg)
	}
}

// A storm's peaks are the restarted apiserver's: from its being ready until
// the last relist. A scrape that returned just after the kill was answered
// by the old apiserver, still holding its clients' initial sync.
func TestStormPeaksAreTheRestartedAPIServers(t *testing.T) {
	const mb = 1 << 20
	t0 := time.Now()
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	sampler := &APIServerSampler{}
	add := func(x, rss, requests float64) {
		sampler.samples = append(sampler.samples, APIServerSample{At: at(x), RSS: rss * mb, HeapInuse: rss / 2 * mb, Requests: requests})
	}
	add(-1, 3000, 900)
	add(0, 3100, 901) // returned as the kill began: the old apiserver
	for x := 2.0; x <= 9; x++ {
		add(x, 400+10*x, x) // the new one, counting requests from zero
	}
	s := &storm{sampler: sampler, opts: StormOptions{Tail: time.Second}}
	m := &StormMode{KilledAt: at(0).UnixNano(), ReadyAt: at(1.5).UnixNano(), DoneAt: at(8).UnixNano()}
	s.measure(m)
	if m.PeakRSS != 480*mb || m.PeakHeap != 240*mb || !m.Restarted {
		t.Errorf("peaks %v / %v MiB, restarted %v; want 480 / 240 (the sample at 8 s) and a restart", m.PeakRSS/mb, m.PeakHeap/mb, m.Restarted)
	}
}
