package scorecard

import (
	"encoding/xml"
	"io"
	"strings"
	"testing"
	"time"
)

func TestReportPageAndChart(t *testing.T) {
	rep := &Report{Duration: 20 * time.Second, Recover: time.Minute, Kinds: []string{"raw", "informer"}, Faults: []string{"watchlist-end", "refuse"},
		Rows: []Row{
			{Fault: "watchlist-end", Kind: "raw", Measure: Measure{Duration: 20 * time.Second, Lists: 1, Watches: 2, Busiest: 3, Converged: true, ConvergedIn: 300 * time.Millisecond}},
			{Fault: "watchlist-end", Kind: "informer", Measure: Measure{Duration: 20 * time.Second, WatchLists: 4800, Busiest: 4800, Chained: 4800, Converged: true}},
			{Fault: "refuse", Kind: "raw", Err: "the client did not sync"},
			{Fault: "refuse", Kind: "informer", Measure: Measure{Duration: 20 * time.Second, Watches: 2, Busiest: 2, Crashed: true, Exit: "panic"}},
		}}
	for i := range rep.Rows {
		if rep.Rows[i].Err == "" {
			rep.Rows[i].Verdict, rep.Rows[i].Why = Verdict(rep.Rows[i].Measure)
		}
	}
	md := rep.Markdown("scorecard.svg")
	for _, want := range []string{
		"| [watchlist-end](#watchlist-end) | **held** 3, 0.3 s | **stormed** 4,800, 0.0 s |",
		"| [refuse](#refuse) | not measured | **crashed** 2, not in 0s |",
		"[kubernetes/kubernetes#140890](https://github.com/kubernetes/kubernetes/issues/140890)",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the page lacks %q:\n%s", want, md)
		}
	}
	d := xml.NewDecoder(strings.NewReader(rep.SVG()))
	bars := 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the chart is not XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "title" {
			bars++
		}
	}
	if bars != 3 {
		t.Fatalf("%d bars, want 3 (one per measured row)", bars)
	}
	if svg := rep.SVG(); strings.Count(svg, marks[Stormed]) != 2 || strings.Count(svg, marks[Crashed]) != 2 {
		t.Errorf("the chart marks %d stormed and %d crashed cells, want 1 and 1 (and each in the legend)", strings.Count(svg, marks[Stormed])-1, strings.Count(svg, marks[Crashed])-1)
	}
}

// The page names every cell where a raw client sent more requests in its
// busiest minute than an anchor that held, with those anchors; an anchor
// that stalled (it sent nothing) is no measure.
func TestRawAboveNamesTheCellsOverAHeldAnchor(t *testing.T) {
	rep := &Report{Duration: 20 * time.Second, Recover: time.Minute, Kinds: []string{"raw", "raw-watchlist", "informer", "informer-list"},
		Faults: []string{"watch-410", "freeze", "500"}}
	for _, c := range []struct {
		fault, kind string
		busiest     int
		converged   bool
	}{
		{"watch-410", "raw", 3, true}, {"watch-410", "raw-watchlist", 1, true}, {"watch-410", "informer", 1, true}, {"watch-410", "informer-list", 2, true},
		{"freeze", "raw", 2, true}, {"freeze", "raw-watchlist", 2, true}, {"freeze", "informer", 0, false}, {"freeze", "informer-list", 0, false},
		{"500", "raw", 5, true}, {"500", "raw-watchlist", 6, true}, {"500", "informer", 9, true}, {"500", "informer-list", 6, true},
	} {
		m := Measure{Duration: 20 * time.Second, Busiest: c.busiest, Converged: c.converged}
		v, why := Verdict(m)
		rep.Rows = append(rep.Rows, Row{Fault: c.fault, Kind: c.kind, Measure: m, Verdict: v, Why: why})
	}
	md := rep.Markdown("scorecard.svg")
	if want := "- [watch-410](#watch-410): raw 3 (informer 1, informer-list 2)\n"; !strings.Contains(md, want) {
		t.Errorf("the page lacks %q", want)
	}
	for _, not := range []string{"- [freeze]", "- [500]", "raw-watchlist 1 ("} {
		if strings.Contains(md, not) {
			t.Errorf("the page has %q: no raw client there sent more than an anchor that held", not)
		}
	}
	rep.Faults = []string{"500"}
	if md := rep.Markdown("scorecard.svg"); !strings.Contains(md, "no raw client sent more requests") {
		t.Errorf("with no such cell the page does not say so")
	}
}

// The page says the schedule the report ran: which faults' clients met them
// side by side and which ran alone.
func TestThePageSaysWhichFaultsRanSideBySide(t *testing.T) {
	for _, c := range []struct {
		sideBySide []string
		want       string
	}{
		{[]string{"refuse", "freeze"}, "; the clients of a fault meet it side by side, each through its own proxy"},
		{[]string{"refuse", "freeze"}, "but in `etcd-restore` (which act on the apiserver or etcd that every client reaches) each client runs alone."},
		{[]string{}, "; each client runs alone."},
	} {
		rep := &Report{Duration: 20 * time.Second, Recover: time.Minute, Kinds: []string{"raw"},
			Faults: []string{"refuse", "freeze", "etcd-restore"}, SideBySide: c.sideBySide}
		if md := rep.Markdown("scorecard.svg"); !strings.Contains(md, c.want) {
			t.Errorf("side by side %q: the page lacks %q", c.sideBySide, c.want)
		}
	}
}
