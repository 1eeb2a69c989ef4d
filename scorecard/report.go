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

// pageIntro is the page's head: what the scorecard is and how to run it.
const pageIntro = `# The fault scorecard

What does each client do when the network or the server misbehaves? ` + "`make scorecard`" + ` answers with one table:
every named fault against every client, through the fault proxy (package ` + "`faultproxy`" + `) to a local
kube-apiserver with its watch cache on, on the same objects and the same writes (package ` + "`scorecard`" + `,
` + "`cmd/scorecard`" + `). This page is that command's output, every number from one run (` + "`scorecard.json`" + ` beside it;
a test holds the page to it).

The clients are the consumers of the comparison harness (` + "`compare.NewConsumer`" + `) that keep a cache: ` + "`raw`" + ` (this
project's watcher, store and queue: a paginated LIST, then WATCH), ` + "`raw-watchlist`" + ` (the same with WatchList),
` + "`informer`" + ` (client-go's SharedIndexInformer and workqueue at client-go's defaults: WatchList on), ` + "`informer-list`" + `
(the same with client-go's WatchListClient gate off) and ` + "`controller-runtime`" + ` (a manager's cache and a controller at its
defaults); ` + "`informer-stripped`" + ` (the informer dropping managedFields: the same requests) runs when asked for.

` + "```" + `
make scorecard                                      # every fault, every client; out/scorecard, and this page
make scorecard SCORECARD_ARGS="--faults garble,refuse --clients raw,informer"   # a part (this page untouched)
bin/scorecard --from out/scorecard/scorecard.json --out out/scorecard           # judge and render again
make demo-garble                                    # one fault, narrated, against the controller
` + "```" + `

Each run writes, per fault and client, ` + "`FAULT/KIND/client.log`" + ` (what the client logged), ` + "`events.txt`" + ` (every call of
its handler), ` + "`requests.jsonl`" + ` (every request it sent: when it began and ended, its answer) and ` + "`result.json`" + `.
`

