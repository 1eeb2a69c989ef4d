package observe

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// The package doc's picture names events by package and type
// (watcher.BackoffStarted): every one it names is a type of that package,
// each package read from its folder at the module root.
func TestTheDocNamesEventsThatExist(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "observe.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	names := regexp.MustCompile(`\b([a-z]+)\.([A-Z][A-Za-z]*)\b`).FindAllStringSubmatch(f.Doc.Text(), -1)
	if len(names) < 5 {
		t.Fatalf("found %d event names in the package doc, want the picture's (at least 5)", len(names))
	}
	types := map[string]map[string]bool{} // package folder → its exported types
	for _, n := range names {
		pkg, name := n[1], n[2]
		if types[pkg] == nil {
			types[pkg] = exportedTypes(t, filepath.Join("..", pkg))
		}
		if !types[pkg][name] {
			t.Errorf("the package doc names %s.%s, which is no type of package %s", pkg, name, pkg)
		}
	}
}

func exportedTypes(t *testing.T, dir string) map[string]bool {
	t.Helper()
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the doc names package %s: %v", filepath.Base(dir), err)
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, file := range files {
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.TYPE {
				for _, s := range g.Specs {
					out[s.(*ast.TypeSpec).Name.Name] = true
				}
			}
		}
	}
	return out
}
