package testkit_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const self = "github.com/cordon-project/cordon/internal/testkit"

// goList runs `go list` in the module with args and returns its lines.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go list %v: %v\n%s", args, err, stderr)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// importers returns the packages among lines ("importpath imp1 imp2 …",
// as `go list -f '{{.ImportPath}} {{join .Imports " "}}'` prints them)
// whose own code imports testkit or one of its subpackages (browser,
// engines). testkit's own subpackages (test-only too) may.
func importers(lines []string) []string {
	var bad []string
	isKit := func(p string) bool { return p == self || strings.HasPrefix(p, self+"/") }
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) > 1 && !isKit(f[0]) && slices.ContainsFunc(f[1:], isKit) {
			bad = append(bad, f[0])
		}
	}
	return bad
}

// testkit is test-only: no package's non-test code imports it, and the
// cordon binary (also its test-hooks build) does not link it. The positive
// control shows the check flags an importer when there is one.
func TestNotImportedByProduction(t *testing.T) {
	if got := importers([]string{"example.com/a " + self, "example.com/b fmt", self + "/browser " + self, "example.com/c fmt " + self + "/engines"}); !slices.Equal(got, []string{"example.com/a", "example.com/c"}) {
		t.Fatalf("importers(control) = %v, want [example.com/a example.com/c]", got)
	}
	for _, tags := range []string{"", "cordon_testhooks"} {
		lines := goList(t, "-tags", tags, "-f", `{{.ImportPath}} {{join .Imports " "}}`, "./...")
		if len(lines) < 10 {
			t.Fatalf("go list -tags %q listed only %d packages: %q", tags, len(lines), lines)
		}
		if bad := importers(lines); len(bad) > 0 {
			t.Errorf("non-test code imports testkit (tags %q): %v", tags, bad)
		}
		deps := goList(t, "-tags", tags, "-deps", "./cmd/cordon")
		if !slices.Contains(deps, "github.com/cordon-project/cordon/internal/failure") {
			t.Fatalf("go list -deps ./cmd/cordon does not list internal/failure: the listing is not what this test thinks (%d lines)", len(deps))
		}
		for _, d := range deps {
			if d == self || strings.HasPrefix(d, self+"/") {
				t.Errorf("the cordon binary (tags %q) links %s", tags, d)
			}
		}
	}
}
