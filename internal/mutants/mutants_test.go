package mutants

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const twoMutations = `# a comment before the first mutation

=== skip-reset
the backoff never resets after a calm stretch
--- a/machine.go
	if calm {
		n = 0
	}
+++
	if calm {
	}

=== two-edits
# a comment inside a mutation
bookmarks forgotten, in two places
--- a/machine.go
x >= y
+++
x > y
--- b/watch.go
	rv = ev.RV
+++
`

func TestParseReadsBlocksExactly(t *testing.T) {
	ms, err := Parse(strings.NewReader(twoMutations))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 {
		t.Fatalf("got %d mutations, want 2: %+v", len(ms), ms)
	}
	m := ms[0]
	if m.ID != "skip-reset" || m.Description != "the backoff never resets after a calm stretch" || m.Line != 3 || len(m.Edits) != 1 {
		t.Fatalf("first mutation: %+v", m)
	}
	if e := m.Edits[0]; e.File != "a/machine.go" || e.Anchor != "\tif calm {\n\t\tn = 0\n\t}" || e.Replacement != "\tif calm {\n\t}" {
		t.Fatalf("first edit (tabs kept, trailing blank lines dropped): %q", e)
	}
	m = ms[1]
	if m.ID != "two-edits" || len(m.Edits) != 2 || m.Edits[0].Anchor != "x >= y" || m.Edits[0].Replacement != "x > y" ||
		m.Edits[1].File != "b/watch.go" || m.Edits[1].Anchor != "\trv = ev.RV" || m.Edits[1].Replacement != "" {
		t.Fatalf("second mutation: %+v", m)
	}
}

func TestParseRefusesAMalformedCatalogue(t *testing.T) {
	for name, text := range map[string]string{
		"text before a mutation":  "hello\n=== a\nd\n--- a.go\nx\n+++\ny\n",
		"bad id":                  "=== Bad_ID\nd\n--- a.go\nx\n+++\ny\n",
		"repeated id":             "=== a\nd\n--- a.go\nx\n+++\ny\n=== a\nd\n--- a.go\nx\n+++\ny\n",
		"no description":          "=== a\n--- a.go\nx\n+++\ny\n",
		"two description lines":   "=== a\nd\ne\n--- a.go\nx\n+++\ny\n",
		"no edit":                 "=== a\nd\n",
		"no +++":                  "=== a\nd\n--- a.go\nx\n",
		"empty anchor":            "=== a\nd\n--- a.go\n\n+++\ny\n",
		"changes nothing":         "=== a\nd\n--- a.go\nx\n+++\nx\n",
		"a test file":             "=== a\nd\n--- a_test.go\nx\n+++\ny\n",
		"not Go":                  "=== a\nd\n--- a.txt\nx\n+++\ny\n",
		"outside the module root": "=== a\nd\n--- ../a.go\nx\n+++\ny\n",
		"two +++":                 "=== a\nd\n--- a.go\nx\n+++\ny\n+++\nz\n",
	} {
		if ms, err := Parse(strings.NewReader(text)); err == nil {
			t.Errorf("%s: parsed as %+v, want an error", name, ms)
		}
	}
}

func files(m map[string]string) func(string) (string, error) {
	return func(f string) (string, error) {
		if s, ok := m[f]; ok {
			return s, nil
		}
		return "", os.ErrNotExist
	}
}

func TestApplyReplacesTheAnchorOnce(t *testing.T) {
	m := Mutation{ID: "m", Edits: []Edit{
		{File: "a.go", Anchor: "x >= y", Replacement: "x > y"},
		{File: "a.go", Anchor: "x > y", Replacement: "x < y"}, // applies to the result of the first
		{File: "b.go", Anchor: "n++\n", Replacement: ""},
	}}
	got, err := m.Apply(files(map[string]string{"a.go": "if x >= y {}", "b.go": "n++\nm++\n", "c.go": "untouched"}))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["a.go"] != "if x < y {}" || got["b.go"] != "m++\n" {
		t.Fatalf("got %q", got)
	}
}

