package compare

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

var palette = map[string]string{
	KindRaw: "#1f77b4", KindRawWatchList: "#17becf", KindInformer: "#d62728", KindInformerList: "#ff7f0e", KindBare: "#2ca02c",
	KindInformerStripped: "#9467bd", KindControllerRuntime: "#8c564b",
}

// SVG draws two charts side by side: the delivery-latency CDF of each
// consumer (log scale), and each consumer's heap in use over the run, with
// the phases marked.
func (r *Report) SVG() string {
	const w, h, pad = 520, 340, 50
	var b strings.Builder
	height := h + 40
	if len(r.APIServerCosts) > 0 {
		height += h + 40
	}
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", 2*w, height)
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>` + "\n")

	// Left: latency CDF.
	// Latencies below 0.1 ms (many events arrive before the writer has its
	// response) are drawn at 0.1 ms.
	lo, hi := -1.0, 0.0
	for _, c := range r.Consumers {
		for _, l := range c.latencies {
			hi = math.Max(hi, l)
		}
	}
	if hi > 0 {
		hi = math.Max(math.Ceil(math.Log10(hi)), lo+1)
		if hi == lo {
			hi++
		}
		x := func(ms float64) float64 {
			return pad + (math.Log10(math.Max(ms, math.Pow(10, lo)))-lo)/(hi-lo)*(w-2*pad)
		}
		y := func(p float64) float64 { return h - pad - p*(h-2*pad) }
		axes(&b, 0, w, h, pad, "delivery latency (ms, log scale)", "fraction of events")
		for e := lo; e <= hi; e++ {
			label := fmt.Sprintf("%g", math.Pow(10, e))
			if e == lo {
				label = "≤" + label
			}
			fmt.Fprintf(&b, `<text x="%.0f" y="%d" text-anchor="middle">%s</text>`+"\n", x(math.Pow(10, e)), h-pad+14, label)
		}
		for _, p := range []float64{0, 0.25, 0.5, 0.75, 0.9, 1} {
			fmt.Fprintf(&b, `<text x="%d" y="%.0f" text-anchor="end">%g</text><line x1="%d" x2="%d" y1="%.0f" y2="%.0f" stroke="#eee"/>`+"\n",
				pad-4, y(p)+4, p, pad, w-pad, y(p), y(p))
		}
		for _, c := range r.Consumers {
			s := slices.Clone(c.latencies)
			slices.Sort(s)
			if len(s) == 0 {
				continue
			}
			var pts []string
			step := max(1, len(s)/400)
			for i := 0; i < len(s); i += step {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(s[i]), y(float64(i+1)/float64(len(s)))))
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(s[len(s)-1]), y(1)))
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n", palette[c.Kind], strings.Join(pts, " "))
		}
	}

	// Right: heap in use over time.
	var tmax, mmax float64
	for _, c := range r.Consumers {
		for _, p := range c.heap {
			tmax, mmax = math.Max(tmax, p[0]), math.Max(mmax, p[1])
		}
	}
	// From the side-by-side consumers' start (the costs' consumers, alone, came before).
	tmin := 0.0
	if p := r.phase("sync"); p != nil {
		tmin = p.StartS
	}
	if tmax > tmin {
		ox := float64(w)
		x := func(t float64) float64 { return ox + pad + (t-tmin)/(tmax-tmin)*(w-2*pad) }
		y := func(m float64) float64 { return h - pad - m/(mmax*1.1)*(h-2*pad) }
		axes(&b, w, w, h, pad, "seconds since start", "heap in use (MiB)")
		for i, p := range r.Phases { // labels on two rows, so that short phases do not overlap
			if p.StartS < tmin {
				continue
			}
			fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%d" y2="%d" stroke="#ccc" stroke-dasharray="3,3"/><text x="%.0f" y="%d" fill="#888">%s</text>`+"\n",
				x(p.StartS), x(p.StartS), pad, h-pad, x(p.StartS)+2, pad+10+12*(i%2), p.Name)
		}
		for i := 0; i <= 4; i++ {
			m := mmax * 1.1 * float64(i) / 4
			fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="end">%.0f</text>`+"\n", ox+pad-4, y(m)+4, m)
		}
		for _, t := range []float64{tmin, tmax} {
			fmt.Fprintf(&b, `<text x="%.0f" y="%d" text-anchor="middle">%.0f</text>`+"\n", x(t), h-pad+14, t)
		}
		for _, c := range r.Consumers {
			var pts []string
			for _, p := range c.heap {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(p[0]), y(p[1])))
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.2" points="%s"/>`+"\n", palette[c.Kind], strings.Join(pts, " "))
		}
	}

	// Legend.
	for i, c := range r.Consumers {
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n",
			pad+i*150, h+14, palette[c.Kind], pad+i*150+16, h+24, c.Kind)
	}
	if len(r.APIServerCosts) > 0 {
		r.costSVG(&b, h+40, w, h, pad)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func axes(b *strings.Builder, ox, w, h, pad int, xlabel, ylabel string) {
	fmt.Fprintf(b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="black"/><line x1="%d" x2="%d" y1="%d" y2="%d" stroke="black"/>`+"\n",
		ox+pad, ox+w-pad, h-pad, h-pad, ox+pad, ox+pad, pad, h-pad)
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", ox+w/2, h-pad+30, xlabel)
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle" transform="rotate(-90 %d %d)">%s</text>`+"\n", ox+14, h/2, ox+14, h/2, ylabel)
}

// seriesLine is one line of a seriesPanel: its points (x, y), and a dashed
// vertical mark at x = mark unless mark is NaN.
type seriesLine struct {
	color string
	pts   [][2]float64
	mark  float64
}

// seriesPanel draws lines over x in [tmin, tmax] in the panel at ox, y from 0
// to a tenth above the highest point, with a grey line at x = 0.
func seriesPanel(b *strings.Builder, ox, w, h, pad int, tmin, tmax float64, xlabel, ylabel string, lines []seriesLine) {
	if tmax <= tmin {
		tmax = tmin + 1
	}
	var ymax float64
	for _, l := range lines {
		for _, p := range l.pts {
			ymax = math.Max(ymax, p[1])
		}
	}
	if ymax == 0 {
		ymax = 1
	}
	x := func(t float64) float64 { return float64(ox+pad) + (t-tmin)/(tmax-tmin)*float64(w-2*pad) }
	y := func(v float64) float64 { return float64(h-pad) - v/(ymax*1.1)*float64(h-2*pad) }
	axes(b, ox, w, h, pad, xlabel, ylabel)
	for i := 0; i <= 4; i++ {
		v := ymax * 1.1 * float64(i) / 4
		fmt.Fprintf(b, `<text x="%d" y="%.0f" text-anchor="end">%.0f</text><line x1="%d" x2="%d" y1="%.0f" y2="%.0f" stroke="#eee"/>`+"\n",
			ox+pad-4, y(v)+4, v, ox+pad, ox+w-pad, y(v), y(v))
	}
	for _, t := range []float64{tmin, 0, tmax} {
		fmt.Fprintf(b, `<text x="%.0f" y="%d" text-anchor="middle">%.0f</text>`+"\n", x(t), h-pad+14, t)
	}
	fmt.Fprintf(b, `<line x1="%.0f" x2="%.0f" y1="%d" y2="%d" stroke="#888"/>`+"\n", x(0), x(0), pad, h-pad)
	for _, l := range lines {
		var pts []string
		for _, p := range l.pts {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(p[0]), y(p[1])))
		}
		if len(pts) > 0 {
			fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="1.3" points="%s"/>`+"\n", l.color, strings.Join(pts, " "))
		}
		if !math.IsNaN(l.mark) {
			fmt.Fprintf(b, `<line x1="%.0f" x2="%.0f" y1="%d" y2="%d" stroke="%s" stroke-dasharray="3,3"/>`+"\n", x(l.mark), x(l.mark), pad, h-pad, l.color)
		}
	}
}
