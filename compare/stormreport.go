package compare

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// stormTargets checks issue 11's storm goals: each raw kind against the
// informer that gets its state the same way (raw and informer-list LIST,
// raw-watchlist and informer use WatchList).
func stormTargets(r *StormReport) []Target {
	var out []Target
	mode := func(kind string) *StormMode {
		for i := range r.Modes {
			if r.Modes[i].Kind == kind {
				return &r.Modes[i]
			}
		}
		return nil
	}
	mibf := func(x float64) string { return fmt.Sprintf("%.1f MiB", x/(1<<20)) }
	for _, g := range []struct {
		raw, other string
		limit      float64
	}{{KindRaw, KindInformerList, 0.5}, {KindRawWatchList, KindInformer, 1.0}} {
		raw, other := mode(g.raw), mode(g.other)
		if raw == nil || other == nil {
			continue
		}
		// The baseline's figures, if there is one.
		var b StormMode
		if r.Baseline != nil {
			b = *r.Baseline
		}
		for _, v := range []struct {
			name         string
			rv, ov, base float64
		}{
			{"storm apiserver RSS, kernel's peak", raw.HighWaterRSS, other.HighWaterRSS, b.HighWaterRSS},
			{"storm peak apiserver RSS", raw.PeakRSS, other.PeakRSS, b.PeakRSS},
			{"storm peak apiserver heap", raw.PeakHeap, other.PeakHeap, b.PeakHeap},
			{"storm peak apiserver live heap", raw.PeakLive, other.PeakLive, b.PeakLive},
		} {
			if v.ov == 0 {
				continue
			}
			ratio := v.rv / v.ov
			t := Target{Name: v.name, Raw: raw.Kind + " " + mibf(v.rv), Other: other.Kind + " " + mibf(v.ov),
				Ratio: math.Round(ratio*1000) / 1000, Limit: fmt.Sprintf("≤ %.1f×", g.limit), Met: ratio <= g.limit}
			// A restart alone costs the baseline's peak, whoever relists:
			// what the clients add on top of it, compared the same way.
			if v.base > 0 && v.ov > v.base {
				t.AboveBaseline = math.Round((v.rv-v.base)/(v.ov-v.base)*1000) / 1000
			}
			if !raw.Correct || !other.Correct {
				t.Met, t.Note = false, "a mode failed its correctness check"
			}
			out = append(out, t)
		}
	}
	return out
}

// Markdown renders the storm report.
func (r *StormReport) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "### Relist storm, %s\n\n", r.Date)
	fmt.Fprintf(&b, "%d clients of one kind in one process (each with its own cache, client, connections and rate limiter: %g QPS, burst %d), "+
		"%d objects of %d payload bytes; the apiserver is killed and restarted once every client has synced; apiserver sampled every %.0f ms "+
		"(peaks are of the samples taken: a peak inside a sampling gap is not seen, except the kernel's peak RSS (VmHWM), read once all have relisted; heap in use swings with the GC's timing, "+
		"the live heap is what the last GC kept; allocated counts from the restart). "+
		"Bytes are the clients' response bodies (decompressed) / what they read from their connections. %s, %d CPUs.\n\n",
		r.Clients, r.ClientQPS, r.ClientBurst, r.Objects, r.Payload, r.IntervalMs, r.GoVersion, r.CPUs)
	b.WriteString("| mode | longest sampling gap in the storm | apiserver peak RSS: the kernel's / sampled | peak heap in use | peak live heap | allocated | most WATCHes at once | restart → ready | restart → all relisted | relisted | initial sync of all | requests (LIST starts / pages / WatchLists / WATCHes / one-item probes / all) | bytes read / on the wire | 429s seen by the clients / counted by the apiserver | failed (no response) | consumer process max RSS | correct |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	row := func(m StormMode) {
		verdict := "yes"
		if !m.Correct {
			verdict = "**no**: " + m.Incorrect
		}
		if m.Kind == "none" {
			fmt.Fprintf(&b, "| no clients (baseline: a restart and one one-item LIST) | %.1f s | %s / %s | %s | %s | %s | %.0f | %.1f s | – | – | – | – | – | – / %.0f | – | – | – |\n",
				m.sampleGap(), mibF(m.HighWaterRSS), mibF(m.PeakRSS), mibF(m.PeakHeap), mibF(m.PeakLive), mibF(m.Allocated), m.PeakWatches, m.RestartSeconds, m.ServerThrottled)
			return
		}
		q := m.Requests
		fmt.Fprintf(&b, "| %s | %.1f s | %s / %s | %s | %s | %s | %.0f | %.1f s | %.1f s | %d/%d | %.1f s | %d / %d / %d / %d / %d / %d | %s / %s | %d / %.0f | %d | %s | %s |\n",
			m.Kind, m.sampleGap(), mibF(m.HighWaterRSS), mibF(m.PeakRSS), mibF(m.PeakHeap), mibF(m.PeakLive), mibF(m.Allocated), m.PeakWatches, m.RestartSeconds, m.RelistSeconds, m.RelistedClients, len(m.Clients),
			m.InitialSyncSeconds, q.ListStarts, q.ListPages, q.WatchLists, q.Watches, q.Probes, q.Total, mibF(float64(q.Read)), mibF(float64(q.Wire)), q.Throttled, m.ServerThrottled,
			q.Failed, mibF(float64(m.ConsumerMaxRSS)), verdict)
	}
	if r.Baseline != nil {
		row(*r.Baseline)
	}
	for _, m := range r.Modes {
		row(m)
	}
	b.WriteString("\nFailed apiserver scrapes (each mode's initial sync included):")
	for _, m := range r.Modes {
		var kinds []string
		for k, v := range m.ScrapeErrs {
			kinds = append(kinds, fmt.Sprintf("%d %s", v, k))
		}
		slices.Sort(kinds)
		if len(kinds) == 0 {
			kinds = []string{"none"}
		}
		fmt.Fprintf(&b, " %s: %s;", m.Kind, strings.Join(kinds, ", "))
	}
	b.WriteString("\n")
	if len(r.Targets) > 0 {
		b.WriteString("\n| target | raw | compared with | ratio | goal | met | ratio of what each adds to the no-client restart's peak |\n|---|---|---|---|---|---|---|\n")
		for _, t := range r.Targets {
			met := t.metCell("**no**: ")
			above := "–"
			if t.AboveBaseline != 0 {
				above = fmt.Sprintf("%.3f", t.AboveBaseline)
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %.3f | %s | %s | %s |\n", t.Name, t.Raw, t.Other, t.Ratio, t.Limit, met, above)
		}
	}
	return b.String()
}

