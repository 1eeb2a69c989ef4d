package compare

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
)

// A BenchSection is one generated part of docs/benchmarks.md: a harness's
// report, kept in the docs' bench directory as File, rendered.
type BenchSection struct {
	Name string // the page's marker
	File string // in the bench directory
	// From is where a run leaves File, under make bench's output directory.
	From   string
	render func(path string) (string, error)
}

// BenchSections are the page's generated parts, one per harness.
var BenchSections = []BenchSection{
	{"compare", "report.json", "compare/report.json", func(p string) (string, error) {
		r, err := readReport[Report](p)
		if err != nil {
			return "", err
		}
		// The side-by-side tables; the apiserver's cost per consumer,
		// two wide tables, stays in the run's report.md (and the JSON).
		r.APIServerCosts = nil
		return r.Markdown(), nil
	}},
	{"sizes", "sizes.json", "compare/sizes/sizes.json", func(p string) (string, error) {
		r, err := readReport[SizesReport](p)
		if err != nil {
			return "", err
		}
		return r.Markdown(), nil
	}},
	{"converge", "convergence.json", "compare/converge/convergence.json", func(p string) (string, error) {
		r, err := ReadConvergeReport(p)
		if err != nil {
			return "", err
		}
		return r.Markdown(), nil
	}},
	{"storm", "storm.json", "storm/payload-2k/storm.json", func(p string) (string, error) {
		r, err := ReadStormReport(p)
		if err != nil {
			return "", err
		}
		return r.Markdown(), nil
	}},
	{"delivery", "delivery.txt", "compare/delivery.txt", renderFile(RenderDelivery)},
	{"latency", "latency.txt", "compare/latency.txt", renderFile(RenderDeliveryLatency)},
	{"wire", "wire.txt", "compare/wire.txt", renderFile(RenderDeliveryWire)},
}

func renderFile(render func([]byte) (string, error)) func(string) (string, error) {
	return func(p string) (string, error) {
		b, err := os.ReadFile(p)
		if err != nil {
			return "", err
		}
		return render(b)
	}
}

// benchMarker is a generated part of the page: its begin marker, its text,
// its end marker.
var benchMarker = regexp.MustCompile(`(?s)(<!-- begin ([a-z]+) [^\n]*-->\n)(.*?)(<!-- end ([a-z]+) -->)`)

// RenderBenchPage renders every generated part of page (between
// "<!-- begin NAME ... -->" and "<!-- end NAME -->") from its section's
// file in dir, and leaves the rest as it is.
func RenderBenchPage(page []byte, dir string) ([]byte, error) {
	var err error
	out := benchMarker.ReplaceAllFunc(page, func(m []byte) []byte {
		g := benchMarker.FindSubmatch(m)
		name := string(g[2])
		if string(g[5]) != name {
			err = fmt.Errorf("section %s ends with %s's marker", name, g[5])
			return m
		}
		for _, s := range BenchSections {
			if s.Name != name {
				continue
			}
			text, rerr := s.render(filepath.Join(dir, s.File))
			if rerr != nil {
				err = fmt.Errorf("section %s: %w", name, rerr)
				return m
			}
			return bytes.Join([][]byte{g[1], []byte(text), ensureNewline(text), g[4]}, nil)
		}
		err = fmt.Errorf("no section %s", name)
		return m
	})
	return out, err
}

func ensureNewline(text string) []byte {
	if len(text) > 0 && text[len(text)-1] != '\n' {
		return []byte("\n")
	}
	return nil
}
