package archtest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Size rules (issue 10; style.md "a file past ~800 lines is a sign to
// split"): no Go file over maxFileLines anywhere under internal/ and cmd/,
// and no function over maxFuncLines in non-test code under internal/ and
// cmd/ — the run, start and gateway paths and everything else, so the rule
// cannot be dodged by moving code. Lines count from `func` to its brace.
const (
	maxFileLines = 800
	maxFuncLines = 100
)

// sizeExceptions are functions allowed past maxFuncLines, each with why.
// Keep it empty unless splitting would hurt reading (a table, a switch
// that is the specification).
var sizeExceptions = map[string]string{}

func TestSizeRules(t *testing.T) {
	root := repoRoot(t)
	var problems []string
	for _, top := range []string{"internal", "cmd"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			problems = append(problems, checkSizes(rel, p)...)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// checkSizes returns the size-rule breaks of one file.
func checkSizes(rel, path string) []string {
	fs := token.NewFileSet()
	f, err := parser.ParseFile(fs, path, nil, parser.SkipObjectResolution)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", rel, err)}
	}
	var out []string
	if n := fs.File(f.Pos()).LineCount(); n > maxFileLines {
		out = append(out, fmt.Sprintf("%s is %d lines, more than %d: split it by topic", rel, n, maxFileLines))
	}
	if strings.HasSuffix(rel, "_test.go") {
		return out
	}
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		name := fd.Name.Name
		if fd.Recv != nil && len(fd.Recv.List) == 1 {
			name = recvName(fd.Recv.List[0].Type) + "." + name
		}
		key := filepath.ToSlash(filepath.Dir(rel)) + "." + name
		n := fs.Position(fd.End()).Line - fs.Position(fd.Pos()).Line + 1
		if _, ok := sizeExceptions[key]; n > maxFuncLines && !ok {
			out = append(out, fmt.Sprintf("%s: %s is %d lines, more than %d: split it into steps with one job each", rel, name, n, maxFuncLines))
		}
	}
	return out
}

func recvName(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return recvName(x.X)
	case *ast.IndexExpr:
		return recvName(x.X)
	case *ast.Ident:
		return x.Name
	}
	return "?"
}

// TestCheckSizes is the check's positive control: a generated file with
// one long function and too many lines is caught on both counts.
func TestCheckSizes(t *testing.T) {
	var b strings.Builder
	b.WriteString("package x\n\nfunc long() {\n")
	for i := 0; i < maxFuncLines; i++ {
		b.WriteString("\t_ = 1\n")
	}
	b.WriteString("}\n\nfunc short() {}\n")
	for i := 0; i < maxFileLines; i++ {
		b.WriteString("\n")
	}
	p := filepath.Join(t.TempDir(), "x.go")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	got := checkSizes("internal/x/x.go", p)
	if len(got) != 2 || !strings.Contains(got[0], "more than 800") || !strings.Contains(got[1], "long is 102 lines") {
		t.Errorf("checkSizes = %q, want the file and long() flagged", got)
	}
}
