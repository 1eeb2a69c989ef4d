package compare

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"rawwatch/internal/controlplane"
)

// The sizes sweep answers "what does a cached object cost, for objects of
// real size?": one short harness run (Run) per payload and per place the
// payload sits, every object written with server-side apply so that it
// carries real managedFields, and each consumer's live heap per object.
//
// The payload sits either in an annotation of its own, which every cache
// keeps, or in kubectl's last-applied-configuration, which rawwatch's cache
// drops by default (myresource.UnreadAnnotations) and an informer keeps
// unless its user sets a transform. Each run's consumers do what they do out
// of the box (TransformRaw).

// Where a sizes run puts its payload.
const (
	PlaceOwn         = "own annotation"
	PlaceLastApplied = "last-applied-configuration"
)

// SizesOptions configure a sweep.
type SizesOptions struct {
	// Kubeconfig is the server to use; "" starts a local control plane,
	// shared by every run of the sweep.
	Kubeconfig string
	// Objects per run (default 10,000); Payloads the sizes to try, in bytes
	// (default 0, 2 KiB and 16 KiB). Payload 0 is run once: it has no place.
	Objects  int
	Payloads []int
	// Kinds are the consumers (default SizesKinds).
	Kinds    []string
	OutDir   string
	Binary   string
	Progress io.Writer
}

// SizesKinds are the consumers that cache objects.
var SizesKinds = []string{KindRaw, KindRawWatchList, KindInformer, KindInformerList}

// SizesReport is the outcome of a sweep.
type SizesReport struct {
	Date      string      `json:"date"`
	GoVersion string      `json:"goVersion"`
	CPUs      int         `json:"cpus"`
	Objects   int         `json:"objects"`
	Points    []SizePoint `json:"points"`
}

// SizePoint is one consumer's cost per object in one run.
type SizePoint struct {
	Place   string `json:"place"`
	Payload int    `json:"payloadBytes"`
	Kind    string `json:"kind"`
	// HeapPerObject is the live heap after the update phase (a forced GC;
	// the sync's queue has drained by then) over the number of objects:
	// the runtime's fixed cost is in it too, about 100 bytes an object at
	// 10,000 objects.
	HeapPerObject float64 `json:"heapPerObject"`
	Correct       bool    `json:"correct"`
}

// RunSizes runs the sweep.
func RunSizes(ctx context.Context, opts SizesOptions) (*SizesReport, error) {
	if opts.Objects == 0 {
		opts.Objects = 10000
	}
	if opts.Objects < 0 {
		return nil, errors.New("compare: Objects must be positive")
	}
	if opts.Payloads == nil {
		opts.Payloads = []int{0, 2048, 16384}
	}
	if len(opts.Kinds) == 0 {
		opts.Kinds = SizesKinds
	}
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	if opts.Kubeconfig == "" {
		fmt.Fprintln(opts.Progress, "sizes: starting a local control plane")
		cp, err := controlplane.Start(ctx, controlplane.Options{})
		if err != nil {
			return nil, err
		}
		defer cp.Stop()
		opts.Kubeconfig = cp.Kubeconfig
	}
	r := &SizesReport{Date: time.Now().UTC().Format(time.RFC3339), GoVersion: runtime.Version(), CPUs: runtime.NumCPU(), Objects: opts.Objects}
	for _, payload := range opts.Payloads {
		places := []string{PlaceOwn, PlaceLastApplied}
		if payload == 0 {
			places = places[:1]
		}
		for _, place := range places {
			key := DefaultPayloadAnnotation
			if place == PlaceLastApplied {
				key = corev1.LastAppliedConfigAnnotation
			}
			name := fmt.Sprintf("payload-%d", payload)
			if payload > 0 && place == PlaceLastApplied {
				name += "-last-applied"
			}
			fmt.Fprintf(opts.Progress, "sizes: %d objects, payload %d B in %s\n", opts.Objects, payload, place)
			run, err := Run(ctx, Options{
				Kubeconfig: opts.Kubeconfig, Objects: opts.Objects, Payload: payload, PayloadAnnotation: key, Apply: true,
				Transform: TransformRaw, Kinds: opts.Kinds,
				// A short update phase: its end is where the heap is read.
				UpdateRate: 100, UpdateDuration: 2 * time.Second, DeleteFraction: 0.1,
				OutDir: filepath.Join(opts.OutDir, name), Binary: opts.Binary, Progress: opts.Progress,
			})
			if err != nil {
				return nil, fmt.Errorf("payload %d B in %s: %w", payload, place, err)
			}
			for _, c := range run.Consumers {
				r.Points = append(r.Points, SizePoint{Place: place, Payload: payload, Kind: c.Kind,
					HeapPerObject: math.Round(float64(c.HeapAfterUpdates) / float64(opts.Objects)), Correct: c.Verdict.OK})
			}
		}
	}
	return r, nil
}

