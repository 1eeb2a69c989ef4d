package compare

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rawwatch/api/v1alpha1"
)

// What each consumer costs the apiserver (Options.CostKinds). Side by side,
// the apiserver's memory and CPU cannot be told apart by consumer, so before
// the side-by-side phases each kind runs alone, one after the other, while
// the apiserver's /metrics is scraped every 100 ms:
//
//  1. the apiserver is restarted (no kind's garbage counts against the
//     next), its watch cache of the objects is ready, it is left to settle
//     for IdleFor and then sampled idle for IdleFor;
//  2. initial sync: the consumer starts; the window ends when it has synced;
//  3. relist: writes elsewhere move the revision on and the apiserver is
//     restarted: the consumer's watch is gone and a new one gets 410 Gone.
//     The window runs from the kill until the consumer has relisted.
//
// The restarted apiserver counts its CPU from zero and rebuilds its memory
// and its watch cache, whoever relists: the relist's CPU is counted from the
// apiserver's being ready again, and its peaks are compared with the same
// idle apiserver as the initial sync's.

// APIServerCost is what one consumer, running alone, cost the apiserver.
type APIServerCost struct {
	Kind   string     `json:"kind"`
	Sync   CostWindow `json:"initialSync"`
	Relist CostWindow `json:"relist"`
}

// CostWindow is one window of a consumer running alone.
type CostWindow struct {
	// Done: the consumer synced (or relisted) before the timeout. Seconds:
	// consumer started → synced, or apiserver killed → consumer relisted
	// (to within the consumer's 200 ms status interval).
	Done    bool    `json:"done"`
	Seconds float64 `json:"seconds"`
	// The apiserver idle over IdleFor just before the initial sync: its
	// highest RSS and heap in use (bytes) and its CPU use (seconds per
	// second; the scrapes are most of it).
	IdleRSS     float64 `json:"idleRSS"`
	IdleHeap    float64 `json:"idleHeap"`
	IdleLive    float64 `json:"idleLiveHeap"`
	IdleCPURate float64 `json:"idleCPUPerSecond"`
	// The highest RSS, heap in use and live heap sampled in the window
	// and the first sample after it (bytes; a window shorter than the
	// sampling interval may have no sample of its own). The live heap is what the last GC kept (APIServerSample):
	// it does not swing with the GC's timing as heap in use does.
	PeakRSS  float64 `json:"peakRSS"`
	PeakHeap float64 `json:"peakHeap"`
	PeakLive float64 `json:"peakLiveHeap"`
	// HighWaterRSS is the kernel's peak of the apiserver's resident set
	// over the window (VmHWM, reset when the window begins; in a relist,
	// since the restart), which no sampling gap hides; 0 if unknown.
	HighWaterRSS float64 `json:"highWaterRSS,omitempty"`
	// Allocated: bytes the apiserver allocated over the same time as
	// CPUSeconds; AllocatedAboveIdle the same less the idle rate (the
	// scrapes allocate too).
	Allocated          float64 `json:"allocated"`
	AllocatedAboveIdle float64 `json:"allocatedAboveIdle"`
	// CPUSeconds is process_cpu_seconds_total from the last sample before
	// the window (in a relist, the first after the restart) to the first
	// after it;
	// CPUAboveIdle the same less the idle rate over that time.
	CPUSeconds   float64 `json:"cpuSeconds"`
	CPUAboveIdle float64 `json:"cpuAboveIdle"`
	// BytesRead: response-body bytes the consumer read in the window (and
	// the second after it), counted in its transport after decompression;
	// WireBytes: the bytes it read from its connections in that time.
	BytesRead int64 `json:"bytesRead"`
	WireBytes int64 `json:"wireBytes"`
	// SampleGap is the longest time in the window without a successful
	// scrape (seconds; in a relist, from the apiserver's being ready): a
	// peak inside a gap is not seen.
	SampleGap float64 `json:"sampleGapSeconds"`
	// Series: seconds since the window began → apiserver RSS and heap in use
	// (MiB), from IdleFor before it to a second after, and at least the
	// three samples before it and the two after it.
	Series [][3]float64 `json:"series"`
}

