package compare

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// DeliveryRows are BenchmarkDelivery's rows, in report order: "lines", the
// ceiling (the WATCH's lines read, nothing decoded), then the consumers.
var DeliveryRows = []string{"lines", KindRaw, KindRawGeneric, KindInformerFastDecode, KindInformerStripped,
	KindControllerRuntimeStripped, KindControllerRuntime}

// BenchResult is one row of a benchmark's output over its runs (-count):
// each metric's values by unit, in run order.
type BenchResult struct {
	Name    string
	Metrics map[string][]float64
}

// Median is the median of the row's values of unit (0 without any).
func (r BenchResult) Median(unit string) float64 {
	v := slices.Clone(r.Metrics[unit])
	if len(v) == 0 {
		return 0
	}
	sort.Float64s(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// ParseBench reads `go test -bench` output: the rows of benchmark name
// (its name after "Benchmark<name>/", the GOMAXPROCS suffix cut), in the
// order they first appear.
func ParseBench(r io.Reader, name string) ([]BenchResult, error) {
	var rows []BenchResult
	at := map[string]int{}
	sc := bufio.NewScanner(r)
	prefix := "Benchmark" + name + "/"
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], prefix) {
			continue
		}
		row := strings.TrimPrefix(f[0], prefix)
		if i := strings.LastIndexByte(row, '-'); i > 0 {
			if _, err := strconv.Atoi(row[i+1:]); err == nil {
				row = row[:i]
			}
		}
		i, ok := at[row]
		if !ok {
			i, at[row] = len(rows), len(rows)
			rows = append(rows, BenchResult{Name: row, Metrics: map[string][]float64{}})
		}
		for j := 2; j+1 < len(f); j += 2 {
			v, err := strconv.ParseFloat(f[j], 64)
			if err != nil {
				return nil, fmt.Errorf("%s: %q is not a number", f[0], f[j])
			}
			rows[i].Metrics[f[j+1]] = append(rows[i].Metrics[f[j+1]], v)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("no Benchmark%s rows", name)
	}
	return rows, nil
}

func findRow(rows []BenchResult, name string) (BenchResult, bool) {
	for _, r := range rows {
		if r.Name == name {
			return r, true
		}
	}
	return BenchResult{}, false
}

// loadRange is the lowest and highest load average the rows reported.
func loadRange(rows []BenchResult) string {
	var all []float64
	for _, r := range rows {
		all = append(all, r.Metrics["load"]...)
	}
	if len(all) == 0 {
		return "not reported"
	}
	return fmt.Sprintf("%.1f to %.1f", slices.Min(all), slices.Max(all))
}

// footer says how many runs the medians are of (the most values of metric
// a row has) and the load average during them.
func footer(rows []BenchResult, metric string) string {
	n := 0
	for _, r := range rows {
		n = max(n, len(r.Metrics[metric]))
	}
	return fmt.Sprintf("\nMedians of %d runs; load average %s during them.\n", n, loadRange(rows))
}

// table renders Benchmark<name>'s output as a table: header, a line per
// row (line returns "" to leave one out), then the footer.
func table(out []byte, name, header, metric string, line func(BenchResult) string) (string, error) {
	rows, err := ParseBench(bytes.NewReader(out), name)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString(header)
	for _, r := range rows {
		b.WriteString(line(r))
	}
	b.WriteString(footer(rows, metric))
	return b.String(), nil
}

