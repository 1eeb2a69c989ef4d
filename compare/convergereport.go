package compare

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
)

// ConvergeRow sums up the runs of one kind at one setting (medians).
type ConvergeRow struct {
	Kind    string
	Setting Setting
	Runs    int
	// All, P50, P90: seconds, medians over the runs; AllRuns every run's.
	All, P50, P90 float64
	AllRuns       []float64
	// Per object, medians: status writes, Event writes, other requests.
	StatusPerObj, EventsPerObj, OtherPerObj float64
	// CPUMsPerObj: this process's CPU per object (ms), median.
	CPUMsPerObj float64
	Throttled   int // 429s, all runs
	Loads       []float64
	Converged   bool // every run
}

// Rows groups the runs by kind and setting, in the order they first ran.
func (r *ConvergeReport) Rows() []ConvergeRow {
	var rows []ConvergeRow
	index := map[string]int{}
	for _, run := range r.Runs {
		id := run.Kind + " " + run.Setting.String()
		i, ok := index[id]
		if !ok {
			i = len(rows)
			index[id] = i
			rows = append(rows, ConvergeRow{Kind: run.Kind, Setting: run.Setting, Converged: true})
		}
		row := &rows[i]
		row.Runs++
		row.AllRuns = append(row.AllRuns, run.AllSeconds)
		row.Throttled += run.Codes[429]
		row.Loads = append(row.Loads, run.Load)
		row.Converged = row.Converged && run.Converged
	}
	for i := range rows {
		row := &rows[i]
		var p50, p90, st, ev, ot, cpu []float64
		for _, run := range r.Runs {
			if run.Kind != row.Kind || run.Setting != row.Setting {
				continue
			}
			n := float64(max(r.Objects, 1))
			p50, p90 = append(p50, run.P50Seconds), append(p90, run.P90Seconds)
			cpu = append(cpu, run.CPUSeconds*1000/n)
			st, ev, ot = append(st, float64(run.StatusWrites())/n), append(ev, float64(run.EventWrites())/n), append(ot, float64(run.OtherRequests())/n)
		}
		row.All, row.P50, row.P90 = median(row.AllRuns), median(p50), median(p90)
		row.StatusPerObj, row.EventsPerObj, row.OtherPerObj = median(st), median(ev), median(ot)
		row.CPUMsPerObj = median(cpu)
	}
	return rows
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// ConvergeRatio is raw's median time to all Processed over the informer's.
type ConvergeRatio struct {
	Raw, Informer Setting
	Ratio         float64
}

// Ratios compares raw with the informer at every setting both ran, and
// rawwatch's defaults with the informer at every setting it ran. The goal
// is a ratio of at most 1.
func (r *ConvergeReport) Ratios() []ConvergeRatio {
	rows := r.Rows()
	var out []ConvergeRatio
	for _, raw := range rows {
		if raw.Kind != KindRaw {
			continue
		}
		for _, inf := range rows {
			if inf.Kind != KindInformer || (!raw.Setting.Defaults && inf.Setting != raw.Setting) || inf.All == 0 {
				continue
			}
			out = append(out, ConvergeRatio{Raw: raw.Setting, Informer: inf.Setting, Ratio: math.Round(raw.All/inf.All*1000) / 1000})
		}
	}
	return out
}

// Markdown is the report as tables.
func (r *ConvergeReport) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Whole-controller convergence: %d creates, %s, %d CPUs, %s.\n\n", r.Objects, r.GoVersion, r.CPUs, r.Date)
	b.WriteString("Setting is QPS/burst/workers/events (the controller's client limits, reconcile workers, and which status writes get an Event: all, warnings (failures only) or none); ")
	b.WriteString("defaults is rawwatch with no flags. Times are seconds from the first create to 50%, 90% and all of the statuses Processed, medians over the runs; ")
	b.WriteString("requests per object are what the controller's transport sent (other: lists, watches and the rest); ")
	b.WriteString("CPU is the harness process's until all Processed (the controller, plus the load generator and the watch, the same for both kinds).\n\n")
	b.WriteString("| kind | setting | runs | all Processed (s) | each run (s) | 50% (s) | 90% (s) | status writes/obj | Event writes/obj | other req/obj | 429s | CPU ms/obj | load at start |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, row := range r.Rows() {
		all := fmt.Sprintf("%.1f", row.All)
		if !row.Converged {
			all += " (did not converge)"
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %.1f | %.1f | %.2f | %.2f | %.3f | %d | %.2f | %s |\n",
			row.Kind, row.Setting, row.Runs, all, joinFloats(row.AllRuns, "%.1f"), row.P50, row.P90,
			row.StatusPerObj, row.EventsPerObj, row.OtherPerObj, row.Throttled, row.CPUMsPerObj, joinFloats(row.Loads, "%.2f"))
	}
	if ratios := r.Ratios(); len(ratios) > 0 {
		b.WriteString("\n| raw at | informer at | raw / informer (goal ≤ 1.0) |\n|---|---|---|\n")
		for _, q := range ratios {
			verdict := "met"
			if q.Ratio > 1 {
				verdict = "missed"
			}
			fmt.Fprintf(&b, "| %s | %s | %.3f (%s) |\n", q.Raw, q.Informer, q.Ratio, verdict)
		}
	}
	return b.String()
}

