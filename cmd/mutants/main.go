// Command mutants runs the mutation test (make mutants): it plants each bug
// of the catalogue (internal/mutants/catalogue.txt) in turn and asks whether
// the tests notice. The source tree is never written: a mutant is built
// with go test -c -overlay, its mutated files in a temporary directory.
// Each mutant runs the schedule explorer first (watcher's TestExplorer, the
// same with the fast codec, and FuzzExplorer's seeds, -short), then, if the explorer passed, the other
// -short tests of the packages it reaches (watcher, store, queue, codec), and gets
// one verdict:
//
//	killed-by-explorer | killed-by-tests | SURVIVED | stale | build-failed
//
// A stage stops at its first failing test. A stage that runs past its
// timeout counts as failed (a hang is a failure go test reports too).
// Before any mutant, the same stages run on the unmutated tree and must
// pass, so that a failure is the mutant's doing.
//
//	go run ./cmd/mutants                      every mutation, one at a time
//	go run ./cmd/mutants -run 'bookmark|list' the mutations whose id matches
//	go run ./cmd/mutants -check               only whether every mutation applies and compiles (no tests)
//	go run ./cmd/mutants -j 2                 two mutants at once (at most GOMAXPROCS)
//
// The report (report.txt) and each mutant's test log are written to -out.
// It exits 1 unless every mutation was killed, 2 when it could not run.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"rawwatch/internal/mutants"
)

// The explorer stage; the tests stage runs the rest.
const explorerTests = `^(TestExplorer|TestExplorerWithTheFastCodec|FuzzExplorer)$`

// The packages whose -short tests judge a mutant, the explorer's first.
var testPackages = []string{"watcher", "store", "queue", "codec"}

func main() {
	var (
		catalogue = flag.String("catalogue", "internal/mutants/catalogue.txt", "the catalogue, relative to the module root")
		run       = flag.String("run", "", "only the mutations whose id matches this regular expression")
		check     = flag.Bool("check", false, "only check that every mutation applies (no stale anchor) and compiles, and exit")
		jobs      = flag.Int("j", 1, "mutants run at once (at most GOMAXPROCS)")
		timeout   = flag.Duration("timeout", 0, "for each test binary's run (0: 5 times the longest stage's run unmutated, builds apart, at least 2m)")
		out       = flag.String("out", "out/mutants", "where the report and the logs go, relative to the module root")
		noBase    = flag.Bool("skip-baseline", false, "do not first run the stages unmutated (then -timeout 0 means 15m)")
	)
	flag.Parse()
	root, err := moduleRoot()
	if err != nil {
		fatal(err)
	}
	if err := os.Chdir(root); err != nil {
		fatal(err)
	}
	f, err := os.Open(*catalogue)
	if err != nil {
		fatal(err)
	}
	all, err := mutants.Parse(f)
	f.Close()
	if err != nil {
		fatal(fmt.Errorf("%s: %w", *catalogue, err))
	}
	sel := all
	if *run != "" {
		re, err := regexp.Compile(*run)
		if err != nil {
			fatal(err)
		}
		sel = nil
		for _, m := range all {
			if re.MatchString(m.ID) {
				sel = append(sel, m)
			}
		}
	}
	if len(sel) == 0 {
		fatal(errors.New("no mutation selected"))
	}
	if *check {
		os.Exit(checkAll(root, sel))
	}

	fmt.Printf("%d of the %d mutations of %s, each planted alone\n", len(sel), len(all), *catalogue)
	r := &runner{root: root, out: *out, timeout: *timeout}
	if err := os.MkdirAll(filepath.Join(*out, "logs"), 0o755); err != nil {
		fatal(err)
	}
	if r.deps, r.explorerDeps, err = testDeps(); err != nil {
		fatal(err)
	}
	if r.hide, err = externalTestFiles(filepath.Join(root, "watcher")); err != nil {
		fatal(err)
	}
	start := time.Now()
	if !*noBase {
		fmt.Println("baseline: the stages on the unmutated tree ...")
		if err := r.baseline(); err != nil {
			fatal(err)
		}
		fmt.Printf("baseline passed: the explorer ran %s, the other tests %s (builds apart); timeout per run %s\n",
			r.took[0].Round(time.Second), r.took[1].Round(time.Second), r.timeout)
	}
	if r.timeout == 0 {
		r.timeout = 15 * time.Minute
	}

	results := make([]mutants.Result, len(sel))
	next := make(chan int)
	var wg sync.WaitGroup
	var print sync.Mutex
	for range max(1, min(*jobs, runtime.GOMAXPROCS(0))) {
		wg.Go(func() {
			for i := range next {
				results[i] = r.mutate(sel[i])
				print.Lock()
				fmt.Printf("%-40s %-18s %4.0fs  %s\n", sel[i].ID, results[i].Verdict, results[i].Seconds, results[i].Detail)
				print.Unlock()
			}
		})
	}
	for i := range sel {
		next <- i
	}
	close(next)
	wg.Wait()

	report := mutants.Report(results) + fmt.Sprintf("Took %s (%s).\n", time.Since(start).Round(time.Second), time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Print("\n" + report)
	if err := os.WriteFile(filepath.Join(*out, "report.txt"), []byte(report), 0o644); err != nil {
		fatal(err)
	}
	fmt.Printf("report: %s, logs: %s\n", filepath.Join(*out, "report.txt"), filepath.Join(*out, "logs"))
	for _, res := range results {
		if res.Verdict != mutants.KilledByExplorer && res.Verdict != mutants.KilledByTests {
			os.Exit(1) // a survivor, a stale or a broken mutation: the suite or the catalogue needs work
		}
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "mutants:", err)
	os.Exit(2)
}

func moduleRoot() (string, error) {
	b, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(b))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside a Go module")
	}
	return filepath.Dir(mod), nil
}

