package testkit_test

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/conformance"
	"github.com/cordon-project/cordon/internal/conformance/record"
)

// probeClasses are the contract's probe classes (section 2, item 5), the
// rows docs/testing.md's table must have.
var probeClasses = []string{"allowed", "bypass", "stale state", "cross-tenant", "exhaustion", "failure", "reset", "recovery"}

const tableHeader = "| Class | Test | Package | What it observes from outside |"

var (
	testName = regexp.MustCompile("^`(Test[A-Za-z0-9_]*)`$")
	pkgPath  = regexp.MustCompile("^`([a-z0-9_/]+)`$")
)

// checkProbeTable checks the probe-class table in the markdown doc against
// the Go test files under root (the module): every listed test is a
// top-level function of a _test.go file in the named package's directory,
// every class has a row with a test, and gaps say what is missing.
func checkProbeTable(doc, root string) []string {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	lines := strings.Split(doc, "\n")
	start := slices.Index(lines, tableHeader)
	if start < 0 || start+1 >= len(lines) || !strings.HasPrefix(lines[start+1], "| ---") {
		return []string{"no probe-class table (header " + tableHeader + ")"}
	}
	tested := map[string]int{}
	seen := map[string]bool{}
	funcs := map[string]map[string]bool{} // package dir → test functions
	for i := start + 2; i < len(lines) && strings.HasPrefix(lines[i], "|"); i++ {
		line := i + 1
		cells := strings.Split(strings.Trim(lines[i], "|"), "|")
		if len(cells) != 4 {
			bad("line %d: %d cells, want 4", line, len(cells))
			continue
		}
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		class, test, pkg, what := cells[0], cells[1], cells[2], cells[3]
		if !slices.Contains(probeClasses, class) {
			bad("line %d: class %q is not one of %q", line, class, probeClasses)
		}
		if what == "" {
			bad("line %d: no observation", line)
		}
		if test == "(gap)" {
			if pkg != "—" {
				bad("line %d: a gap names package %q, want —", line, pkg)
			}
			continue
		}
		tm, pm := testName.FindStringSubmatch(test), pkgPath.FindStringSubmatch(pkg)
		if tm == nil || pm == nil {
			bad("line %d: test %q in package %q: want `TestName` in `path/of/package`", line, test, pkg)
			continue
		}
		key := class + " " + pm[1] + "." + tm[1]
		if seen[key] {
			bad("line %d: %s listed twice", line, key)
		}
		seen[key] = true
		if funcs[pm[1]] == nil {
			fs, err := testFuncs(filepath.Join(root, filepath.FromSlash(pm[1])))
			if err != nil {
				bad("line %d: package %s: %v", line, pm[1], err)
				continue
			}
			funcs[pm[1]] = fs
		}
		if !funcs[pm[1]][tm[1]] {
			bad("line %d: %s has no test %s", line, pm[1], tm[1])
			continue
		}
		tested[class]++
	}
	for _, c := range probeClasses {
		if tested[c] == 0 {
			bad("class %q has no test listed", c)
		}
	}
	return errs
}

// testFuncs returns the names of the top-level functions in dir's
// _test.go files.
func testFuncs(dir string) (map[string]bool, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no _test.go files in %s", dir)
	}
	out := map[string]bool{}
	fset := token.NewFileSet()
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		for _, d := range af.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil {
				out[fd.Name.Name] = true
			}
		}
	}
	return out, nil
}

// docs/testing.md maps each probe class to the tests that cover it; a
// renamed or moved test, or a class left out, fails here. The control: a
// table with a missing test, an unknown package, an unknown class, a gap
// naming a package and a class left out is refused for each.
func TestProbeTableIsHonest(t *testing.T) {
	doc, err := os.ReadFile("../../docs/testing.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range checkProbeTable(string(doc), "../..") {
		t.Error("docs/testing.md: " + e)
	}

	control := tableHeader + "\n| --- | --- | --- | --- |\n" +
		"| allowed | `TestProbeTableIsHonest` | `internal/testkit` | exists |\n" +
		"| bypass | `TestNoSuchTest` | `internal/testkit` | renamed |\n" +
		"| failure | `TestX` | `internal/nosuchpkg` | moved |\n" +
		"| sideways | `TestChild` | `internal/testkit` | unknown class |\n" +
		"| reset | (gap) | `internal/testkit` | a gap with a package |\n"
	got := strings.Join(checkProbeTable(control, "../.."), "\n")
	for _, want := range []string{
		"internal/testkit has no test TestNoSuchTest",
		"package internal/nosuchpkg",
		`class "sideways" is not one of`,
		`a gap names package`,
		`class "stale state" has no test listed`,
		`class "bypass" has no test listed`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("checkProbeTable(control) does not say %q; it said:\n%s", want, got)
		}
	}
	if strings.Contains(got, `class "allowed" has no test`) {
		t.Errorf("checkProbeTable(control) refused the one real row:\n%s", got)
	}

	// Each class also names its conformance probes (cordon conformance
	// run), checked against the registered ones.
	for _, e := range checkConformanceTable(string(doc), conformance.All(), everyClassHasAProbe) {
		t.Error("docs/testing.md: " + e)
	}
	// What `cordon conformance list --markdown` prints passes the check.
	if errs := checkConformanceTable(conformance.MarkdownTable(conformance.All()), conformance.All(), false); len(errs) > 0 {
		t.Errorf("conformance.MarkdownTable does not pass its own check: %v", errs)
	}
	run := func(context.Context, *conformance.Env) conformance.Outcome { return conformance.Outcome{} }
	probes := []conformance.Probe{
		{ID: "bypass.a", Class: record.Bypass, Run: run},
		{ID: "bypass.b", Class: record.Bypass, Run: run},
		{ID: "failure.c", Class: record.Failure, Run: run},
	}
	ctable := conformanceHeader + "\n| --- | --- |\n" +
		"| bypass | `bypass.a`, `bypass.gone` |\n" +
		"| allowed | `failure.c` |\n" +
		"| failure | (none yet) |\n" +
		"| sideways | `bypass.a` |\n" +
		"| stale_state | (none yet) |\n" +
		"| cross_tenant | (none yet) |\n| exhaustion | (none yet) |\n"
	got = strings.Join(checkConformanceTable(ctable, probes, false), "\n")
	for _, want := range []string{
		"probe bypass.gone is not registered",
		"probe failure.c is in class failure, not allowed",
		"class failure says (none yet), but 1 of its probes are registered",
		`class "sideways" is not one of`,
		"class reset_recovery has no row",
		"registered probe bypass.b (bypass) is not listed",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("checkConformanceTable(control) does not say %q; it said:\n%s", want, got)
		}
	}
	if strings.Contains(got, "class stale_state") {
		t.Errorf("checkConformanceTable(control) refused a class with no probe before every class must have one:\n%s", got)
	}
	got = strings.Join(checkConformanceTable(ctable, probes, true), "\n")
	if !strings.Contains(got, "class stale_state has no conformance probe") || !strings.Contains(got, "class stale_state has no registered conformance probe") {
		t.Errorf("strict checkConformanceTable(control) accepts a class with no probe:\n%s", got)
	}
}