func joinFloats(v []float64, format string) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf(format, x)
	}
	return strings.Join(s, ", ")
}

// SVG draws the convergence curves: objects Processed over time, one line
// per kind and setting (its median run), raw solid, informer dashed.
func (r *ConvergeReport) SVG() string {
	const w, h, pad = 760, 400, 55
	rows := r.Rows()
	curves := make([][][2]float64, len(rows))
	var tmax float64
	for i, row := range rows {
		// The run closest to the row's median time.
		best := math.Inf(1)
		for _, run := range r.Runs {
			if run.Kind == row.Kind && run.Setting == row.Setting && math.Abs(run.AllSeconds-row.All) < best {
				best, curves[i] = math.Abs(run.AllSeconds-row.All), run.Curve
			}
		}
		for _, p := range curves[i] {
			tmax = math.Max(tmax, p[0])
		}
	}
	tmax = math.Max(tmax, 1)
	n := float64(max(r.Objects, 1))
	x := func(t float64) float64 { return pad + t/tmax*(w-2*pad) }
	y := func(v float64) float64 { return h - pad - v/n*(h-2*pad) }
	var b strings.Builder
	legendH := 16 * len(rows)
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", w, h+legendH+10)
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>` + "\n")
	axes(&b, 0, w, h, pad, "seconds since the first create", "objects Processed")
	for i := 0; i <= 4; i++ {
		v := n * float64(i) / 4
		t := tmax * float64(i) / 4
		fmt.Fprintf(&b, `<text x="%d" y="%.0f" text-anchor="end">%.0f</text><line x1="%d" x2="%d" y1="%.0f" y2="%.0f" stroke="#eee"/>`+"\n", pad-4, y(v)+4, v, pad, w-pad, y(v), y(v))
		fmt.Fprintf(&b, `<text x="%.0f" y="%d" text-anchor="middle">%.0f</text>`+"\n", x(t), h-pad+14, t)
	}
	colors := []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"}
	settingColor := map[string]string{}
	for i, row := range rows {
		key := row.Setting.String()
		if _, ok := settingColor[key]; !ok {
			settingColor[key] = colors[len(settingColor)%len(colors)]
		}
		dash := map[string]string{KindInformer: ` stroke-dasharray="6,3"`, KindInformerStripped: ` stroke-dasharray="2,2"`,
			KindControllerRuntime: ` stroke-dasharray="8,2,2,2"`}[row.Kind]
		var pts []string
		for _, p := range curves[i] {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(p[0]), y(p[1])))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5"%s points="%s"/>`+"\n", settingColor[key], dash, strings.Join(pts, " "))
		ly := h + 4 + 16*i
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="2"%s/><text x="%d" y="%d">%s %s (%.1f s)</text>`+"\n",
			pad, pad+30, ly+6, ly+6, settingColor[key], dash, pad+36, ly+10, row.Kind, key, row.All)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// Write puts convergence.md, convergence.json and convergence.svg in dir.
func (r *ConvergeReport) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return writeReport(dir, "convergence", r, r.Markdown(), r.SVG())
}

// ReadConvergeReport reads a convergence.json back.
func ReadConvergeReport(path string) (*ConvergeReport, error) {
	return readReport[ConvergeReport](path)
}
