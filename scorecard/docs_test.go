package scorecard

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// docs/scorecard.md is its numbers (docs/scorecard.json, one run) rendered:
// every line, the table's and the chart's, as the scorecard writes them
// (bin/scorecard --from docs/scorecard.json --out docs renders it again).
func TestTheDocsPageIsItsNumbersRendered(t *testing.T) {
	b, err := os.ReadFile("../docs/scorecard.json")
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	for i, row := range rep.Rows {
		if row.Err == "" {
			if v, why := Verdict(row.Measure); v != row.Verdict || why != row.Why {
				t.Errorf("%s %s: the numbers say %s (%s), the report %s (%s)", row.Fault, row.Kind, v, why, rep.Rows[i].Verdict, row.Why)
			}
		}
	}
	for file, want := range map[string]string{"../docs/scorecard.md": rep.Markdown("scorecard.svg"), "../docs/scorecard.svg": rep.SVG()} {
		got, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		gotLines, wantLines := strings.Split(string(got), "\n"), strings.Split(want, "\n")
		for i := range max(len(gotLines), len(wantLines)) {
			var g, w string
			if i < len(gotLines) {
				g = gotLines[i]
			}
			if i < len(wantLines) {
				w = wantLines[i]
			}
			if g != w {
				t.Errorf("%s line %d differs from its numbers rendered:\n  page: %q\n  numbers: %q\n(bin/scorecard --from docs/scorecard.json --out docs renders it)", file, i+1, g, w)
				break
			}
		}
	}
}
