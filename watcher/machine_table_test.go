package watcher

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

var updateDoc = flag.Bool("update-doc", false, "rewrite Machine's table of decisions from Machine.Step")

// tableFile holds the table, in a block after tableHeading.
const tableFile = "../docs/watcher.md"

// The table of decisions (docs/watcher.md) is Machine.Step's: every situation
// the table names (a state, what is in flight, the data it carries), with
// every outcome it can meet, steps a machine to the action, the state and
// the data the table gives. A change to Step changes the table, and this
// test fails until the doc shows it (go test ./watcher -run
// TestTheDocTableIsTheMachine -update-doc rewrites it; read the diff).
func TestTheDocTableIsTheMachine(t *testing.T) {
	want := decisionTable(t)
	src, err := os.ReadFile(tableFile)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(src)
	start := strings.Index(doc, tableHeading)
	if start < 0 {
		t.Fatalf("%s has no %q", tableFile, tableHeading)
	}
	start += len(tableHeading)
	end := start
	for end < len(doc) {
		nl := strings.IndexByte(doc[end:], '\n')
		if nl < 0 || doc[end:end+nl] == "```" {
			break
		}
		end += nl + 1
	}
	got := doc[start:end]
	if got == want {
		return
	}
	if *updateDoc {
		if err := os.WriteFile(tableFile, []byte(doc[:start]+want+doc[end:]), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Log(tableFile + ": the table of decisions rewritten from Machine.Step")
		return
	}
	// The first row that differs, spaces apart (a wider row moves every
	// column), and the situation it is under.
	gl, wl := strings.Split(got, "\n"), strings.Split(want, "\n")
	under := ""
	for i := range max(len(gl), len(wl)) {
		g, w := "", ""
		if i < len(gl) {
			g = gl[i]
		}
		if i < len(wl) {
			w = wl[i]
		}
		if strings.Join(strings.Fields(g), " ") != strings.Join(strings.Fields(w), " ") {
			t.Errorf("%s's table of decisions is not Machine.Step's; first difference, under %q:\n doc:  %s\n Step: %s",
				tableFile, under, g, w)
			break
		}
		if !strings.HasPrefix(w, " ") {
			under = w
		}
	}
	t.Errorf("Step decides:\n%s\n(go test ./watcher -run TestTheDocTableIsTheMachine -update-doc rewrites %s; read the diff)", want, tableFile)
}

// The package doc's picture draws every state but Stopped, which it names.
func TestTheDocPictureDrawsEveryState(t *testing.T) {
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(src)
	start := strings.Index(doc, "// # The picture\n")
	if start < 0 {
		t.Fatal("doc.go has no picture")
	}
	picture := doc[start+1:]
	if end := strings.Index(picture, "\n// #"); end >= 0 {
		picture = picture[:end]
	}
	for s := Listing; s <= Stopped; s++ {
		if !strings.Contains(picture, "│ "+s.String()) && !(s == Stopped && strings.Contains(picture, s.String())) {
			t.Errorf("the package doc's picture does not draw the state %s", s)
		}
	}
}

// tableHeading is what the table follows in tableFile.
const tableHeading = "Every decision of Machine.Step (`watcher/machine_table_test.go` holds this table to it):\n\n```\n"

// A situation is a machine reached through Step, named as the table names
// it: its state, what is in flight, and the data that matters.
type situation struct {
	name string
	// like: the situation this one varies (the table shows only where they
	// differ).
	like string
	// reach returns a machine in the situation.
	reach func() *Machine
}

// An outcome of the table's vocabulary, for a machine at resourceVersion rv.
type namedOutcome struct {
	name string
	of   func(rv string) Outcome
}

var (
	cacheStarting = apierrors.NewTooManyRequests("storage is (re)initializing", 2)
	pathsMissing  = apierrors.NewServiceUnavailable("the request has been made before all known HTTP paths have been installed, please try again")
	errBadRequest = apierrors.NewBadRequest("no WatchList here")
)

// next is a resourceVersion past rv.
func next(rv string) string {
	n, _ := strconv.Atoi(rv)
	return strconv.Itoa(n + 5)
}

// The outcomes of a request (a LIST, a probe). A LIST that fails, fails
// after its first page.
var requestOutcomes = append([]namedOutcome{
	{"ok", func(rv string) Outcome { return Outcome{RV: next(rv)} }},
	{"behind RV", func(rv string) Outcome { return Outcome{RV: "3"} }},
	{"410", failed(errExpired)},
	{"cut", failed(cut)},
}, errorAnswers(failed)...)

func failed(err error) func(string) Outcome {
	return func(string) Outcome { return Outcome{Err: err, Continue: "page-3"} }
}

// errorAnswers are the error answers a request, or a WATCH that does not open,
// can meet, made outcomes by of.
func errorAnswers(of func(error) func(string) Outcome) []namedOutcome {
	var out []namedOutcome
	for _, a := range []struct {
		name string
		err  error
	}{{"too large RV", errTooLrg}, {"refused", errRefused}, {"500", err500}, {"starting", cacheStarting},
		{"paths missing", pathsMissing}, {"429", err429}, {"403", err403}, {"400", errBadRequest}} {
		out = append(out, namedOutcome{a.name, of(a.err)})
	}
	return out
}

// The outcomes of a stream (a WATCH, a WatchList): those it ended with,
// then the answers to a WATCH that did not open.
var streamOutcomes = append([]namedOutcome{
	{"initial events ended", func(rv string) Outcome { return Outcome{RV: next(rv), Listed: true} }},
	{"ran its course", func(rv string) Outcome { // a little before its timeout, shorter than ResetAfter
		return Outcome{Opened: true, Frames: 3, RV: next(rv), Open: 57 * time.Second, Timeout: time.Minute}
	}},
	{"open 2m then cut", func(rv string) Outcome {
		return Outcome{Opened: true, Frames: 3, RV: next(rv), Err: cut, Open: 2 * time.Minute, Timeout: fiveMin}
	}},
	{"cut", func(rv string) Outcome {
		return Outcome{Opened: true, Frames: 1, RV: next(rv), Err: cut, Open: time.Second, Timeout: fiveMin}
	}},
	{"closed early", func(rv string) Outcome {
		return Outcome{Opened: true, Frames: 1, RV: next(rv), Open: time.Second, Timeout: fiveMin}
	}},
	{"silent", func(string) Outcome {
		return Outcome{Opened: true, Err: ErrSilent, Silent: true, Open: DefaultSilenceLimit, Timeout: fiveMin}
	}},
	{"410", func(string) Outcome {
		return Outcome{Opened: true, Err: errExpired, ErrorEvent: true, Open: time.Second, Timeout: fiveMin}
	}},
	{"ERROR before progress", func(string) Outcome {
		return Outcome{Opened: true, Err: err500, ErrorEvent: true, Open: time.Second, Timeout: fiveMin}
	}},
	{"ERROR after progress", func(rv string) Outcome {
		return Outcome{Opened: true, Frames: 1, RV: next(rv), Err: err500, ErrorEvent: true, Open: time.Second, Timeout: fiveMin}
	}},
}, errorAnswers(refusedWith)...)

func refusedWith(err error) func(string) Outcome {
	return func(string) Outcome { return Outcome{Err: err, Timeout: fiveMin} }
}

var waitOutcomes = []namedOutcome{
	{"done", func(string) Outcome { return Outcome{} }},
}

var canceled = namedOutcome{"canceled", func(string) Outcome { return Outcome{Err: context.Canceled} }}

// reach steps a new machine (DefaultBackoff, jitter 0.5) through outcomes,
// each ending a second (or its stream's time open) after the one before.
func reach(watchList bool, outcomes ...Outcome) *Machine {
	m := NewMachine(DefaultBackoff, watchList, func() float64 { return 0.5 })
	now := t0
	m.Start(now)
	for _, o := range outcomes {
		now = now.Add(max(o.Open, time.Second))
		o.At = now
		m.Step(o)
	}
	return m
}

var (
	ran     = Outcome{Opened: true, Frames: 1, RV: "10", Open: fiveMin, Timeout: fiveMin}
	broke   = Outcome{Opened: true, Frames: 1, RV: "10", Err: cut, Open: time.Second, Timeout: fiveMin}
	gone    = Outcome{Opened: true, Err: errExpired, ErrorEvent: true, Open: time.Second, Timeout: fiveMin}
	waited  = Outcome{}
	refused = Outcome{Err: errRefused, Timeout: fiveMin}
	// freshly: a server that said it had just started is relisted, and the
	// first WATCH from that list refused: the probe before the next.
	freshly = []Outcome{listed10, ran, {Err: cacheStarting, Timeout: fiveMin}, waited, listed10, refused, waited}
)

var situations = []situation{
	{"Listing: list", "", func() *Machine { return reach(false) }},
	{"Listing: list, restarted", "Listing: list", func() *Machine { return reach(false, Outcome{Err: errExpired}) }},
	{"Relisting: list", "Listing: list", func() *Machine { return reach(false, listed10, gone) }},
	{"Listing: watch-list", "", func() *Machine { return reach(true) }},
	{"Watching: watch", "", func() *Machine { return reach(false, listed10, ran) }},
	{"Watching: keep reading", "Watching: watch", func() *Machine { return reach(true, Outcome{RV: "10", Listed: true}) }},
	{"Watching: watch, after trouble", "Watching: watch", func() *Machine { return reach(false, listed10, broke, waited) }},
	{"Watching: watch, relisted", "Watching: watch, after trouble", func() *Machine {
		return reach(false, listed10, ran, gone, listed10, broke, waited)
	}},
	{"Watching: watch, errored", "Watching: watch, after trouble", func() *Machine {
		return reach(false, listed10, ran, Outcome{Opened: true, Frames: 1, RV: "11", Err: err500, ErrorEvent: true, Open: time.Second, Timeout: fiveMin}, waited)
	}},
	{"Watching: watch, fresh", "Watching: watch, relisted", func() *Machine { return reach(false, append(freshly, Outcome{RV: "10"})...) }},
	{"Watching: probe", "", func() *Machine {
		return reach(false, listed10, ran, Outcome{Opened: true, Err: ErrSilent, Silent: true, Open: DefaultSilenceLimit, Timeout: fiveMin})
	}},
	{"Watching: probe, fresh", "Watching: probe", func() *Machine { return reach(false, freshly...) }},
	{"BackingOff: wait", "", func() *Machine { return reach(false, listed10, broke) }},
	{"Relisting: wait", "BackingOff: wait", func() *Machine { return reach(false, listed10, broke, waited, gone) }},
}

// The data a situation is named by, as the table writes its changes.
type data struct {
	lists                                         listMethod
	relisted, restarted, forStart, fresh, errored bool
}

func dataOf(m *Machine) data {
	return data{m.lists, m.relisted, m.list.restarted, m.list.forStart, m.watch.fresh, m.watch.errored}
}

// decision steps the machine of s through o and writes what came of it:
// the next action, and the state and data after it where they changed.
func decision(s situation, o namedOutcome) (action, after string) {
	m := s.reach()
	before, state, waitedFor := dataOf(m), m.State, m.after
	wasWait := m.doing.Kind == Wait
	a := m.Step(withAt(o.of(m.RV), m.now.Add(time.Second)))
	action = phrase(m, a)
	var notes []string
	switch {
	case wasWait && a.Kind == waitedFor.Kind && a.RV == waitedFor.RV && a.Continue == waitedFor.Continue && m.State == m.stateFor(a):
		action = "what it waited for"
		notes = append(notes, "its state")
	case m.State != state:
		notes = append(notes, m.State.String())
	}
	if a.TimeTravel {
		notes = append(notes, "time travel")
	}
	now := dataOf(m)
	if now.lists != before.lists {
		notes = append(notes, map[listMethod]string{byLIST: "LIST for good", byWatchList: "WatchList again", byLISTUntilHealthy: "LIST until healthy"}[now.lists])
	}
	mark := func(name string, was, is bool) {
		switch {
		case is && !was:
			notes = append(notes, "+"+name)
		case was && !is:
			notes = append(notes, "-"+name)
		}
	}
	mark("relisted", before.relisted, now.relisted)
	mark("restarted", false, now.restarted && !before.restarted)
	mark("forStart", false, now.forStart && !before.forStart)
	mark("fresh", before.fresh, now.fresh)
	mark("errored", before.errored, now.errored)
	return action, strings.Join(notes, ", ")
}

func withAt(o Outcome, at time.Time) Outcome {
	o.At = at
	return o
}

// phrase writes an action as the table does. A list is "list" when it is
// made as lists are made now (a WatchList or a LIST: the data says).
func phrase(m *Machine, a Action) string {
	switch a.Kind {
	case Wait:
		if m.State == BackingOff {
			return "back off, then " + phrase(m, m.after)
		}
		return "stagger, then " + phrase(m, m.after)
	case List, WatchList:
		if (a.Kind == WatchList) != (m.lists == byWatchList) {
			return a.Kind.String()
		}
		if a.Continue != "" {
			return "resume the list"
		}
		return "list"
	case Watch:
		if a.RV == m.RV {
			return "watch from RV"
		}
		return "watch from " + a.RV
	}
	return a.Kind.String()
}

// decisionTable is the table of every situation and outcome, as docs/watcher.md
// shows it: under each situation a row per decision, with the outcomes that
// lead to it (the most of them as "any other"); a situation like another
// shows only where they differ.
func decisionTable(t *testing.T) string {
	type row struct{ outcomes, action, after string }
	type block struct {
		title string
		rows  []row
	}
	var blocks []block
	decided := map[string]map[string]row{} // situation → outcome → decision
	stops := true
	for _, s := range situations {
		m := s.reach()
		if s.like != "" && decided[s.like] == nil {
			t.Fatalf("%s is like %s, which comes later or not at all", s.name, s.like)
		}
		if want, _, _ := strings.Cut(s.name, ":"); m.State.String() != want {
			t.Fatalf("the machine reached for %q is in state %s", s.name, m.State)
		}
		var vocabulary []namedOutcome
		switch m.doing.Kind {
		case List, Probe:
			vocabulary = requestOutcomes
		case Watch, KeepReading:
			vocabulary = streamOutcomes[1:]
		case WatchList:
			vocabulary = streamOutcomes
		case Wait:
			vocabulary = waitOutcomes
		default:
			t.Fatalf("%s: %s in flight", s.name, m.doing.Kind)
		}
		b := block{title: s.name}
		if s.like != "" {
			b.title += " (as " + s.like + ", but:)"
		}
		if a, after := decision(s, canceled); a != "stop" || after != Stopped.String() {
			stops = false
			b.rows = append(b.rows, row{canceled.name, a, after})
		}
		decided[s.name] = map[string]row{}
		for _, o := range vocabulary {
			a, after := decision(s, o)
			decided[s.name][o.name] = row{"", a, after}
			if s.like != "" && decided[s.like][o.name] == (row{"", a, after}) {
				continue
			}
			merged := false
			for i := range b.rows {
				if b.rows[i].action == a && b.rows[i].after == after {
					b.rows[i].outcomes += ", " + o.name
					merged = true
					break
				}
			}
			if !merged {
				b.rows = append(b.rows, row{o.name, a, after})
			}
		}
		if s.like == "" { // the most outcomes, three or more, are "any other", last
			most := -1
			for i, r := range b.rows {
				if n := strings.Count(r.outcomes, ", ") + 1; n >= 3 && (most < 0 || n > strings.Count(b.rows[most].outcomes, ", ")+1) {
					most = i
				}
			}
			if most >= 0 {
				r := b.rows[most]
				r.outcomes = "any other"
				b.rows = append(append(b.rows[:most:most], b.rows[most+1:]...), r)
			}
		}
		if len(b.rows) == 0 {
			b.title = s.name + " (as " + s.like + ")"
		}
		blocks = append(blocks, b)
	}
	if stops {
		blocks = append(blocks, block{"any", []row{{canceled.name, "stop", Stopped.String()}}})
	}
	var w [2]int
	for _, b := range blocks {
		for _, r := range b.rows {
			w[0], w[1] = max(w[0], len(r.outcomes)), max(w[1], len(r.action))
		}
	}
	var out strings.Builder
	line := func(format string, args ...any) {
		out.WriteString(strings.TrimRight(fmt.Sprintf(format, args...), " ") + "\n")
	}
	line("state: in flight, data")
	line("  %-*s  %-*s  %s", w[0], "outcome", w[1], "next action", "state after, data")
	for _, b := range blocks {
		line("%s", b.title)
		for _, r := range b.rows {
			line("  %-*s  %-*s  %s", w[0], r.outcomes, w[1], r.action, r.after)
		}
	}
	return out.String()
}
