package archtest

import (
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// planes are the values a package doc's "Plane:" line may name, defined in
// docs/architecture.md ("The planes").
var planes = map[string]bool{
	"root":         true, // the trusted side with host privileges: builds sandboxes, reads evidence, opens the store, asks policy
	"unprivileged": true, // the gateway processes that parse agent bytes: no capabilities, no store, no policy
	"sandbox":      true, // runs inside the boundary (the sandbox init as PID 1)
	"CLI":          true, // flags and printing; as a daemon client it runs with the caller's own uid
	"test-only":    true, // linked into tests only
	"any":          true, // vocabulary linked into every plane; holds no authority of its own
}

// pending names packages whose doc is not checked yet, each with why.
// Issue 10 is rewriting them on other branches, and their authors write
// the new docs there; whoever merges those branches fixes each doc and
// removes its entry. An entry ending in "/..." covers the package and
// everything below it. A pending package whose doc already passes is
// logged, so the set can only shrink.
var pending = map[string]string{}

// TestPackageDocs checks the doc of every package under internal/ and cmd/.
func TestPackageDocs(t *testing.T) {
	root := repoRoot(t)
	pkgs, err := packageDirs(root, "internal", "cmd")
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 10 {
		t.Fatalf("found %d packages under internal/ and cmd/ of %s; the walk is broken", len(pkgs), root)
	}
	for _, rel := range pkgs {
		t.Run(rel, func(t *testing.T) {
			problems := checkPackage(filepath.Join(root, rel))
			if why, ok := isPending(rel); ok {
				if len(problems) == 0 {
					t.Logf("%s is in the pending set (%s) but its doc passes: remove it from pending", rel, why)
				}
				for _, p := range problems {
					t.Logf("package %s is pending (%s), not checked yet: %s", rel, why, p)
				}
				return
			}
			for _, p := range problems {
				t.Errorf("package %s: %s", rel, p)
			}
		})
	}
}

// isPending reports whether rel is in the pending set, and why.
func isPending(rel string) (string, bool) {
	if why, ok := pending[rel]; ok {
		return why, true
	}
	for k, why := range pending {
		if base, ok := strings.CutSuffix(k, "/..."); ok && (rel == base || strings.HasPrefix(rel, base+"/")) {
			return why, true
		}
	}
	return "", false
}

// TestCheckPackage shows that checkPackage finds each kind of missing
// piece (and passes a complete doc), so TestPackageDocs can fail.
func TestCheckPackage(t *testing.T) {
	const good = "// Package p owns the widgets.\n//\n// Plane: root.\n//\n// It must never leak a widget.\npackage p\n"
	tests := []struct {
		name  string
		files map[string]string
		want  []string // substrings of the problems, in order; none: passes
	}{
		{"complete", map[string]string{"doc.go": good, "p.go": "package p\n"}, nil},
		{"several planes", map[string]string{"doc.go": "// Package p is shared.\n//\n// Plane: root, CLI and\n// unprivileged (the redactor).\n// It must never log a value.\npackage p\n"}, nil},
		{"command", map[string]string{"doc.go": "// Command c is a binary.\n//\n// Plane: CLI. It must never print a secret.\npackage main\n"}, nil},
		{"no doc.go", map[string]string{"p.go": "// Package p owns the widgets.\npackage p\n"}, []string{"no doc.go", "package comment outside doc.go: p.go"}},
		{"doc.go without comment", map[string]string{"doc.go": "package p\n"}, []string{"doc.go has no package comment"}},
		{"no plane", map[string]string{"doc.go": "// Package p owns the widgets.\n//\n// It must never leak a widget.\npackage p\n"}, []string{`no line starting "Plane:"`}},
		{"unknown plane", map[string]string{"doc.go": "// Package p owns the widgets.\n//\n// Plane: shared by the root plane.\n// It must never leak a widget.\npackage p\n"}, []string{`unknown plane "shared by the root plane"`}},
		{"empty plane", map[string]string{"doc.go": "// Package p owns the widgets.\n//\n// Plane: (none).\n// It must never leak a widget.\npackage p\n"}, []string{"names no plane"}},
		{"no must never", map[string]string{"doc.go": "// Package p owns the widgets.\n//\n// Plane: root.\npackage p\n"}, []string{`does not say what it must never do`}},
		{"wrong opening", map[string]string{"doc.go": "// Widgets live here.\n//\n// Plane: root. It must never leak.\npackage p\n"}, []string{`should start "Package p "`}},
		{"second package comment", map[string]string{"doc.go": good, "p.go": "// Package p again.\npackage p\n"}, []string{"package comment outside doc.go: p.go"}},
		{"test files ignored", map[string]string{"doc.go": good, "p_test.go": "// Package p tests.\npackage p\n"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, src := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got := checkPackage(dir)
			if len(got) != len(tc.want) {
				t.Fatalf("checkPackage(%s) = %q, want %d problems like %q", tc.name, got, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("checkPackage(%s) problem %d = %q, want it to mention %q", tc.name, i, got[i], w)
				}
			}
		})
	}
}

// checkPackage returns what is missing from the doc of the package in dir:
// a doc.go with the package comment (and no package comment in another
// file), opening "Package <name> " ("Command " for a main package), a line
// starting "Plane:" that names known planes, and "must never".
func checkPackage(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return []string{err.Error()}
	}
	var problems, others []string
	var doc, name string
	haveDocGo := false
	fset := token.NewFileSet()
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		name = f.Name.Name
		switch {
		case n == "doc.go":
			haveDocGo = true
			if f.Doc != nil {
				doc = f.Doc.Text()
			}
		case f.Doc != nil:
			others = append(others, n)
		}
	}
	if !haveDocGo {
		problems = append(problems, "no doc.go: every package has one, with its package comment")
	} else if doc == "" {
		problems = append(problems, "doc.go has no package comment")
	}
	if len(others) > 0 {
		problems = append(problems, "package comment outside doc.go: "+strings.Join(others, ", ")+" (keep the one doc comment in doc.go)")
	}
	if doc == "" {
		return problems
	}
	opening := "Package " + name + " "
	if name == "main" {
		opening = "Command "
	}
	if !strings.HasPrefix(doc, opening) {
		problems = append(problems, fmt.Sprintf("package comment should start %q", opening))
	}
	problems = append(problems, checkPlane(doc)...)
	if !strings.Contains(strings.ToLower(strings.Join(strings.Fields(doc), " ")), "must never") {
		problems = append(problems, `package comment does not say what it must never do (no "must never")`)
	}
	return problems
}