// RSSAboveIdle and HeapAboveIdle are the window's peaks less the idle peaks
// (RSS: the kernel's peak if known, else the samples').
func (w CostWindow) RSSAboveIdle() float64 {
	if w.HighWaterRSS > 0 {
		return w.HighWaterRSS - w.IdleRSS
	}
	return w.PeakRSS - w.IdleRSS
}
func (w CostWindow) HeapAboveIdle() float64 { return w.PeakHeap - w.IdleHeap }
func (w CostWindow) LiveAboveIdle() float64 { return w.PeakLive - w.IdleLive }

// measureCosts runs each of CostKinds alone.
func (h *harness) measureCosts(ctx context.Context) error {
	s, err := NewAPIServerSampler(h.cfg)
	if err != nil {
		return err
	}
	s.client.Timeout = 10 * time.Second // as in the storm: a busy machine answers late
	sctx, stop := context.WithCancel(ctx)
	var sampling sync.WaitGroup
	sampling.Go(func() { s.Run(sctx, 100*time.Millisecond) })
	defer sampling.Wait()
	defer stop()
	for _, kind := range h.opts.CostKinds {
		cost, err := h.alone(ctx, s, kind)
		if err != nil {
			return fmt.Errorf("%s alone: %w", kind, err)
		}
		h.costs = append(h.costs, *cost)
	}
	return nil
}

func (h *harness) idleFor() time.Duration {
	if h.opts.IdleFor == 0 {
		return 2 * time.Second
	}
	return h.opts.IdleFor
}

func (h *harness) alone(ctx context.Context, s *APIServerSampler, kind string) (*APIServerCost, error) {
	// A fresh apiserver, warm (its watch cache filled) and idle.
	h.logf("%s alone: restarting the apiserver", kind)
	if _, _, err := restartSampled(ctx, s, h.opts.RestartAPIServer); err != nil {
		return nil, err
	}
	if err := h.watchReady(ctx); err != nil {
		return nil, err
	}
	// A fresh apiserver still collects the garbage of its start for a
	// while: it is given IdleFor to settle, then sampled idle for IdleFor
	// and at least three samples (a busy machine answers scrapes late).
	time.Sleep(h.idleFor())
	idleFrom := time.Now()
	time.Sleep(h.idleFor())
	awaitSamples(s, idleFrom, 3)
	cost := &APIServerCost{Kind: kind}
	h.resetHighWater()
	c, err := h.spawn(kind, "alone-"+kind)
	if err != nil {
		return nil, err
	}
	h.consumers = []*child{c} // the waits below wait for it alone
	defer func() {
		c.kill()
		h.consumers = nil
	}()
	begin := time.Now()
	if err := h.waitEach(10*time.Minute, syncQuietPeriod, kind+" alone: initial sync", func(_ *child, st status) bool { return st.synced }); err != nil {
		return nil, err
	}
	end := time.Now()
	highWater := h.highWater()
	time.Sleep(time.Second) // the last status lines
	awaitSamples(s, end, 2) // the samples after the window
	before := c.status()
	cost.Sync = window(s, idleFrom, begin, begin, begin, end, before.synced, before.bytesRead, before.wireBytes)
	cost.Sync.HighWaterRSS = highWater

	h.logf("%s alone: synced in %.1fs; restarting the apiserver", kind, cost.Sync.Seconds)
	if err := bumpRevision(ctx, h.kube); err != nil {
		return nil, err
	}
	killed, ready, err := restartSampled(ctx, s, h.opts.RestartAPIServer)
	if err != nil {
		return nil, err
	}
	n := h.opts.Objects
	if err := h.waitEach(2*time.Minute, 45*time.Second, kind+" alone: relist", func(c *child, st status) bool { return relisted(c.kind, before, st, n) }); err != nil {
		return nil, err
	}
	end = time.Now()
	highWater = h.highWater()
	time.Sleep(time.Second)
	awaitSamples(s, end, 2)
	after := c.status()
	cost.Relist = window(s, idleFrom, begin, time.Unix(0, killed), time.Unix(0, ready), end, relisted(kind, before, after, n),
		after.bytesRead-before.bytesRead, after.wireBytes-before.wireBytes)
	cost.Relist.HighWaterRSS = highWater
	h.logf("%s alone: relisted in %.1fs", kind, cost.Relist.Seconds)
	c.stop()
	if err := c.wait(time.Minute); err != nil {
		return nil, err
	}
	return cost, nil
}

