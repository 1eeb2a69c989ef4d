package main

import (
	"cmp"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"rawwatch/openfinding"
)

// The hand-written machinery must not lean on client-go's: no informers,
// reflectors, DeltaFIFO, indexers or workqueue in watcher/, store/, queue/ or
// reconcile/ (the comparison harness is the one place they may appear).
// client-go's REST transport imports workqueue internally for certificate
// rotation; that is a dependency of the HTTP client, not of this code, so the
// rule is about what these packages import themselves.
func TestRawPackagesDoNotImportInformerMachinery(t *testing.T) {
	forbidden := []string{
		"k8s.io/client-go/tools/cache",
		"k8s.io/client-go/util/workqueue",
		"k8s.io/client-go/informers",
		"k8s.io/client-go/tools/pager",
		"k8s.io/client-go/tools/watch",
		"sigs.k8s.io/controller-runtime",
	}
	for _, dir := range []string{"watcher", "store", "queue", "reconcile", "reconcile/myresource", "store/share", "store/detect"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no Go files in %s: %v", dir, err)
		}
		for _, file := range files {
			f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range f.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				for _, bad := range forbidden {
					if path == bad || strings.HasPrefix(path, bad+"/") {
						t.Errorf("%s imports %s", file, path)
					}
				}
			}
		}
	}
}

// controller-runtime is one of the anchors the comparison harness measures
// against (compare/crconsumer.go): no other package may import it, so that
// the controller itself never leans on it.
func TestOnlyCompareImportsControllerRuntime(t *testing.T) {
	var checked int
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch {
			case path == "compare", path == "out", path == "bin", strings.HasPrefix(d.Name(), ".") && path != ".":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		checked++
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == "sigs.k8s.io/controller-runtime" || strings.HasPrefix(p, "sigs.k8s.io/controller-runtime/") {
				t.Errorf("%s imports %s: controller-runtime belongs in compare/ only", path, p)
			}
		}
		return nil
	})
	if err != nil || checked < 50 {
		t.Fatalf("walked %d Go files: %v", checked, err)
	}
}

// The learner's path decodes one plain way (watcher.JSONCodec); what makes
// decoding fast lives in codec/, above the watcher: codec implements the
// watcher's Codec seam and may import the watcher (its exported types) and
// its own packages, nothing else of this module; metajson, at the bottom,
// imports none of it. The path's packages import no codec (their tests,
// package watcher_test, may: they run the explorer with the fast codec).
// Held: direct imports only. Not held: what they link through a package
// they import; reconcile/myresource links codec/metajson through the API
// type's own decoder (api/v1alpha1's DecodeJSONFrom), which the plain path
// never calls (TestThePlainPathLinksNoCodec, an open finding kept by design:
// docs/watcher.md says why).
func TestTheCodecsSitAboveTheWatcher(t *testing.T) {
	const module = "rawwatch/"
	allowed := map[string][]string{
		"codec":          {"rawwatch/watcher", "rawwatch/store", "rawwatch/codec/"},
		"codec/metajson": {},
		"watcher":        {"rawwatch/store", "rawwatch/observe", "rawwatch/shard"},
		"store":          {"rawwatch/store/"},
		// The store's optional layers sit below it and know no store.
		"store/share":  {},
		"store/detect": {},
		"queue":        {"rawwatch/observe"},
		"reconcile":    {"rawwatch/"},
		// MyResource's reconciler sits beside the generic Controller, below it:
		// it knows the API type and the store, not the loop that calls it.
		"reconcile/myresource": {"rawwatch/api/", "rawwatch/store"},
	}
	for dir, ok := range allowed {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no Go files in %s: %v", dir, err)
		}
		for _, file := range files {
			if strings.HasSuffix(file, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range f.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				if !strings.HasPrefix(path, module) {
					continue
				}
				if dir != "codec" && dir != "codec/metajson" && strings.HasPrefix(path, "rawwatch/codec") {
					t.Errorf("%s imports %s: the plain path imports no codec", file, path)
					continue
				}
				fine := false
				for _, p := range ok {
					fine = fine || path == p || strings.HasSuffix(p, "/") && strings.HasPrefix(path, p)
				}
				if !fine {
					t.Errorf("%s imports %s: %s may import, of this module, only %v", file, path, dir, ok)
				}
			}
		}
	}
}

// The plain path links no codec either: not through a package it imports
// (the API type's package, whose own fast decoder imports codec/metajson,
// is one every reconciler imports). TestTheCodecsSitAboveTheWatcher reads
// direct imports only.
func TestThePlainPathLinksNoCodec(t *testing.T) {
	openfinding.Skip(t)
	for _, pkg := range []string{"./watcher", "./store", "./queue", "./reconcile", "./reconcile/myresource"} {
		out, err := exec.Command("go", "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			if strings.HasPrefix(dep, "rawwatch/codec") {
				t.Errorf("%s links %s", pkg, dep)
			}
		}
	}
}

// Imports between top-level folders only run down: the packages of a
// folder, and their tests inside the package, import from folders below
// it only, so the folders stand in an order, bottom to top, in which they
// can be read. internal/ holds test infrastructure and the program's own
// small parts; what the lower folders' tests share (wire, openfinding)
// sits at the bottom, and what assembles the program (app) at the top. A
// test package of its own (package x_test) is above what it tests and is
// not held. codec/metajson counts as a folder of its own: it imports
// nothing of the module (TestTheCodecsSitAboveTheWatcher), and the API
// type decodes with it.
func TestImportsRunDown(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}} {{join .TestImports " "}}`, "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const module = "rawwatch"
	folder := func(pkg string) string {
		p := strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
		if p == "codec/metajson" {
			return p
		}
		f, _, _ := strings.Cut(p, "/")
		return cmp.Or(f, ".")
	}
	// why[a][b] is one import that makes folder a import folder b.
	why := map[string]map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		from := folder(fields[0])
		for _, imp := range fields[1:] {
			if imp != module && !strings.HasPrefix(imp, module+"/") {
				continue
			}
			if to := folder(imp); to != from {
				if why[from] == nil {
					why[from] = map[string]string{}
				}
				why[from][to] = fields[0] + " imports " + imp
			}
		}
	}
	if len(why) < 20 {
		t.Fatalf("only %d folders import others: is go list's output read right?", len(why))
	}
	// A depth-first walk: a folder met again while its own walk is open
	// closes a cycle.
	const open, done = 1, 2
	state := map[string]int{}
	var path []string
	var walk func(f string)
	walk = func(f string) {
		state[f] = open
		path = append(path, f)
		for _, to := range slices.Sorted(maps.Keys(why[f])) {
			switch state[to] {
			case open:
				cycle := append(slices.Clone(path[slices.Index(path, to):]), to)
				var steps []string
				for i := range len(cycle) - 1 {
					steps = append(steps, why[cycle[i]][cycle[i+1]])
				}
				t.Errorf("imports run up: %s\n\t%s", strings.Join(cycle, " → "), strings.Join(steps, "\n\t"))
			case 0:
				walk(to)
			}
		}
		path = path[:len(path)-1]
		state[f] = done
	}
	for _, f := range slices.Sorted(maps.Keys(why)) {
		if state[f] == 0 {
			walk(f)
		}
	}
}
