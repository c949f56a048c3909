package archtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestArchitecturePage checks that docs/architecture.md defines every
// plane a package doc may name and lists every package under internal/
// and cmd/ (a line starting with its path and a slash), so the page a
// newcomer reads stays the tree's map. Pending packages are left out, as
// in TestPackageDocs.
func TestArchitecturePage(t *testing.T) {
	root := repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	for p := range planes {
		if !strings.Contains(page, "| **"+p+"** |") {
			t.Errorf("docs/architecture.md does not define the plane %q (a table row starting \"| **%s** |\")", p, p)
		}
	}
	listed := map[string]bool{}
	for _, line := range strings.Split(page, "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasSuffix(f[0], "/") {
			listed[strings.TrimSuffix(f[0], "/")] = true
		}
	}
	pkgs, err := packageDirs(root, "internal", "cmd")
	if err != nil {
		t.Fatal(err)
	}
	for _, rel := range pkgs {
		if _, ok := isPending(rel); ok {
			continue
		}
		if !listed[rel] {
			t.Errorf("docs/architecture.md does not list package %s: add a line %q under its plane", rel, rel+"/   what it owns")
		}
	}
}
