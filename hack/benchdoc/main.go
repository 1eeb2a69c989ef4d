// Command benchdoc renders the tables of docs/benchmarks.md from the
// harnesses' own reports, kept in docs/bench (compare.BenchSections names
// each): every part of the page between "<!-- begin NAME ... -->" and
// "<!-- end NAME -->" is written again, the rest is left as it is.
//
//	go run ./hack/benchdoc              render the page from docs/bench
//	go run ./hack/benchdoc --from out   first copy into docs/bench each report a run left in out/
//
// compare's TestTheBenchmarksPageIsItsReportsRendered holds the page to it.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"rawwatch/compare"
)

func main() {
	from := flag.String("from", "", "make bench's output directory: copy the reports found there into --bench first")
	page := flag.String("page", "docs/benchmarks.md", "the page")
	bench := flag.String("bench", "docs/bench", "the reports the page is rendered from")
	flag.Parse()
	if err := run(*from, *page, *bench); err != nil {
		fmt.Fprintln(os.Stderr, "benchdoc:", err)
		os.Exit(1)
	}
}

func run(from, page, bench string) error {
	if from != "" {
		for _, s := range compare.BenchSections {
			b, err := os.ReadFile(filepath.Join(from, s.From))
			if os.IsNotExist(err) {
				continue // not run this time: the page keeps the last one
			}
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(bench, s.File), b, 0o644); err != nil {
				return err
			}
			fmt.Printf("%s: %s\n", s.Name, filepath.Join(from, s.From))
		}
	}
	old, err := os.ReadFile(page)
	if err != nil {
		return err
	}
	out, err := compare.RenderBenchPage(old, bench)
	if err != nil {
		return err
	}
	return os.WriteFile(page, out, 0o644)
}
