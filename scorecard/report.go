package scorecard

import (
	"fmt"
	"html"
	"math"
	"strings"
	"time"
)

func (r *Report) row(fault, kind string) *Row {
	for i := range r.Rows {
		if r.Rows[i].Fault == fault && r.Rows[i].Kind == kind {
			return &r.Rows[i]
		}
	}
	return nil
}

// Markdown is the scorecard as a page; svg is the chart's file name.
func (r *Report) Markdown(svg string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Run %s (`%s`), %s in all. Each client alone, on a namespace of its own holding the same %d objects, "+
		"through the fault proxy to a local kube-apiserver with its watch cache on; each fault lasts %v while a writer, straight to the apiserver, "+
		"creates one object, updates one and deletes one a second (%d of each); then the fault ends and the client has %v to show a store equal to a fresh LIST.\n\n",
		r.Date, r.Command, r.Took.Round(time.Second), r.Objects, r.Duration, r.Writes, r.Recover)
	fmt.Fprintf(&b, "Verdicts, worst first: **lost data**: a deletion never reached the handler although the store converged, or the store never converged although the client was following the server again "+
		"(its handler heard the canary, one update made right after the fault); **stormed**: more than %d LISTs, WATCHes and WatchLists in one minute of the fault "+
		"(a LIST of many pages counts once; a fault shorter than a minute: all its requests, not scaled up); **stalled**: no store equal to the server's within %v of the fault's end, "+
		"and the canary never heard; **held**: none of these. Requests are counted on the client's own transport (a refused connection counts). "+
		"Each cell: verdict, LISTs, WATCHes and WatchLists in the fault's busiest minute (the whole fault, if shorter), time from the fault's end to a store equal to the server's.\n\n", StormPerMinute, r.Recover)
	b.WriteString("| fault |")
	for _, k := range r.Kinds {
		fmt.Fprintf(&b, " %s |", k)
	}
	b.WriteString("\n|---|")
	for range r.Kinds {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, f := range r.Faults {
		fmt.Fprintf(&b, "| [%s](#%s) |", f, f)
		for _, k := range r.Kinds {
			row := r.row(f, k)
			switch {
			case row == nil:
				b.WriteString(" – |")
			case row.Err != "":
				b.WriteString(" not measured |")
			default:
				fmt.Fprintf(&b, " **%s** %s, %s |", row.Verdict, count(float64(row.Measure.Busiest)), converged(row.Measure))
			}
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "\n![LISTs, WATCHes and WatchLists in the busiest minute of each fault, per client](%s)\n\n", svg)

	b.WriteString("### The numbers\n\n")
	b.WriteString("Requests while the fault lasted (LIST first pages / further pages / WATCHes / WatchLists), their average a minute, their busiest minute; " +
		"the store at the end against the server (missing / extra / at another resourceVersion); deletions made during the fault, of objects still gone, never delivered; " +
		"events heard after the fault, and how long the canary (one update right after the fault, to an object nothing else touches) took from its write to the handler; " +
		"the most the client's heap in use grew during the fault over its value at the fault's start, and the most keys waiting in its workqueue then (sampled every 250 ms); " +
		"for a fault that began before the client started, how long after its start it made its initial sync; lines the client logged from the fault's start to its stop.\n\n")
	b.WriteString("| fault | client | verdict | LISTs / pages / WATCHes / WatchLists | a minute | busiest minute | converged | missing / extra / stale | never delivered | events after (canary heard in) | heap growth / most queued | initial sync | log lines | why |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, f := range r.Faults {
		for _, k := range r.Kinds {
			row := r.row(f, k)
			if row == nil {
				continue
			}
			if row.Err != "" {
				fmt.Fprintf(&b, "| %s | %s | not measured | | | | | | | | | | | %s |\n", f, k, oneLine(row.Err))
				continue
			}
			m := row.Measure
			canary := "never"
			if m.HeardCanary {
				// The handler may hear it before the writer hears its answer.
				canary = fmt.Sprintf("%.1f s", max(m.CanaryIn, 0).Seconds())
			}
			sync := "–"
			switch {
			case m.Initial && m.Synced:
				sync = fmt.Sprintf("%.1f s", m.SyncedIn.Seconds())
			case m.Initial:
				sync = "never"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %d / %d / %d / %d | %s | %d | %s | %d / %d / %d | %d | %d (%s) | %+.1f MiB / %d | %s | %d | %s |\n", f, k, row.Verdict,
				m.Lists, m.Pages, m.Watches, m.WatchLists, count(m.Rate()), m.Busiest, converged(m), m.Missing, m.Extra, m.Stale,
				m.Undelivered, m.EventsAfter, canary, float64(m.HeapGrowth)/(1<<20), m.MostQueued, sync, row.Logged, oneLine(row.Why))
		}
	}

	b.WriteString("\n### The faults\n")
	for _, name := range r.Faults {
		f, ok := faultNamed(name)
		if !ok {
			continue
		}
		fmt.Fprintf(&b, "\n#### %s\n\n*%s.* %s\n", f.Name, f.What, f.Story)
		if len(f.Upstream) > 0 {
			var links []string
			for _, u := range f.Upstream {
				links = append(links, fmt.Sprintf("[%s](%s)", upstreamName(u), u))
			}
			fmt.Fprintf(&b, "Upstream: %s.\n", strings.Join(links, ", "))
		}
		b.WriteString("\nWhat each client logged (commonest lines, digits as #):\n\n")
		for _, k := range r.Kinds {
			row := r.row(name, k)
			if row == nil || row.Err != "" {
				continue
			}
			if len(row.LogSample) == 0 {
				fmt.Fprintf(&b, "- %s: nothing\n", k)
				continue
			}
			fmt.Fprintf(&b, "- %s (%d lines): `%s`\n", k, row.Logged, strings.Join(row.LogSample, "` · `"))
		}
	}
	return b.String()
}

// upstreamName is "kubernetes/kubernetes#140890" for a GitHub issue or pull URL.
func upstreamName(u string) string {
	parts := strings.Split(strings.TrimPrefix(u, "https://github.com/"), "/")
	if len(parts) == 4 {
		return parts[0] + "/" + parts[1] + "#" + parts[3]
	}
	return u
}

func converged(m Measure) string {
	if !m.Converged {
		return fmt.Sprintf("not in %s", m.ConvergedIn.Round(time.Second))
	}
	return fmt.Sprintf("%.1f s", m.ConvergedIn.Seconds())
}

// count is n rounded, with thousands separated.
func count(n float64) string {
	s := fmt.Sprintf("%.0f", n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func oneLine(s string) string {
	s = strings.ReplaceAll(strings.ReplaceAll(s, "\n", " "), "|", "\\|")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

var colors = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2"}

// SVG draws, per fault, one bar per client: its LISTs, WATCHes and
// WatchLists in the fault's busiest minute (the verdict's measure), on a log
// scale, with the storm bound as a line.
func (r *Report) SVG() string {
	const pad, h, barW, gap = 60, 260, 12, 18
	groupW := len(r.Kinds)*barW + gap
	w := pad + len(r.Faults)*groupW + 20
	top := 1e6
	for _, row := range r.Rows {
		top = math.Max(top, float64(row.Measure.Busiest))
	}
	decades := math.Ceil(math.Log10(top))
	y := func(v float64) float64 { return float64(h) - math.Log10(1+v)/decades*float64(h-20) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="10">`+"\n", w, h+110)
	fmt.Fprintf(&b, `<text x="%d" y="12" font-size="12">LISTs, WATCHes and WatchLists in each fault's busiest minute (log scale; dashed: the storm bound, %d)</text>`+"\n", pad, StormPerMinute)
	for d := 0.0; d <= decades; d++ {
		v := math.Pow(10, d)
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n",
			pad, w-20, y(v), y(v), pad-4, y(v)+3, count(v))
	}
	fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#000" stroke-dasharray="4 3"/>`+"\n", pad, w-20, y(StormPerMinute), y(StormPerMinute))
	for i, f := range r.Faults {
		x0 := pad + i*groupW + gap/2
		for j, k := range r.Kinds {
			row := r.row(f, k)
			if row == nil || row.Err != "" {
				continue
			}
			v := float64(row.Measure.Busiest)
			fmt.Fprintf(&b, `<rect x="%d" y="%.1f" width="%d" height="%.1f" fill="%s"><title>%s, %s: %s in the busiest minute, %s</title></rect>`+"\n",
				x0+j*barW, y(v), barW-2, float64(h)-y(v), colors[j%len(colors)], html.EscapeString(f), html.EscapeString(k), count(v), row.Verdict)
		}
		fmt.Fprintf(&b, `<text transform="translate(%d,%d) rotate(40)">%s</text>`+"\n", x0, h+12, html.EscapeString(f))
	}
	for j, k := range r.Kinds {
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="10" height="10" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n",
			pad+j*130, h+90, colors[j%len(colors)], pad+j*130+14, h+99, html.EscapeString(k))
	}
	b.WriteString("</svg>\n")
	return b.String()
}