// sampleGap is the longest time without a successful apiserver sample
// between the kill and the last relist (the restart itself included): a
// scrape times out when the apiserver or the machine is too busy to answer,
// and a peak in a gap is not seen.
func (m StormMode) sampleGap() float64 {
	times := make([]float64, len(m.Series))
	for i, p := range m.Series {
		times[i] = p[0]
	}
	return longestGap(times, 0, m.RelistSeconds)
}

func mibF(x float64) string {
	if x == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f MiB", x/(1<<20))
}

// SVG draws the apiserver's RSS (left) and heap in use (right) over time,
// one line per mode, time 0 being the kill; a dashed mark at each mode's
// last relist.
func (r *StormReport) SVG() string {
	const w, h, pad = 520, 340, 50
	modes := r.Modes
	if r.Baseline != nil {
		modes = append([]StormMode{*r.Baseline}, modes...)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", 2*w, h+40)
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>` + "\n")
	tmin, tmax := 0.0, 0.0
	for _, m := range modes {
		for _, p := range m.Series {
			tmin, tmax = math.Min(tmin, p[0]), math.Max(tmax, p[0])
		}
	}
	for panel, what := range []string{"apiserver RSS (MiB)", "apiserver heap in use (MiB)"} {
		var lines []seriesLine
		for _, m := range modes {
			l := seriesLine{color: stormColor(m.Kind), mark: math.NaN()}
			for _, p := range m.Series {
				l.pts = append(l.pts, [2]float64{p[0], p[1+panel]})
			}
			if m.Kind != "none" {
				l.mark = m.RelistSeconds
			}
			lines = append(lines, l)
		}
		seriesPanel(&b, panel*w, w, h, pad, tmin, tmax, "seconds since the apiserver was killed", what, lines)
	}
	for i, m := range modes {
		label := m.Kind
		if label == "none" {
			label = "no clients"
		}
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n",
			pad+i*150, h+14, stormColor(m.Kind), pad+i*150+16, h+24, label)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func stormColor(kind string) string {
	if c, ok := palette[kind]; ok {
		return c
	}
	return "#999"
}

// Write stores the report as storm.md, storm.json and storm.svg in dir.
func (r *StormReport) Write(dir string) error {
	return writeReport(dir, "storm", r, r.Markdown(), r.SVG())
}

// ReadStormReport reads a storm.json back (to render it again).
func ReadStormReport(path string) (*StormReport, error) {
	r, err := readReport[StormReport](path)
	if err != nil {
		return nil, err
	}
	r.Targets = stormTargets(r)
	return r, nil
}
