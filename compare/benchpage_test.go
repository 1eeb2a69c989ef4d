package compare

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// docs/benchmarks.md is its reports (docs/bench) rendered: every generated
// part as RenderBenchPage writes it (go run ./hack/benchdoc renders it
// again), every section in it at least once, and the page short.
func TestTheBenchmarksPageIsItsReportsRendered(t *testing.T) {
	page, err := os.ReadFile("../docs/benchmarks.md")
	if err != nil {
		t.Fatal(err)
	}
	want, err := RenderBenchPage(page, "../docs/bench")
	if err != nil {
		t.Fatal(err)
	}
	got, wantLines := strings.Split(string(page), "\n"), strings.Split(string(want), "\n")
	for i := range max(len(got), len(wantLines)) {
		var g, w string
		if i < len(got) {
			g = got[i]
		}
		if i < len(wantLines) {
			w = wantLines[i]
		}
		if g != w {
			t.Fatalf("docs/benchmarks.md line %d differs from its reports rendered:\n  page: %q\n  reports: %q\n(go run ./hack/benchdoc renders it)", i+1, g, w)
		}
	}
	for _, s := range BenchSections {
		if !bytes.Contains(page, []byte("<!-- begin "+s.Name+" ")) {
			t.Errorf("the page has no %s section", s.Name)
		}
	}
	if n := len(got); n > 250 {
		t.Errorf("the page is %d lines, more than 250", n)
	}
}

// A section's text is replaced by its report rendered, whatever it said;
// the rest of the page stays; an unknown or mismatched section fails.
func TestRenderBenchPageReplacesOnlyTheSections(t *testing.T) {
	dir := t.TempDir()
	out := "BenchmarkDeliveryWire/raw/json-2 \t 1 \t 0 cbor-share \t 9000 events/s \t 20 cpu-µs/event \t 2000 wire-B/event \t 60 allocs/event \t 1.0 load\n"
	if err := os.WriteFile(filepath.Join(dir, "wire.txt"), []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	page := "# title\n\n<!-- begin wire (generated) -->\nstale table\n<!-- end wire -->\n\nprose stays\n"
	got, err := RenderBenchPage([]byte(page), dir)
	if err != nil {
		t.Fatal(err)
	}
	table, _ := RenderDeliveryWire([]byte(out))
	want := "# title\n\n<!-- begin wire (generated) -->\n" + table + "<!-- end wire -->\n\nprose stays\n"
	if string(got) != want {
		t.Errorf("rendered\n%s\nwant\n%s", got, want)
	}
	for _, bad := range []string{
		"<!-- begin nosuch (x) -->\n<!-- end nosuch -->\n",
		"<!-- begin wire (x) -->\n<!-- end storm -->\n",
		"<!-- begin delivery (x) -->\n<!-- end delivery -->\n", // no delivery.txt in dir
	} {
		if _, err := RenderBenchPage([]byte(bad), dir); err == nil {
			t.Errorf("%q rendered without an error", bad)
		}
	}
}

// RenderDelivery's headline is the like-for-like ratio, raw against
// informer-fastdecode, and the decoder's own gain apart, from the medians.
func TestRenderDeliveryHeadline(t *testing.T) {
	var out strings.Builder
	for _, run := range []float64{1, 2, 3} {
		for name, rate := range map[string]float64{"lines": 100000, KindRaw: 20000, KindRawGeneric: 10000, KindInformerFastDecode: 5000,
			KindInformerStripped: 4000, KindControllerRuntimeStripped: 4000, KindControllerRuntime: 3000} {
			r := rate
			if run == 3 {
				r = rate * 10 // an outlier: the median ignores it
			}
			out.WriteString("BenchmarkDelivery/" + name + "-2 \t 4 \t " + ftoa(r) + " events/s \t " + ftoa(1e6/rate) + " cpu-µs/event \t 50 allocs/event \t 3 load\n")
		}
	}
	got, err := RenderDelivery([]byte(out.String()))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"**4.0×** the events/s, 4.0× less CPU", "raw against raw-generic): 2.0× the events/s", "raw reaches 0.20 of lines",
		"| informer-fastdecode | 5000 | 200.00 | 50.0 | 0.05 | 4.0 |", "Medians of 3 runs; load average 3.0 to 3.0"} {
		if !strings.Contains(got, want) {
			t.Errorf("no %q in\n%s", want, got)
		}
	}
}

func ftoa(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