func TestApplyIsStaleUnlessTheAnchorOccursExactlyOnce(t *testing.T) {
	src := files(map[string]string{"a.go": "n++\nn++\nm--\n"})
	for _, c := range []struct {
		name   string
		edits  []Edit
		count  int
		notice string
	}{
		{"moved", []Edit{{File: "a.go", Anchor: "k++", Replacement: "k--"}}, 0, "not found"},
		{"ambiguous", []Edit{{File: "a.go", Anchor: "n++", Replacement: "n--"}}, 2, "occurs 2 times"},
		{"file gone", []Edit{{File: "gone.go", Anchor: "n++", Replacement: "n--"}}, -1, "gone.go"},
		// The second edit's anchor is the first's replacement, twice now.
		{"stale after an earlier edit", []Edit{{File: "a.go", Anchor: "m--", Replacement: "n++"}, {File: "a.go", Anchor: "n++\n", Replacement: ""}}, 3, "occurs 3 times"},
	} {
		got, err := Mutation{ID: "m", Edits: c.edits}.Apply(src)
		var stale *StaleError
		if !errors.As(err, &stale) || stale.Count != c.count || !strings.Contains(err.Error(), c.notice) || got != nil {
			t.Errorf("%s: %v %v, want a stale error with count %d mentioning %q and no files", c.name, got, err, c.count, c.notice)
		}
	}
}

func TestClassify(t *testing.T) {
	stale, build := errors.New("stale"), errors.New("build")
	for _, c := range []struct {
		stale, build    error
		explorer, tests Stage
		want            Verdict
	}{
		{stale, nil, NotRun, NotRun, Stale},
		{nil, build, NotRun, NotRun, BuildFailed},
		{nil, build, Passed, NotRun, BuildFailed}, // a test binary built later failed
		{nil, nil, Failed, NotRun, KilledByExplorer},
		{nil, nil, Passed, Failed, KilledByTests},
		{nil, nil, NotRun, Failed, KilledByTests}, // out of the explorer's reach
		{nil, nil, Passed, Passed, Survived},
		{nil, nil, NotRun, Passed, Survived},
	} {
		if got := Classify(c.stale, c.build, c.explorer, c.tests); got != c.want {
			t.Errorf("Classify(%v, %v, %v, %v) = %v, want %v", c.stale, c.build, c.explorer, c.tests, got, c.want)
		}
	}
}

func TestSummaryCountsOnlyWhatRan(t *testing.T) {
	rs := []Result{
		{ID: "a", Verdict: KilledByExplorer, Explorable: true},
		{ID: "b", Verdict: KilledByExplorer, Explorable: true},
		{ID: "c", Verdict: KilledByTests, Explorable: true},
		{ID: "d", Verdict: KilledByTests},
		{ID: "e", Verdict: Survived, Explorable: true},
		{ID: "f", Verdict: Stale, Explorable: true},
		{ID: "g", Verdict: BuildFailed},
	}
	got := Summary(rs)
	for _, want := range []string{
		"7 mutations: 2 killed by the explorer, 2 by the other tests, 1 SURVIVED, 1 stale, 1 build-failed.",
		"Of the 5 that applied and built: 40% killed by the explorer alone, 80% killed in all; of the 4 in code the explorer runs: 50% killed by it.",
		"SURVIVED: e.",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary\n%s\nlacks %q", got, want)
		}
	}
	if report := Report(rs); !strings.Contains(report, "e         SURVIVED") || !strings.HasPrefix(report, "mutation  verdict") {
		t.Errorf("report:\n%s", report)
	}
}