// Markdown is the scorecard as a page; svg is the chart's file name.
func (r *Report) Markdown(svg string) string {
	var b strings.Builder
	b.WriteString(pageIntro)
	fmt.Fprintf(&b, "\n## How a cell is measured\n\n"+
		"For each fault and client: a namespace of its own holding the same objects (twice the fault's seconds and ten); the client starts in a "+
		"process of its own, with client-side limits of 200/400 QPS so that only its own backoff spaces its requests, syncs and opens a WATCH "+
		"through its own proxy. The fault begins, and while it lasts (%v%s) a writer, straight to the apiserver, creates one object, updates one and "+
		"deletes one a second, each write retried every 200 ms until the fault ends. Then the writer updates one object nothing else touches (the "+
		"canary), and the client has %v to recover: its store equal to a fresh LIST (every key at the server's resourceVersion) and its handler at "+
		"the canary's resourceVersion. `initial-flap-cut` begins before the client starts; `slow-consumer` makes the client's handler block; "+
		"%s. After its recovery the client is watched %v more: what it does then counts (its requests, a crash), and it must still answer.\n\n"+
		"Every request the client sends is counted on its own transport (a refused connection counts) from the fault's start to %v after "+
		"the end of its recovery: LISTs, further pages, WATCHes in any spelling, WatchLists, GETs and discovery. A request sent after one that failed (an error "+
		"status, no answer, a stream cut or given up, an ERROR event) is a retry, and waited from that failure to its start, unless it is of "+
		"another sort and sent within %v (the next step: a LIST after a WatchList that failed, a relist after a 410). A request of the same "+
		"sort as the one sent before it, which did not fail, is that request asked again, and waited from that one's start (a WatchList asked "+
		"again whenever it ends, a burst of LISTs): each such wait is judged as a retry's, so a burst storms however calm the retries around it. "+
		"Any other request is chained (a LIST's WATCH); a LIST's further pages are the LIST's.\n",
		r.Duration, longFaults(r), r.Recover, togetherFaults(r), Grace, Grace, FallbackGap)

	fmt.Fprintf(&b, "\n## The verdicts\n\nWorst first:\n\n"+
		"- **crashed**: the client's process ended on its own, before it was told to stop (after its recovery too).\n"+
		"- **lost data**: the client follows the server again (its store converged, or its handler heard the canary) and yet its store, or "+
		"its handler's last word on some key, differs from the server: a create, update or delete never heard, heard at another "+
		"resourceVersion, a deleted key added again (a ghost), an object that vanished or came back in a restore.\n"+
		"- **stormed**: its requests left the envelope. The n-th shortest wait before a retry must be at least %v doubled every %d retries, "+
		"up to %v (the first %d are free; a retry that waited its Retry-After is as asked); and it may chain %d requests per retry and %d "+
		"more. Any backoff that doubles from 0.8 s (client-go's reflector, the raw watcher) stays inside; a fixed-interval retry leaves it "+
		"within a few retries. A slow machine makes waits longer, never a calm client stormier.\n"+
		"- **stalled**: not following again within the recovery window, or hung: its process there and answering nothing for %v.\n"+
		"- **held**: none of these.\n\n"+
		"Times are reported, not judged.\n", EnvelopeBase, RetriesPerDoubling, EnvelopeCap, FreeRetries, ChainsPerRetry, ChainSlack, AnswerTimeout)

	fmt.Fprintf(&b, "\n## The run\n\n%s: `%s`, %s for %d faults × %d clients%s.\n\n",
		r.Date, r.Command, r.Took.Round(time.Second), len(r.Faults), len(r.Kinds), commit(r))
	b.WriteString("Each cell: verdict, requests in the busiest minute from the fault's start to the end of the grace after recovery, time from the fault's end " +
		"to a store equal to the server's.\n\n")
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
				fmt.Fprintf(&b, " **%s** %s, %s |", row.Verdict, thousands(float64(row.Measure.Busiest)), converged(row.Measure))
			}
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "\n![requests in the busiest minute of each cell, per client, and the verdicts that are not held](%s)\n", svg)
	b.WriteString(rawAbove(r))

	b.WriteString("\n## The numbers\n\n" +
		"Requests from the fault's start to the end of the grace after recovery (LISTs / further pages / WATCHes / WatchLists / others) and their busiest minute; " +
		"retries (as their Retry-After asked among them), chained requests, the three shortest waits before a retry; the time from the fault's end " +
		"to an equal store; the store at the end against the server (missing / extra / stale); the handler's last word against the server " +
		"(never heard / stale / deletion never heard, ghosts among them); events heard after the fault, and the canary's time from its write " +
		"to the handler; the growth of the client's heap during the fault and the most keys in its workqueue; the initial sync of a fault " +
		"that began first; lines the client logged.\n\n")
	b.WriteString("| fault | client | verdict | L / P / W / WL / O | busiest | retries (as asked) / chained | shortest waits | converged | store m / e / s | handler n / s / e (ghosts) | events after (canary) | heap / queued | initial sync | log | why |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, f := range r.Faults {
		for _, k := range r.Kinds {
			row := r.row(f, k)
			if row == nil {
				continue
			}
			if row.Err != "" {
				fmt.Fprintf(&b, "| %s | %s | not measured | | | | | | | | | | | | %s |\n", f, k, oneLine(row.Err))
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
			fmt.Fprintf(&b, "| %s | %s | %s | %d / %d / %d / %d / %d | %d | %d (%d) / %d | %s | %s | %d / %d / %d | %d / %d / %d (%d) | %d (%s) | %+.1f MiB / %d | %s | %d | %s |\n",
				f, k, row.Verdict, m.Lists, m.Pages, m.Watches, m.WatchLists, m.Others, m.Busiest, m.Retries(), m.AsAsked, m.Chained,
				shortest(m.Waits), converged(m), m.Missing, m.Extra, m.Stale, m.NotHeard, m.HeardStale, m.HeardExtra, m.Ghosts,
				m.EventsAfter, canary, float64(m.HeapGrowth)/(1<<20), m.MostQueued, sync, row.Logged, oneLine(row.Why))
		}
	}

	b.WriteString("\n## The faults\n\nWhat each client logged in each cell, its commonest lines with their counts (digits as #), is its row's `LogSample` in [scorecard.json](scorecard.json).\n")
	for _, name := range r.Faults {
		f, ok := faultNamed(name)
		if !ok {
			continue
		}
		fmt.Fprintf(&b, "\n### %s\n\n*%s.* %s\n", f.Name, f.What, f.Story)
		for _, rec := range []struct {
			files []string
			what  string
		}{{f.Recorded, "The proxy answers as kube-apiserver was recorded answering"}, {f.Contrast, "Recorded from kube-apiserver, not replayed"}} {
			if len(rec.files) == 0 {
				continue
			}
			var links []string
			for _, file := range rec.files {
				links = append(links, fmt.Sprintf("[%s](../testdata/wire/%s)", file, file))
			}
			fmt.Fprintf(&b, "%s: %s.\n", rec.what, strings.Join(links, ", "))
		}
		if len(f.Upstream) > 0 {
			var links []string
			for _, u := range f.Upstream {
				links = append(links, fmt.Sprintf("[%s](%s)", upstreamName(u), u))
			}
			fmt.Fprintf(&b, "Upstream: %s.\n", strings.Join(links, ", "))
		}
		if f.RawRequests != "" {
			fmt.Fprintf(&b, "\nRaw's requests: %s\n", f.RawRequests)
		}
	}
	return b.String()
}