// point finds a consumer's figure; payload 0 counts for both places.
func (r *SizesReport) point(place string, payload int, kind string) (SizePoint, bool) {
	for _, p := range r.Points {
		if p.Payload == payload && p.Kind == kind && (p.Place == place || payload == 0) {
			return p, true
		}
	}
	return SizePoint{}, false
}

func (r *SizesReport) payloads() []int {
	var out []int
	for _, p := range r.Points {
		if !slices.Contains(out, p.Payload) {
			out = append(out, p.Payload)
		}
	}
	slices.Sort(out)
	return out
}

func (r *SizesReport) kinds() []string {
	var out []string
	for _, p := range r.Points {
		if !slices.Contains(out, p.Kind) {
			out = append(out, p.Kind)
		}
	}
	return out
}

// Markdown renders one table per place, with the ratios of issue 11's goal
// (raw ≤ 0.7× the informer that gets its state the same way).
func (r *SizesReport) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "### Heap per cached object, %s\n\n", r.Date)
	fmt.Fprintf(&b, "%d objects written with server-side apply (real managedFields); live heap after the update phase over the number of objects; %s, %d CPUs. ", r.Objects, r.GoVersion, r.CPUs)
	b.WriteString("Every consumer as it comes: rawwatch's cache drops kubectl's last-applied-configuration, the informers keep every annotation.\n\n")
	kinds := r.kinds()
	for _, place := range []string{PlaceOwn, PlaceLastApplied} {
		fmt.Fprintf(&b, "Payload in %s:\n\n| payload |", place)
		for _, k := range kinds {
			fmt.Fprintf(&b, " %s |", k)
		}
		b.WriteString(" raw / informer-list | raw-watchlist / informer |\n|---|")
		b.WriteString(strings.Repeat("---|", len(kinds)+2) + "\n")
		for _, payload := range r.payloads() {
			fmt.Fprintf(&b, "| %d B |", payload)
			for _, k := range kinds {
				if p, ok := r.point(place, payload, k); ok {
					mark := ""
					if !p.Correct {
						mark = " (FAILED its check)"
					}
					fmt.Fprintf(&b, " %.0f B%s |", p.HeapPerObject, mark)
				} else {
					b.WriteString(" – |")
				}
			}
			for _, pair := range [][2]string{{KindRaw, KindInformerList}, {KindRawWatchList, KindInformer}} {
				a, okA := r.point(place, payload, pair[0])
				o, okO := r.point(place, payload, pair[1])
				if okA && okO && o.HeapPerObject > 0 {
					fmt.Fprintf(&b, " %.2f |", a.HeapPerObject/o.HeapPerObject)
				} else {
					b.WriteString(" – |")
				}
			}
			b.WriteString("\n")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// SVG draws heap per object against payload, one panel per place, one line
// per consumer.
func (r *SizesReport) SVG() string {
	const w, h, pad = 420, 320, 56
	var b strings.Builder
	places := []string{PlaceOwn, PlaceLastApplied}
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", len(places)*w, h+40)
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>` + "\n")
	payloads, kinds := r.payloads(), r.kinds()
	var ymax float64
	for _, p := range r.Points {
		ymax = math.Max(ymax, p.HeapPerObject)
	}
	if len(payloads) == 0 || ymax == 0 {
		b.WriteString("</svg>\n")
		return b.String()
	}
	xmax := float64(max(payloads[len(payloads)-1], 1))
	for i, place := range places {
		ox := float64(i * w)
		x := func(p int) float64 { return ox + pad + float64(p)/xmax*(w-2*pad) }
		y := func(v float64) float64 { return h - pad - v/(ymax*1.1)*(h-2*pad) }
		axes(&b, i*w, w, h, pad, "payload (bytes), in "+place, "live heap per object (bytes)")
		for _, p := range payloads {
			fmt.Fprintf(&b, `<text x="%.0f" y="%d" text-anchor="middle">%d</text>`+"\n", x(p), h-pad+14, p)
		}
		for j := 0; j <= 4; j++ {
			v := ymax * 1.1 * float64(j) / 4
			fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="end">%.0f</text>`+"\n", ox+pad-4, y(v)+4, v)
		}
		for _, k := range kinds {
			var pts []string
			for _, payload := range payloads {
				if p, ok := r.point(place, payload, k); ok {
					pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(payload), y(p.HeapPerObject)))
				}
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n", palette[k], strings.Join(pts, " "))
		}
	}
	for i, k := range kinds {
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n",
			pad+i*150, h+14, palette[k], pad+i*150+16, h+24, k)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// Write puts sizes.md, sizes.json and sizes.svg into dir.
func (r *SizesReport) Write(dir string) error {
	return writeReport(dir, "sizes", r, r.Markdown(), r.SVG())
}