func TestFailWatchFindsTheFirstFailure(t *testing.T) {
	for name, c := range map[string]struct {
		out       string
		stopAfter string // the line at which Line says to stop ("" = never)
		detail    string
	}{
		"a parallel subtest, its message streamed before its result": {
			out: `=== RUN   TestExplorer/schedules/16
=== PAUSE TestExplorer/schedules/16
=== CONT  TestExplorer/schedules/17
=== NAME  TestExplorer/schedules/17
    explore_test.go:327: seed 17: 3 objects, page size 2; at 0s refuse, healed at 40s
          broke: liveness: the store still differs from the server 3m30s after the faults stopped (bound 3m30s)
          replay: go test ./watcher -run TestExplorer -explore.seed=17
=== CONT  TestExplorer/schedules/16
    explore_test.go:327: seed 16: something else
--- FAIL: TestExplorer/schedules/17 (0.01s)
--- PASS: TestExplorer/schedules/16 (0.01s)`,
			stopAfter: "--- FAIL: TestExplorer/schedules/17 (0.01s)",
			detail:    "TestExplorer/schedules/17: liveness: the store still differs from the server 3m30s after the faults stopped (bound 3m30s)",
		},
		"subtests that failed before their parent's --- FAIL line": {
			out: `=== CONT  TestExplorer/schedules/3
=== NAME  TestExplorer/schedules/160
    explore_test.go:327: seed 160: 4 objects
          broke: safety: delta 60 updates ns/obj-10 (UID uid-37), not present
=== NAME  TestExplorer/schedules/79
    explore_test.go:327: seed 79: 2 objects
          broke: liveness: the store still differs
=== NAME  TestExplorer
    explore_test.go:332: 300 schedules in 3.514s (2 failed)
--- FAIL: TestExplorer (3.52s)`,
			stopAfter: "--- FAIL: TestExplorer (3.52s)",
			detail:    "TestExplorer/schedules/160: safety: delta 60 updates ns/obj-10 (UID uid-37), not present",
		},
		"a subtest that spoke, its parent's --- FAIL line, then subtests' results": {
			out: `=== RUN   TestFastDecoderAgreesWithThePlainOne/bad_scalar_in_the_object
    decode_ref_test.go:141: frame 0: fast skip, plain broken
--- FAIL: TestFastDecoderAgreesWithThePlainOne (0.01s)
    --- PASS: TestFastDecoderAgreesWithThePlainOne/watch-stream-bad.jsonl (0.00s)`,
			stopAfter: "--- FAIL: TestFastDecoderAgreesWithThePlainOne (0.01s)",
			detail:    "TestFastDecoderAgreesWithThePlainOne/bad_scalar_in_the_object: decode_ref_test.go:141: frame 0: fast skip, plain broken",
		},
		"results of subtests after a --- FAIL line are not messages": {
			out: `=== RUN   TestA
--- FAIL: TestA (0.01s)
    --- PASS: TestA/one (0.00s)
    --- SKIP: TestA/two (0.00s)
    a_test.go:9: the message
FAIL`,
			stopAfter: "", // read to the end
			detail:    "TestA: a_test.go:9: the message",
		},
		"a message after the result": {
			out: `=== RUN   TestQueueDedup
--- FAIL: TestQueueDedup (0.00s)
    queue_test.go:20: got [a a], want [a]
    queue_test.go:21: second
    queue_test.go:22: third
FAIL`,
			stopAfter: "    queue_test.go:22: third",
			detail:    "TestQueueDedup: queue_test.go:20: got [a a], want [a]",
		},
		"a panic in a test": {
			out: `=== RUN   TestStore
--- FAIL: TestStore (0.00s)
panic: runtime error: invalid memory address or nil pointer dereference [recovered]`,
			stopAfter: "panic: runtime error: invalid memory address or nil pointer dereference [recovered]",
			detail:    "TestStore: panic: runtime error: invalid memory address or nil pointer dereference [recovered]",
		},
		"a timeout": {
			out: `=== RUN   TestExplorer
panic: test timed out after 3m0s
	running tests:
		TestExplorer (3m0s)`,
			detail: "panic: test timed out after 3m0s",
		},
		"all passed": {
			out:    "=== RUN   TestA\n    a_test.go:3: a log line\n--- PASS: TestA (0.00s)\nPASS",
			detail: "",
		},
	} {
		var w FailWatch
		stopped := ""
		for _, l := range strings.Split(c.out, "\n") {
			if w.Line(l) {
				stopped = l
				break
			}
		}
		if stopped != c.stopAfter || w.Detail() != c.detail {
			t.Errorf("%s: stopped at %q, detail %q; want %q, %q", name, stopped, w.Detail(), c.stopAfter, c.detail)
		}
	}
}

// The repository's catalogue parses, has at least 30 mutations, and plants
// each in the loop, the store, the queue or the codecs.
func TestTheCatalogueParses(t *testing.T) {
	ms := catalogue(t)
	if len(ms) < 30 {
		t.Errorf("%d mutations, want at least 30", len(ms))
	}
	for _, m := range ms {
		for _, e := range m.Edits {
			if dir := filepath.Dir(e.File); dir != "watcher" && dir != "store" && dir != "store/detect" && dir != "queue" && dir != "codec" && dir != "codec/metajson" {
				t.Errorf("%s edits %s: the catalogue covers the loop (watcher/), the store, the queue and the codecs", m.ID, e.File)
			}
		}
	}
}

// Every mutation of the repository's catalogue applies to today's code:
// each anchor occurs exactly once in its file (make mutants would call the
// others stale and plant nothing). A change that moves an anchor fails here,
// in make unit, not months later in a mutation run.
func TestEveryAnchorOccursExactlyOnce(t *testing.T) {
	root := filepath.Join("..", "..")
	read := func(file string) (string, error) {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(file)))
		return string(b), err
	}
	for _, m := range catalogue(t) {
		if _, err := m.Apply(read); err != nil {
			t.Errorf("catalogue.txt line %d: %v (re-anchor it: plant the same bug in today's code; docs/testing.md, \"Mutation testing\")", m.Line, err)
		}
	}
}

func catalogue(t *testing.T) []Mutation {
	t.Helper()
	f, err := os.Open("catalogue.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ms, err := Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}