func readFile(file string) (string, error) {
	b, err := os.ReadFile(filepath.FromSlash(file))
	return string(b), err
}

// checkAll reports every mutation that is stale or does not compile (go
// build of the mutated packages, no tests); 1 if there is one.
func checkAll(root string, ms []mutants.Mutation) int {
	bad := 0
	for _, m := range ms {
		files, err := m.Apply(readFile)
		if err == nil {
			err = compiles(root, files)
		}
		if err != nil {
			fmt.Println(err)
			bad++
		}
	}
	fmt.Printf("%d mutations, %d stale or not compiling\n", len(ms), bad)
	if bad > 0 {
		return 1
	}
	return 0
}

// compiles builds the packages of files, with files' mutated text.
func compiles(root string, files map[string]string) error {
	dir, err := os.MkdirTemp("", "mutant-check-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	replace := map[string]string{}
	pkgs := map[string]bool{}
	for file, text := range files {
		dst := filepath.Join(dir, strings.ReplaceAll(file, "/", "_"))
		if err := os.WriteFile(dst, []byte(text), 0o644); err != nil {
			return err
		}
		replace[filepath.Join(root, filepath.FromSlash(file))] = dst
		pkgs["./"+filepath.ToSlash(filepath.Dir(file))] = true
	}
	ov, _ := json.Marshal(map[string]any{"Replace": replace})
	f := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(f, ov, 0o644); err != nil {
		return err
	}
	args := append([]string{"build", "-overlay", f}, slices.Sorted(maps.Keys(pkgs))...)
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("does not compile: %s", strings.TrimSpace(string(out)))
	}
	return nil
}

