// Package mutants is the pure part of the mutation test (make mutants,
// cmd/mutants): the catalogue of mutations, applying one to source text,
// and the verdict on it. A mutation is a small, semantic bug planted on
// purpose — a skipped reset, a dropped delta, an off-by-one in pages — as an
// exact anchor (text that must occur exactly once in its file) and its
// replacement. An anchor that no longer occurs exactly once makes the
// mutation stale: it is reported, never applied somewhere else or skipped
// in silence.
//
// The catalogue is a text file of blocks:
//
//	=== <id>
//	<one line: the bug, as a user would meet it>
//	--- <file, relative to the module root>
//	<anchor: one or more lines, tabs and all>
//	+++
//	<replacement: zero or more lines>
//
// A mutation may have several "---" edits. Lines starting with "# " (or a
// lone "#") are comments, anywhere; trailing blank lines of an anchor or a
// replacement are dropped, so blank lines may separate blocks. An anchor may
// be part of a line: the replacement takes its place, the rest of the line
// stays.
package mutants

import (
	"bufio"
	"fmt"
	"io"
	"path"
	"regexp"
	"strings"
)

// Edit replaces Anchor, which must occur exactly once in File, with
// Replacement.
type Edit struct {
	File, Anchor, Replacement string
}

// Mutation is one planted bug.
type Mutation struct {
	ID, Description string
	Edits           []Edit
	// Line is where the mutation starts in the catalogue.
	Line int
}

var idPattern = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)