// rawAbove names the cells where a raw client sent more requests in its
// busiest minute than an anchor that held (a client that stalled sent
// nothing to compare with), and says how to read them.
func rawAbove(r *Report) string {
	var lines []string
	for _, f := range r.Faults {
		var parts []string
		for _, k := range r.Kinds {
			raw := r.row(f, k)
			if !isRaw(k) || raw == nil || raw.Err != "" {
				continue
			}
			var below []string
			for _, a := range r.Kinds {
				if anchor := r.row(f, a); !isRaw(a) && anchor != nil && anchor.Err == "" && anchor.Verdict == Held &&
					anchor.Measure.Busiest < raw.Measure.Busiest {
					below = append(below, fmt.Sprintf("%s %d", a, anchor.Measure.Busiest))
				}
			}
			if len(below) > 0 {
				parts = append(parts, fmt.Sprintf("%s %d (%s)", k, raw.Measure.Busiest, strings.Join(below, ", ")))
			}
		}
		if len(parts) > 0 {
			lines = append(lines, fmt.Sprintf("- [%s](#%s): %s\n", f, f, strings.Join(parts, "; ")))
		}
	}
	var b strings.Builder
	b.WriteString("\nA raw client's requests beside client-go's: raw lists then watches, as informer-list does; raw-watchlist, informer and " +
		"controller-runtime begin with a WatchList, one request where a LIST and its WATCH are two. Raw resumes a cut stream from its " +
		"resourceVersion (a WATCH) where client-go relists after a watch that ends in an error. Both back off from 0.8 to 1.6 s, the " +
		"range doubling at each retry, so a fault of " + r.Duration.String() + " holds a retry more or less as the draws fall. ")
	if len(lines) == 0 {
		b.WriteString("In this run no raw client sent more requests in its busiest minute than an anchor that held.\n")
		return b.String()
	}
	b.WriteString("The cells where a raw client sent more requests in its busiest minute than an anchor that held (where raw's design " +
		"adds requests, the fault's section says how):\n\n")
	for _, l := range lines {
		b.WriteString(l)
	}
	return b.String()
}

// isRaw: the kind is this project's watcher (raw, raw-watchlist, ...), not
// an anchor.
func isRaw(kind string) bool { return strings.HasPrefix(kind, "raw") }