// testDeps maps each test package to the packages its test binary is built
// from (a mutant is judged only by the tests that can reach it), and lists
// the packages the explorer runs: the watcher's and its internal tests'
// imports (the fake server, the store, the queue), not its external tests'
// (the control plane, the comparison harness).
func testDeps() (deps map[string]map[string]bool, explorer map[string]bool, err error) {
	b, err := exec.Command("go", "list", "-m").Output()
	if err != nil {
		return nil, nil, fmt.Errorf("go list -m: %w", err)
	}
	prefix := strings.TrimSpace(string(b)) + "/"
	list := func(args ...string) (map[string]bool, error) {
		b, err := exec.Command("go", append([]string{"list", "-deps", "-f", "{{.ImportPath}}"}, args...)...).Output()
		if err != nil {
			return nil, fmt.Errorf("go list -deps %s: %w", strings.Join(args, " "), err)
		}
		set := map[string]bool{}
		for _, line := range strings.Split(string(b), "\n") {
			if ip, _, _ := strings.Cut(line, " "); strings.HasPrefix(ip, prefix) {
				set[strings.TrimPrefix(ip, prefix)] = true
			}
		}
		return set, nil
	}
	deps = map[string]map[string]bool{}
	for _, p := range testPackages {
		if deps[p], err = list("-test", "./"+p); err != nil {
			return nil, nil, err
		}
	}
	// The explorer's binary: the watcher with its internal tests, which
	// run the fake server, the store and the queue, and the explorer with
	// the fast codec (fastExplorer), which runs the codec.
	b, err = exec.Command("go", "list", "-f", `{{join .TestImports "\n"}}`, "./watcher").Output()
	if err != nil {
		return nil, nil, fmt.Errorf("go list ./watcher: %w", err)
	}
	pkgs := []string{"./watcher", "./codec"}
	for _, ip := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(ip, prefix) {
			pkgs = append(pkgs, ip)
		}
	}
	explorer, err = list(pkgs...)
	return deps, explorer, err
}

// fastExplorer is the external test file that runs the explorer with the
// fast codec: the one external file the explorer's binary keeps.
const fastExplorer = "explore_codec_test.go"

// externalTestFiles lists the test files of dir in its external test
// package (package x_test), but fastExplorer.
func externalTestFiles(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		return nil, err
	}
	var ext []string
	for _, f := range files {
		ast, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.PackageClauseOnly)
		if err != nil {
			return nil, err
		}
		if strings.HasSuffix(ast.Name.Name, "_test") && filepath.Base(f) != fastExplorer {
			ext = append(ext, f)
		}
	}
	return ext, nil
}

type runner struct {
	root, out string
	timeout   time.Duration
	deps      map[string]map[string]bool
	// explorerDeps: the packages the explorer runs (the watcher, the fake
	// server, what they import); a mutant elsewhere skips the explorer.
	explorerDeps map[string]bool
	// hide: the watcher's external test files, left out of the explorer's binary.
	hide []string
	// took is how long the explorer and the other tests ran unmutated
	// (their builds apart).
	took [2]time.Duration
}