// checkPlane checks the "Plane:" line of doc: the planes it names run up
// to the first '.', '(', ';', ':' or '—' of its paragraph, separated by
// commas and "and"; each must be one of planes.
func checkPlane(doc string) []string {
	var para []string
	for _, line := range strings.Split(doc, "\n") {
		switch {
		case para == nil && strings.HasPrefix(line, "Plane:"):
			para = append(para, strings.TrimPrefix(line, "Plane:"))
		case para != nil && strings.TrimSpace(line) == "":
			goto found
		case para != nil:
			para = append(para, line)
		}
	}
	if para == nil {
		return []string{`package comment has no line starting "Plane:" (one of: ` + planeList() + `)`}
	}
found:
	text := strings.Join(strings.Fields(strings.Join(para, " ")), " ")
	if i := strings.IndexAny(text, ".(;:—"); i >= 0 {
		text = text[:i]
	}
	var problems []string
	named := 0
	for _, part := range strings.Split(text, ",") {
		for _, p := range strings.Split(part, " and ") {
			p = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(p), "and "))
			if p == "" {
				continue
			}
			named++
			if !planes[p] {
				problems = append(problems, fmt.Sprintf("unknown plane %q on the Plane: line (one of: %s)", p, planeList()))
			}
		}
	}
	if named == 0 {
		problems = append(problems, "the Plane: line names no plane (one of: "+planeList()+")")
	}
	return problems
}

func planeList() string {
	var ps []string
	for p := range planes {
		ps = append(ps, p)
	}
	sort.Strings(ps)
	return strings.Join(ps, ", ")
}

// packageDirs lists, relative to root, every directory under the given
// top-level directories that holds a non-test Go file; testdata and
// directories starting with '.' or '_' are skipped, as the go tool does.
func packageDirs(root string, tops ...string) ([]string, error) {
	seen := map[string]bool{}
	for _, top := range tops {
		err := filepath.WalkDir(filepath.Join(root, top), func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if n := d.Name(); path != filepath.Join(root, top) && (n == "testdata" || strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_")) {
					return filepath.SkipDir
				}
				return nil
			}
			if n := d.Name(); strings.HasSuffix(n, ".go") && !strings.HasSuffix(n, "_test.go") {
				rel, err := filepath.Rel(root, filepath.Dir(path))
				if err != nil {
					return err
				}
				seen[filepath.ToSlash(rel)] = true
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	out := make([]string, 0, len(seen))
	for rel := range seen {
		out = append(out, rel)
	}
	sort.Strings(out)
	return out, nil
}

// repoRoot is the directory holding go.mod, above the test's directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}