// RenderDelivery renders BenchmarkDelivery's output as docs/benchmarks.md
// shows it: the headline ratios, then a row per DeliveryRows entry (medians
// over the runs).
func RenderDelivery(out []byte) (string, error) {
	rows, err := ParseBench(bytes.NewReader(out), "Delivery")
	if err != nil {
		return "", err
	}
	get := func(name string) (BenchResult, error) {
		r, ok := findRow(rows, name)
		if !ok || len(r.Metrics["events/s"]) == 0 {
			return r, fmt.Errorf("BenchmarkDelivery has no %s row", name)
		}
		return r, nil
	}
	var b strings.Builder
	lines, err := get("lines")
	if err != nil {
		return "", err
	}
	ratio := func(a, o string) (float64, float64, error) {
		ra, err := get(a)
		if err != nil {
			return 0, 0, err
		}
		ro, err := get(o)
		if err != nil {
			return 0, 0, err
		}
		return ra.Median("events/s") / ro.Median("events/s"), ro.Median("cpu-µs/event") / ra.Median("cpu-µs/event"), nil
	}
	like, likeCPU, err := ratio(KindRaw, KindInformerFastDecode)
	if err != nil {
		return "", err
	}
	dec, decCPU, err := ratio(KindRaw, KindRawGeneric)
	if err != nil {
		return "", err
	}
	raw, _ := get(KindRaw)
	fmt.Fprintf(&b, "- **raw against informer-fastdecode** (like for like: the same decoder, managedFields dropped): **%.1f×** the events/s, %.1f× less CPU per event.\n", like, likeCPU)
	fmt.Fprintf(&b, "- The hand-written decoder (raw against raw-generic): %.1f× the events/s, %.1f× less CPU per event.\n", dec, decCPU)
	fmt.Fprintf(&b, "- raw reaches %.2f of lines' events/s.\n\n", raw.Median("events/s")/lines.Median("events/s"))
	b.WriteString("| row | events/s | CPU µs/event | allocs/event | of lines | raw is × faster |\n|---|---:|---:|---:|---:|---:|\n")
	for _, name := range DeliveryRows {
		r, err := get(name)
		if err != nil {
			return "", err
		}
		times := "–"
		if name != KindRaw && name != "lines" {
			times = fmt.Sprintf("%.1f", raw.Median("events/s")/r.Median("events/s"))
		}
		fmt.Fprintf(&b, "| %s | %.0f | %.2f | %.1f | %.2f | %s |\n", name, r.Median("events/s"), r.Median("cpu-µs/event"),
			r.Median("allocs/event"), r.Median("events/s")/lines.Median("events/s"), times)
	}
	b.WriteString(footer(rows, "events/s"))
	return b.String(), nil
}

// RenderDeliveryWire renders BenchmarkDeliveryWire's output: a row per case
// (consumer/asked[-gzip][-json-server]), medians over the runs, with what
// the consumer read by its cbor-share; a case that asked for CBOR and read
// anything else is in bold (a fallback to JSON).
func RenderDeliveryWire(out []byte) (string, error) {
	return table(out, "DeliveryWire", "| consumer/asked | read | events/s | CPU µs/event | wire B/event | allocs/event |\n|---|---|---:|---:|---:|---:|\n",
		"events/s", func(r BenchResult) string {
			if len(r.Metrics["events/s"]) == 0 {
				return "" // skipped
			}
			return fmt.Sprintf("| %s | %s | %.0f | %.2f | %.0f | %.1f |\n", r.Name, wireRead(r), r.Median("events/s"), r.Median("cpu-µs/event"),
				r.Median("wire-B/event"), r.Median("allocs/event"))
		})
}

// wireRead is what a wire case read, by its cbor-share: in bold, and said
// so, when it asked for CBOR and read anything else.
func wireRead(r BenchResult) string {
	read := "cbor+json"
	switch share := r.Median("cbor-share"); {
	case share >= 0.999:
		read = "cbor"
	case share <= 0.001:
		read = "json"
	}
	_, asked, _ := strings.Cut(r.Name, "/")
	if strings.HasPrefix(asked, "cbor") && read != "cbor" {
		return "**" + read + "**: asked for cbor"
	}
	return read
}

// RenderDeliveryLatency renders BenchmarkDeliveryLatency's output: p50 and
// p99 per consumer, medians over the runs.
func RenderDeliveryLatency(out []byte) (string, error) {
	return table(out, "DeliveryLatency", "| consumer | p50 µs | p99 µs |\n|---|---:|---:|\n", "p99-µs", func(r BenchResult) string {
		return fmt.Sprintf("| %s | %.0f | %.0f |\n", r.Name, r.Median("p50-µs"), r.Median("p99-µs"))
	})
}