// longFaults names the faults of r that lasted other than r.Duration (a
// report from before Lasted: as the code's faults last).
func longFaults(r *Report) string {
	var parts []string
	for _, name := range r.Faults {
		d, ok := r.Lasted[name]
		if r.Lasted == nil {
			f, _ := faultNamed(name)
			d, ok = f.Duration, f.Duration > 0
		}
		if ok {
			parts = append(parts, fmt.Sprintf("%s %v", name, d))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "; " + strings.Join(parts, ", ")
}

// togetherFaults says which faults' clients ran side by side (the report's
// SideBySide) and which one after the other.
func togetherFaults(r *Report) string {
	if len(r.SideBySide) == 0 {
		return "each client runs alone"
	}
	side := map[string]bool{}
	for _, name := range r.SideBySide {
		side[name] = true
	}
	var alone []string
	for _, name := range r.Faults {
		if !side[name] {
			alone = append(alone, "`"+name+"`")
		}
	}
	s := "the clients of a fault meet it side by side, each through its own proxy (a neighbour adds load, as the machine's " +
		"other work does, and none of its requests: each client's are counted on its own transport)"
	if len(alone) > 0 {
		s += ", but in " + strings.Join(alone, ", ") + " (which act on the apiserver or etcd that every client reaches) each client runs alone"
	}
	return s
}

func commit(r *Report) string {
	if r.Commit == "" {
		return ""
	}
	return ", commit " + r.Commit
}

// shortest is the three shortest waits, in seconds.
func shortest(waits []time.Duration) string {
	if len(waits) == 0 {
		return "–"
	}
	var parts []string
	for _, w := range waits[:min(3, len(waits))] {
		parts = append(parts, fmt.Sprintf("%.1f", w.Seconds()))
	}
	return strings.Join(parts, ", ") + " s"
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

// thousands is n rounded, with thousands separated.
func thousands(n float64) string {
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

var colors = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"}

// marks are drawn above the bar of a cell whose verdict is not held.
var marks = map[string]string{Crashed: "✕", LostData: "!", Stormed: "▲", Stalled: "‖"}

// SVG draws, per fault, one bar per client: its requests in the busiest
// minute from the fault's start to the end of the grace after its recovery, on a log
// scale, with a mark above each cell that did not hold.
func (r *Report) SVG() string {
	const pad, h, barW, gap = 60, 260, 12, 18
	groupW := len(r.Kinds)*barW + gap
	w := max(pad+len(r.Faults)*groupW+20, pad+len(r.Kinds)*130+20)
	top := 1e4
	for _, row := range r.Rows {
		top = math.Max(top, float64(row.Measure.Busiest))
	}
	decades := math.Ceil(math.Log10(top))
	y := func(v float64) float64 { return float64(h) - math.Log10(1+v)/decades*float64(h-30) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="10">`+"\n", w, h+130)
	fmt.Fprintf(&b, `<text x="%d" y="12" font-size="12">Requests in the busiest minute, from the fault's start to the grace's end after recovery (log scale)</text>`+"\n", pad)
	for d := 0.0; d <= decades; d++ {
		v := math.Pow(10, d)
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n",
			pad, w-20, y(v), y(v), pad-4, y(v)+3, thousands(v))
	}
	for i, f := range r.Faults {
		x0 := pad + i*groupW + gap/2
		for j, k := range r.Kinds {
			row := r.row(f, k)
			if row == nil || row.Err != "" {
				continue
			}
			v := float64(row.Measure.Busiest)
			fmt.Fprintf(&b, `<rect x="%d" y="%.1f" width="%d" height="%.1f" fill="%s"><title>%s, %s: %s in the busiest minute, %s</title></rect>`+"\n",
				x0+j*barW, y(v), barW-2, float64(h)-y(v), colors[j%len(colors)], html.EscapeString(f), html.EscapeString(k), thousands(v), row.Verdict)
			if mark, ok := marks[row.Verdict]; ok {
				fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="middle" font-size="11">%s</text>`+"\n", x0+j*barW+barW/2-1, y(v)-3, mark)
			}
		}
		fmt.Fprintf(&b, `<text transform="translate(%d,%d) rotate(40)">%s</text>`+"\n", x0, h+12, html.EscapeString(f))
	}
	for j, k := range r.Kinds {
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="10" height="10" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n",
			pad+j*130, h+90, colors[j%len(colors)], pad+j*130+14, h+99, html.EscapeString(k))
	}
	var legend []string
	for _, v := range Verdicts {
		if mark, ok := marks[v]; ok {
			legend = append(legend, mark+" "+v)
		}
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d">above a bar: %s</text>`+"\n", pad, h+120, html.EscapeString(strings.Join(legend, ", ")))
	b.WriteString("</svg>\n")
	return b.String()
}