// awaitSamples waits until the last n samples were all taken at or after t,
// at most 10 s: a busy machine answers the 100 ms scrapes late, and a fixed
// sleep may then hold one sample or none.
func awaitSamples(s *APIServerSampler, t time.Time, n int) {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if smp, _ := s.Samples(); len(smp) >= n && !smp[len(smp)-n].At.Before(t) {
			return
		}
	}
}

// highWater is the apiserver's resident-set high-water mark (bytes), 0 if
// unknown; resetHighWater sets it back to the resident set now.
func (h *harness) highWater() float64 { return highWater(h.opts.APIServerPID, h.logf) }
func (h *harness) resetHighWater()    { resetHighWater(h.opts.APIServerPID, h.logf) }

// watchReady waits until the apiserver serves a WATCH of the namespace's
// objects, which it does from its watch cache once that cache has been
// filled (a restarted apiserver answers 429 until then).
func (h *harness) watchReady(ctx context.Context) error {
	deadline := time.Now().Add(time.Minute)
	for {
		l, err := h.client.List(ctx, h.namespace, metav1.ListOptions{Limit: 1})
		if err == nil {
			w, werr := h.client.REST().Get().Namespace(h.namespace).Resource(v1alpha1.Resource).
				VersionedParams(&metav1.ListOptions{Watch: true, ResourceVersion: l.ResourceVersion}, metav1.ParameterCodec).Watch(ctx)
			if err = werr; err == nil {
				w.Stop()
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the apiserver serves no watch a minute after its restart: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// window computes a window's figures from the sampler's samples: the idle
// apiserver over [idleFrom, idleTo), the window [from, to], the apiserver
// ready at ready (from, unless it restarted in the window); read and wire are
// the bytes the consumer read (ByteCounter).
func window(s *APIServerSampler, idleFrom, idleTo, from, ready, to time.Time, done bool, read, wire int64) CostWindow {
	samples, _ := s.Samples()
	w := CostWindow{Done: done, Seconds: to.Sub(from).Seconds(), BytesRead: read, WireBytes: wire}
	var idle, in []APIServerSample
	var times []float64
	var first, last *APIServerSample // the last before from (the first from ready, if it restarted), the first after to
	// The series runs from the idle time before the window to a second
	// after it, and holds at least the last three samples before it and
	// the first two after it, however late they came.
	lo, hi := -idleTo.Sub(idleFrom).Seconds(), w.Seconds+1
	if k := slices.IndexFunc(samples, func(s APIServerSample) bool { return !s.At.Before(from) }); k != 0 && len(samples) > 0 {
		if k < 0 {
			k = len(samples)
		}
		lo = min(lo, samples[max(k-3, 0)].At.Sub(from).Seconds())
	}
	if k := slices.IndexFunc(samples, func(s APIServerSample) bool { return s.At.After(to) }); k >= 0 {
		hi = max(hi, samples[min(k+1, len(samples)-1)].At.Sub(from).Seconds())
	}
	for i, smp := range samples {
		if !smp.At.Before(idleFrom) && smp.At.Before(idleTo) {
			idle = append(idle, smp)
		}
		t := smp.At.Sub(from).Seconds()
		if t < lo || t > hi {
			continue
		}
		w.Series = append(w.Series, [3]float64{t, smp.RSS / (1 << 20), smp.HeapInuse / (1 << 20)})
		times = append(times, t)
		switch {
		case smp.At.Before(from):
			if !ready.After(from) {
				first = &samples[i] // no restart in the window: count from just before it
			}
		case smp.At.Before(ready):
			// Between a kill and the restarted apiserver's being ready: a
			// scrape that returned just after the kill was answered by the
			// old one. Not the window's.
		case !smp.At.After(to):
			in = append(in, smp)
			if first == nil {
				first = &samples[i]
			}
		case last == nil:
			last = &samples[i]
			in = append(in, smp)
		}
	}
	w.IdleRSS, w.IdleHeap = Peak(idle, idleFrom)
	w.PeakRSS, w.PeakHeap = Peak(in, from)
	for _, smp := range idle {
		w.IdleLive = max(w.IdleLive, smp.LiveHeap)
	}
	for _, smp := range in {
		w.PeakLive = max(w.PeakLive, smp.LiveHeap)
	}
	var idleAllocRate float64
	if len(idle) > 1 {
		a, b := idle[0], idle[len(idle)-1]
		w.IdleCPURate = (b.CPUSeconds - a.CPUSeconds) / b.At.Sub(a.At).Seconds()
		idleAllocRate = (b.Allocated - a.Allocated) / b.At.Sub(a.At).Seconds()
	}
	// Both counters restart from zero with the apiserver: a window's are
	// read from the first sample after ready.
	if first != nil && last != nil && last.CPUSeconds >= first.CPUSeconds && last.Allocated >= first.Allocated {
		span := last.At.Sub(first.At).Seconds()
		w.CPUSeconds = last.CPUSeconds - first.CPUSeconds
		w.CPUAboveIdle = w.CPUSeconds - w.IdleCPURate*span
		w.Allocated = last.Allocated - first.Allocated
		w.AllocatedAboveIdle = w.Allocated - idleAllocRate*span
	}
	w.SampleGap = longestGap(times, ready.Sub(from).Seconds(), w.Seconds)
	return w
}

// costMarkdown renders the costs as a table, with the ratios of each raw
// kind to the informer that gets its state the same way.
func (r *Report) costMarkdown(b *strings.Builder) {
	if len(r.APIServerCosts) == 0 {
		return
	}
	fmt.Fprintf(b, "\n#### API-server cost per consumer, each alone\n\n"+
		"Each consumer alone on a freshly restarted apiserver with its watch cache of the %d objects ready, /metrics scraped every 100 ms. "+
		"Initial sync: consumer start → synced. Relist: writes elsewhere, apiserver killed → consumer relisted (its watch gets 410; "+
		"the restarted apiserver rebuilds its watch cache too, whoever relists). "+
		"Peaks are above the idle apiserver's peak over the %.0f s before the initial sync (a peak inside a sampling gap is not seen, "+
		"except RSS's when the harness started the apiserver: then it is the kernel's peak, VmHWM); "+
		"heap is heap in use (go_memstats_heap_inuse_bytes: it swings with the GC's timing by up to the live heap), "+
		"live is go_gc_heap_live_bytes (what the last GC kept). "+
		"CPU (process_cpu_seconds_total) and allocated (go_gc_heap_allocs_bytes_total) are over the window (in a relist, from the apiserver's being ready) less the idle rate; "+
		"bytes are the response bodies the consumer read (decompressed) / the bytes it read from its connections (TLS, compressed LIST pages).\n\n",
		r.Objects, r.IdleSeconds)
	b.WriteString("| consumer | idle apiserver RSS / heap / live | initial sync | peak RSS / heap / live above idle | allocated | CPU s | bytes read / on the wire | longest sampling gap | relist | peak RSS / heap / live above idle | allocated | CPU s | bytes read / on the wire | longest sampling gap |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	cell := func(w CostWindow) string {
		t := fmt.Sprintf("%.2f s", w.Seconds)
		if !w.Done {
			t = "**not done** after " + t
		}
		return fmt.Sprintf("%s | %s / %s / %s | %s | %.2f | %.2f / %.2f MiB | %.1f s", t, signedMiB(w.RSSAboveIdle()), signedMiB(w.HeapAboveIdle()),
			signedMiB(w.LiveAboveIdle()), mibF(w.AllocatedAboveIdle), w.CPUAboveIdle, float64(w.BytesRead)/(1<<20), float64(w.WireBytes)/(1<<20), w.SampleGap)
	}
	for _, c := range r.APIServerCosts {
		fmt.Fprintf(b, "| %s | %s / %s / %s | %s | %s |\n", c.Kind, mibF(c.Sync.IdleRSS), mibF(c.Sync.IdleHeap), mibF(c.Sync.IdleLive), cell(c.Sync), cell(c.Relist))
	}
	cost := func(kind string) *APIServerCost {
		for i := range r.APIServerCosts {
			if r.APIServerCosts[i].Kind == kind {
				return &r.APIServerCosts[i]
			}
		}
		return nil
	}
	ratio := func(a, b float64) string {
		if b <= 0 || a < 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f", a/b)
	}
	ratios := func(a, b CostWindow) string {
		return strings.Join([]string{ratio(a.RSSAboveIdle(), b.RSSAboveIdle()), ratio(a.HeapAboveIdle(), b.HeapAboveIdle()),
			ratio(a.LiveAboveIdle(), b.LiveAboveIdle()), ratio(a.AllocatedAboveIdle, b.AllocatedAboveIdle),
			ratio(a.CPUAboveIdle, b.CPUAboveIdle), ratio(float64(a.WireBytes), float64(b.WireBytes))}, " | ")
	}
	var rows []string
	for _, pair := range [][2]string{{KindRaw, KindInformerList}, {KindRawWatchList, KindInformer}} {
		if a, o := cost(pair[0]), cost(pair[1]); a != nil && o != nil {
			rows = append(rows, fmt.Sprintf("| %s / %s | %s | %s |\n", pair[0], pair[1], ratios(a.Sync, o.Sync), ratios(a.Relist, o.Relist)))
		}
	}
	if len(rows) > 0 {
		b.WriteString("\n| ratio | sync: peak RSS above idle | peak heap | peak live heap | allocated | CPU s | bytes on the wire | relist: peak RSS above idle | peak heap | peak live heap | allocated | CPU s | bytes on the wire |\n")
		b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		b.WriteString(strings.Join(rows, ""))
		b.WriteString("\n(– : a side added nothing measurable above idle.)\n")
	}
}

func signedMiB(x float64) string { return fmt.Sprintf("%+.1f MiB", x/(1<<20)) }

// costSVG draws, below the report's charts, the apiserver's heap in use
// during each consumer's initial sync (left) and relist (right), alone.
func (r *Report) costSVG(b *strings.Builder, oy, w, h, pad int) {
	fmt.Fprintf(b, `<g transform="translate(0,%d)">`+"\n", oy)
	for panel, what := range []string{"seconds since the consumer (alone) started", "seconds since the apiserver was killed (consumer alone)"} {
		tmin, tmax := 0.0, 1.0
		var lines []seriesLine
		for _, c := range r.APIServerCosts {
			win := c.Sync
			if panel == 1 {
				win = c.Relist
			}
			l := seriesLine{color: palette[c.Kind], mark: win.Seconds}
			for _, p := range win.Series {
				tmin, tmax = math.Min(tmin, p[0]), math.Max(tmax, p[0])
				l.pts = append(l.pts, [2]float64{p[0], p[2]})
			}
			lines = append(lines, l)
		}
		seriesPanel(b, panel*w, w, h, pad, tmin, tmax, what, "apiserver heap in use (MiB)", lines)
	}
	b.WriteString("</g>\n")
}