// Parse reads a catalogue. It refuses a malformed one: a bad or repeated id,
// no description, no edit, an empty anchor, an edit that changes nothing,
// a file that is not a non-test Go file.
func Parse(r io.Reader) ([]Mutation, error) {
	var (
		ms     []Mutation
		cur    *Mutation
		edit   *Edit
		inRepl bool
		lines  []string
		n      int
	)
	seen := map[string]int{}
	flush := func() {
		if edit == nil {
			return
		}
		text := strings.Join(trimTrailingBlank(lines), "\n")
		if inRepl {
			edit.Replacement = text
		} else {
			edit.Anchor = text
		}
		lines = nil
	}
	closeEdit := func() error {
		if edit == nil {
			return nil
		}
		flush()
		switch {
		case !inRepl:
			return fmt.Errorf("line %d: %s: the edit of %s has no +++ line", n, cur.ID, edit.File)
		case strings.TrimSpace(edit.Anchor) == "":
			return fmt.Errorf("line %d: %s: the edit of %s has an empty anchor", n, cur.ID, edit.File)
		case edit.Anchor == edit.Replacement:
			return fmt.Errorf("line %d: %s: the edit of %s changes nothing", n, cur.ID, edit.File)
		}
		cur.Edits = append(cur.Edits, *edit)
		edit, inRepl = nil, false
		return nil
	}
	closeMutation := func() error {
		if err := closeEdit(); err != nil {
			return err
		}
		if cur == nil {
			return nil
		}
		switch {
		case cur.Description == "":
			return fmt.Errorf("line %d: %s has no description", cur.Line, cur.ID)
		case len(cur.Edits) == 0:
			return fmt.Errorf("line %d: %s has no edit (--- file)", cur.Line, cur.ID)
		}
		ms = append(ms, *cur)
		cur = nil
		return nil
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		n++
		line := sc.Text()
		switch {
		case line == "#" || strings.HasPrefix(line, "# "):
			continue
		case strings.HasPrefix(line, "=== "):
			if err := closeMutation(); err != nil {
				return nil, err
			}
			id := strings.TrimSpace(strings.TrimPrefix(line, "=== "))
			if !idPattern.MatchString(id) {
				return nil, fmt.Errorf("line %d: id %q: want lower-case words joined by '-'", n, id)
			}
			if at, dup := seen[id]; dup {
				return nil, fmt.Errorf("line %d: id %s repeats the one on line %d", n, id, at)
			}
			seen[id] = n
			cur = &Mutation{ID: id, Line: n}
		case cur == nil:
			if strings.TrimSpace(line) != "" {
				return nil, fmt.Errorf("line %d: text outside a mutation (=== id): %q", n, line)
			}
		case strings.HasPrefix(line, "--- "):
			if err := closeEdit(); err != nil {
				return nil, err
			}
			file := strings.TrimSpace(strings.TrimPrefix(line, "--- "))
			if file != path.Clean(file) || path.IsAbs(file) || strings.HasPrefix(file, "../") ||
				!strings.HasSuffix(file, ".go") || strings.HasSuffix(file, "_test.go") {
				return nil, fmt.Errorf("line %d: %s: %q is not a non-test Go file under the module root", n, cur.ID, file)
			}
			if cur.Description == "" {
				return nil, fmt.Errorf("line %d: %s has no description before its first edit", n, cur.ID)
			}
			edit = &Edit{File: file}
		case line == "+++":
			if edit == nil || inRepl {
				return nil, fmt.Errorf("line %d: %s: +++ outside an anchor", n, cur.ID)
			}
			flush()
			inRepl = true
		case edit != nil:
			lines = append(lines, line)
		case cur.Description == "":
			cur.Description = strings.TrimSpace(line)
		case strings.TrimSpace(line) != "":
			return nil, fmt.Errorf("line %d: %s: a second description line, or text before --- file: %q", n, cur.ID, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if err := closeMutation(); err != nil {
		return nil, err
	}
	return ms, nil
}

func trimTrailingBlank(lines []string) []string {
	for len(lines) > 0 && strings.TrimSpace(lines[len(lines)-1]) == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// StaleError: an anchor does not occur exactly once in its file (the code
// moved under the catalogue); the mutation must be re-anchored.
type StaleError struct {
	ID, File string
	// Anchor is the anchor's first line, for the report.
	Anchor string
	// Count is how often the anchor occurs (0, or 2 and more); -1: the file
	// could not be read.
	Count int
	Err   error
}

func (e *StaleError) Error() string {
	switch e.Count {
	case -1:
		return fmt.Sprintf("%s: %s: %v", e.ID, e.File, e.Err)
	case 0:
		return fmt.Sprintf("%s: anchor %q not found in %s", e.ID, e.Anchor, e.File)
	}
	return fmt.Sprintf("%s: anchor %q occurs %d times in %s, not once", e.ID, e.Anchor, e.Count, e.File)
}

// Apply returns the mutated text of every file m edits; read gives a file's
// current text. Edits of one file apply in order, each to the result of the
// one before. Any anchor that does not occur exactly once makes it a
// *StaleError, and nothing is returned.
func (m Mutation) Apply(read func(file string) (string, error)) (map[string]string, error) {
	out := map[string]string{}
	for _, e := range m.Edits {
		text, ok := out[e.File]
		if !ok {
			var err error
			if text, err = read(e.File); err != nil {
				return nil, &StaleError{ID: m.ID, File: e.File, Anchor: firstLine(e.Anchor), Count: -1, Err: err}
			}
		}
		if c := strings.Count(text, e.Anchor); c != 1 {
			return nil, &StaleError{ID: m.ID, File: e.File, Anchor: firstLine(e.Anchor), Count: c}
		}
		out[e.File] = strings.Replace(text, e.Anchor, e.Replacement, 1)
	}
	return out, nil
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " …"
	}
	return s
}

// Stage is what one stage of tests (the explorer, then the other tests)
// made of a mutant.
type Stage int

const (
	// NotRun: the stage did not run (an earlier one decided).
	NotRun Stage = iota
	// Passed: every test of the stage passed: the mutant went unseen.
	Passed
	// Failed: a test failed, or the stage ran out of time (a hang is a
	// failure go test reports too).
	Failed
)

// Verdict is the fate of one mutation.
type Verdict int

const (
	KilledByExplorer Verdict = iota
	KilledByTests
	Survived
	Stale
	// BuildFailed: the mutant does not compile; a catalogue bug, not a kill.
	BuildFailed
)

func (v Verdict) String() string {
	return [...]string{"killed-by-explorer", "killed-by-tests", "SURVIVED", "stale", "build-failed"}[v]
}

// Classify gives the verdict from what happened to a mutation: stale
// (anchors moved) and build errors first, then the first stage that failed.
func Classify(stale, build error, explorer, tests Stage) Verdict {
	switch {
	case stale != nil:
		return Stale
	case build != nil:
		return BuildFailed
	case explorer == Failed:
		return KilledByExplorer
	case tests == Failed:
		return KilledByTests
	}
	return Survived
}

// Result is one mutation's line of the report.
type Result struct {
	ID, Description string
	Verdict         Verdict
	// Detail: what killed it (the first failing test) or why it is stale.
	Detail string
	// Seconds the mutation took, from apply to verdict.
	Seconds float64
	// Explorable: the mutation is in code the explorer runs (the loop, what
	// it calls, and the queue its consumer drains), so the explorer stage ran.
	Explorable bool
}

// Report is the table (one line per mutation, in catalogue order) and a
// summary: the count of each verdict, and the kill rates over the
// mutations that applied and built.
func Report(rs []Result) string {
	var b strings.Builder
	width := len("mutation")
	for _, r := range rs {
		width = max(width, len(r.ID))
	}
	fmt.Fprintf(&b, "%-*s  %-18s  %6s  %s\n", width, "mutation", "verdict", "time", "detail")
	for _, r := range rs {
		fmt.Fprintf(&b, "%-*s  %-18s  %5.0fs  %s\n", width, r.ID, r.Verdict, r.Seconds, r.Detail)
	}
	b.WriteString("\n" + Summary(rs) + "\n")
	return b.String()
}

// Summary is the one-paragraph tally of Report.
func Summary(rs []Result) string {
	var count [BuildFailed + 1]int
	explorable := 0
	for _, r := range rs {
		count[r.Verdict]++
		if r.Explorable && r.Verdict <= Survived {
			explorable++
		}
	}
	ran := count[KilledByExplorer] + count[KilledByTests] + count[Survived]
	pct := func(n, of int) string {
		if of == 0 {
			return "-"
		}
		return fmt.Sprintf("%.0f%%", 100*float64(n)/float64(of))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d mutations: %d killed by the explorer, %d by the other tests, %d SURVIVED, %d stale, %d build-failed.\n",
		len(rs), count[KilledByExplorer], count[KilledByTests], count[Survived], count[Stale], count[BuildFailed])
	fmt.Fprintf(&b, "Of the %d that applied and built: %s killed by the explorer alone, %s killed in all; of the %d in code the explorer runs: %s killed by it.",
		ran, pct(count[KilledByExplorer], ran), pct(count[KilledByExplorer]+count[KilledByTests], ran),
		explorable, pct(count[KilledByExplorer], explorable))
	var survivors []string
	for _, r := range rs {
		if r.Verdict == Survived {
			survivors = append(survivors, r.ID)
		}
	}
	if len(survivors) > 0 {
		fmt.Fprintf(&b, "\nSURVIVED: %s.", strings.Join(survivors, ", "))
	}
	return b.String()
}

// FailWatch reads go test -v output, line by line, for the first failing
// test and its message. In -v output a test's messages come before its
// "--- FAIL" line (they are streamed, under "=== RUN/CONT/NAME" headers), or
// after it; a panic (a test timeout among them) may come with no "--- FAIL"
// line at all.
type FailWatch struct {
	cur   string              // the test the output is about
	msgs  map[string][]string // each test's first message lines
	order []string            // the tests of msgs, in the order they spoke
	test  string              // the first failing test
	lines []string            // its messages
	panic string
	after int // lines read since its --- FAIL line
}

var (
	failLine   = regexp.MustCompile(`^\s*--- FAIL: (\S+)`)
	resultLine = regexp.MustCompile(`^\s*--- (?:PASS|FAIL|SKIP): `)
	headerLine = regexp.MustCompile(`^=== (?:RUN|CONT|NAME|PAUSE)\s+(\S+)`)
)

// Line takes one line of output; true once the first failure is known well
// enough to stop the run.
func (w *FailWatch) Line(l string) bool {
	if w.msgs == nil {
		w.msgs = map[string][]string{}
	}
	if strings.HasPrefix(l, "panic: ") {
		if w.panic == "" {
			w.panic = strings.TrimSpace(l)
		}
		return w.test != ""
	}
	if w.test != "" {
		// After the --- FAIL line: its messages, if they were not streamed
		// before it (a few lines at most).
		if strings.HasPrefix(l, "    ") && !resultLine.MatchString(l) {
			w.lines = append(w.lines, strings.TrimSpace(l))
		}
		w.after++
		return len(w.lines) >= 3 || w.after >= 6
	}
	if m := headerLine.FindStringSubmatch(l); m != nil {
		w.cur = m[1]
		return false
	}
	if m := failLine.FindStringSubmatch(l); m != nil {
		// In -v output a parent's --- FAIL line may come before its
		// subtests': the first of them (or it) to have spoken is the one.
		w.test = m[1]
		for _, t := range w.order {
			if t == m[1] || strings.HasPrefix(t, m[1]+"/") {
				w.test = t
				break
			}
		}
		w.lines = w.msgs[w.test]
		return len(w.lines) > 0
	}
	if strings.HasPrefix(l, "    ") && w.cur != "" && len(w.msgs[w.cur]) < 3 {
		if len(w.msgs[w.cur]) == 0 {
			w.order = append(w.order, w.cur)
		}
		w.msgs[w.cur] = append(w.msgs[w.cur], strings.TrimSpace(l))
	}
	return false
}

// Detail is the first failure, as one line: the test and its message (the
// explorer's "broke:" line when there is one), or the panic.
func (w *FailWatch) Detail() string {
	if w.test == "" {
		return w.panic
	}
	msg := ""
	for _, l := range w.lines {
		if i := strings.Index(l, "broke: "); i >= 0 {
			msg = l[i+len("broke: "):]
			break
		}
		if msg == "" {
			msg = l
		}
	}
	if msg == "" {
		msg = w.panic
	}
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	if msg == "" {
		return w.test
	}
	return w.test + ": " + msg
}