// baseline runs both stages on the unmutated tree; they must pass.
func (r *runner) baseline() error {
	dir, err := os.MkdirTemp("", "mutants-baseline-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	log, err := os.Create(filepath.Join(r.out, "logs", "baseline.log"))
	if err != nil {
		return err
	}
	defer log.Close()
	b := &build{dir: dir, log: log, hide: r.hide}
	timeout := r.timeout
	if timeout == 0 {
		timeout = time.Hour
	}
	if st, detail, err := b.explorer(timeout); err != nil || st != mutants.Passed {
		return fmt.Errorf("the explorer fails on the unmutated tree (%s%v); see %s", detail, err, log.Name())
	}
	r.took[0] = b.ran
	if st, detail, err := b.tests(testPackages, timeout); err != nil || st != mutants.Passed {
		return fmt.Errorf("the tests fail on the unmutated tree (%s%v); see %s", detail, err, log.Name())
	}
	r.took[1] = b.ran - r.took[0]
	if r.timeout == 0 {
		r.timeout = max(5*max(r.took[0], r.took[1]), 2*time.Minute)
	}
	return nil
}

// mutate plants one mutation and judges it.
func (r *runner) mutate(m mutants.Mutation) mutants.Result {
	start := time.Now()
	res := mutants.Result{ID: m.ID, Description: m.Description}
	finish := func(stale, build error, explorer, tests mutants.Stage, detail string) mutants.Result {
		res.Verdict = mutants.Classify(stale, build, explorer, tests)
		res.Detail = detail
		res.Seconds = time.Since(start).Seconds()
		return res
	}
	files, err := m.Apply(readFile)
	if err != nil {
		return finish(err, nil, mutants.NotRun, mutants.NotRun, err.Error())
	}
	dir, err := os.MkdirTemp("", "mutant-"+m.ID+"-")
	if err != nil {
		fatal(err)
	}
	defer os.RemoveAll(dir)
	log, err := os.Create(filepath.Join(r.out, "logs", m.ID+".log"))
	if err != nil {
		fatal(err)
	}
	defer log.Close()
	fmt.Fprintf(log, "%s: %s\n", m.ID, m.Description)
	b := &build{dir: dir, log: log, replace: map[string]string{}, hide: r.hide}
	var pkgs []string // the mutated packages
	for file, text := range files {
		dst := filepath.Join(dir, "src", filepath.FromSlash(file))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			fatal(err)
		}
		if err := os.WriteFile(dst, []byte(text), 0o644); err != nil {
			fatal(err)
		}
		b.replace[filepath.Join(r.root, filepath.FromSlash(file))] = dst
		pkgs = append(pkgs, filepath.ToSlash(filepath.Dir(file)))
	}
	// The test packages that reach the mutated ones, the mutated first.
	var reach []string
	for _, p := range testPackages {
		if slices.ContainsFunc(pkgs, func(q string) bool { return r.deps[p][q] }) {
			reach = append(reach, p)
		}
	}
	slices.SortStableFunc(reach, func(a, b string) int {
		return boolInt(!slices.Contains(pkgs, a)) - boolInt(!slices.Contains(pkgs, b))
	})
	explorer := mutants.NotRun
	res.Explorable = slices.ContainsFunc(pkgs, func(q string) bool { return r.explorerDeps[q] })
	if res.Explorable {
		st, detail, err := b.explorer(r.timeout)
		var be *buildError
		if errors.As(err, &be) {
			return finish(nil, err, mutants.NotRun, mutants.NotRun, be.summary())
		}
		if err != nil {
			fatal(err)
		}
		if explorer = st; st == mutants.Failed {
			return finish(nil, nil, explorer, mutants.NotRun, detail)
		}
	}
	st, detail, err := b.tests(reach, r.timeout)
	var be *buildError
	if errors.As(err, &be) {
		return finish(nil, err, explorer, mutants.NotRun, be.summary())
	}
	if err != nil {
		fatal(err)
	}
	if st == mutants.Passed {
		detail = "passed: " + strings.Join(reach, ", ")
		if res.Explorable {
			detail = "passed: the explorer, " + strings.Join(reach, ", ")
		}
	}
	return finish(nil, nil, explorer, st, detail)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// build holds one tree's (mutated or not) test binaries.
type build struct {
	dir string
	log io.Writer
	// replace maps a source file to its mutated copy; hide lists the test
	// files the explorer's binary leaves out.
	replace map[string]string
	hide    []string
	bins    map[string]string
	// ran is the time spent running test binaries.
	ran time.Duration
}

type buildError struct {
	pkg, out string
}

func (e *buildError) Error() string { return fmt.Sprintf("go test -c ./%s: %s", e.pkg, e.out) }

// summary is the build's first error line.
func (e *buildError) summary() string {
	for _, l := range strings.Split(e.out, "\n") {
		if strings.Contains(l, ".go:") {
			return strings.TrimSpace(l)
		}
	}
	return strings.TrimSpace(e.out)
}

// binary builds pkg's test binary (once). The explorer's (explorer true) is
// the watcher's without its external test files (package watcher_test):
// the explorer is an internal test, and they bring in the control plane,
// the comparison harness and what they import, all to be rebuilt for
// every mutant of the watcher.
func (b *build) binary(pkg string, explorer bool) (string, error) {
	name := pkg
	if explorer {
		name = "explorer"
	}
	if bin, ok := b.bins[name]; ok {
		return bin, nil
	}
	bin := filepath.Join(b.dir, name+".test")
	replace := maps.Clone(b.replace)
	if replace == nil {
		replace = map[string]string{}
	}
	if explorer {
		for _, f := range b.hide {
			replace[f] = "" // deleted, for the build
		}
	}
	args := []string{"test", "-c", "-o", bin}
	if len(replace) > 0 {
		ov, _ := json.Marshal(map[string]any{"Replace": replace})
		f := filepath.Join(b.dir, name+".overlay.json")
		if err := os.WriteFile(f, ov, 0o644); err != nil {
			return "", err
		}
		args = append(args, "-overlay", f)
	}
	out, err := exec.Command("go", append(args, "./"+pkg)...).CombinedOutput()
	if err != nil {
		fmt.Fprintf(b.log, "go %s ./%s:\n%s\n", strings.Join(args, " "), pkg, out)
		return "", &buildError{pkg: pkg, out: string(out)}
	}
	if b.bins == nil {
		b.bins = map[string]string{}
	}
	b.bins[name] = bin
	return bin, nil
}

// explorer runs the explorer stage.
func (b *build) explorer(timeout time.Duration) (mutants.Stage, string, error) {
	bin, err := b.binary("watcher", true)
	if err != nil {
		return mutants.NotRun, "", err
	}
	return b.run(bin, "watcher", timeout, "-test.run", explorerTests)
}

// tests runs the other -short tests of pkgs, in order, until one fails.
func (b *build) tests(pkgs []string, timeout time.Duration) (mutants.Stage, string, error) {
	for _, p := range pkgs {
		bin, err := b.binary(p, false)
		if err != nil {
			return mutants.NotRun, "", err
		}
		var args []string
		if p == "watcher" {
			args = []string{"-test.skip", explorerTests}
		}
		st, detail, err := b.run(bin, p, timeout, args...)
		if err != nil || st == mutants.Failed {
			return st, detail, err
		}
	}
	return mutants.Passed, "", nil
}

// run runs a test binary in its package's directory with -short and -v,
// and stops it at the first failing test: Failed, with that test's name and
// first message. A run past timeout is Failed too.
func (b *build) run(bin, pkg string, timeout time.Duration, args ...string) (mutants.Stage, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout+30*time.Second)
	defer cancel()
	defer func(start time.Time) { b.ran += time.Since(start) }(time.Now())
	args = append([]string{"-test.short", "-test.v", "-test.count=1", "-test.failfast", "-test.timeout", timeout.String()}, args...)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = pkg
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	fmt.Fprintf(b.log, "\n$ (cd %s && %s %s)\n", pkg, filepath.Base(bin), strings.Join(args, " "))
	if err := cmd.Start(); err != nil {
		return mutants.NotRun, "", err
	}
	// Buffered: the reader hands over the failure and reads on to the end,
	// for Wait waits until all the output is read.
	scan := make(chan string, 1)
	go func() {
		defer close(scan)
		var w mutants.FailWatch
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
		for sc.Scan() {
			fmt.Fprintln(b.log, sc.Text())
			if w.Line(sc.Text()) {
				cmd.Process.Kill() // enough seen: the mutant is killed
				break
			}
		}
		scan <- w.Detail()
		io.Copy(io.Discard, pr) // the rest, or what a line too long left
	}()
	err := cmd.Wait()
	pw.Close()
	detail := <-scan
	var exit *exec.ExitError
	switch {
	case detail != "":
		return mutants.Failed, pkg + ": " + detail, nil
	case ctx.Err() != nil:
		return mutants.Failed, fmt.Sprintf("%s: no verdict within %s", pkg, timeout), nil
	case errors.As(err, &exit):
		return mutants.Failed, fmt.Sprintf("%s: %v", pkg, err), nil
	case err != nil:
		return mutants.NotRun, "", err
	}
	return mutants.Passed, "", nil
}
