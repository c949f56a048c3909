package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/testkit"
)

// A program the sandbox does not show: exit 127, and the error lists what
// the sandbox does show (its PATH, the binds) and the bind that fixes it;
// running the suggested command works (the positive control: the bind,
// not anything else, was what was missing).
func TestRunNotFoundSaysWhatToBind(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	dir := filepath.Join(t.TempDir(), "mytool")
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(dir, "bin", "tool")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\necho tool-ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	extra := t.TempDir()
	r := cordon(t, cordonBin, st, "run", "--ro", extra+":/opt/extra", "--", prog)
	if r.Code != 127 {
		t.Fatalf("run of a program outside the sandbox = %d, want 127: %s", r.Code, r.Stderr)
	}
	for _, want := range []string{"not found in the sandbox", "PATH is /usr/local/sbin:", extra + " -> /opt/extra", "--ro " + dir + ":/opt/mytool -- /opt/mytool/bin/tool"} {
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("the not-found error lacks %q:\n%s", want, r.Stderr)
		}
	}
	m := regexp.MustCompile(`cordon run (--ro \S+) -- (\S+)`).FindStringSubmatch(r.Stderr)
	if m == nil {
		t.Fatalf("no suggested command in:\n%s", r.Stderr)
	}
	fix := cordon(t, cordonBin, st, "run", strings.Fields(m[1])[0], strings.Fields(m[1])[1], "--", m[2])
	if fix.Code != 0 || !strings.Contains(fix.Stdout, "tool-ran") {
		t.Fatalf("the suggested %s -- %s = %d %q %q", m[1], m[2], fix.Code, fix.Stdout, fix.Stderr)
	}
	// A known agent's command points at its preset.
	r = cordon(t, cordonBin, st, "run", "--", "claude")
	if r.Code != 127 || !strings.Contains(r.Stderr, "cordon run --agent claude") {
		t.Fatalf("run -- claude = %d, want 127 suggesting --agent claude:\n%s", r.Code, r.Stderr)
	}
}
