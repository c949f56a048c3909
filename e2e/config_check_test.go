package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/testkit"
)

// TestRunConfigListsEveryProblem runs the binary both ways on one file
// with problems of several kinds: `cordon config check` lists each with
// file:line:column and exits 1, and `cordon run --config` refuses the same
// file before anything is built (exit 125, kind usage) listing exactly the
// same problems, one per line — one checker. Positive control: a valid
// configuration passes the check and runs.
func TestRunConfigListsEveryProblem(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	bad := filepath.Join(t.TempDir(), "cordon.yaml")
	src := "version: cordon/v1\nworkload: demo\ntenant: acme\npurpose: coding\negress:\n  allow:\n    - host: 10.0.0.1\n      ports: [443, 70000]\n      port: 1\nbudgets:\n  requests: 1.5\n  window: 3600\n"
	if err := os.WriteFile(bad, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	chk := cordon(t, cordonBin, st, "config", "check", bad)
	lines := strings.Split(strings.TrimSpace(chk.Stderr), "\n")
	if chk.Code != 1 || len(lines) != 6 || !strings.HasPrefix(lines[0], bad+":7:7: egress.allow[0].host: ") || !strings.HasPrefix(lines[5], "cordon: usage: config check: 5 problems in 1 file") {
		t.Fatalf("config check = %d\nstderr: %s\nwant 1 and five problems from line 7 on", chk.Code, chk.Stderr)
	}
	run := cordon(t, cordonBin, st, "run", "--config", bad, "--", "/bin/true")
	got := strings.Split(strings.TrimSpace(run.Stderr), "\n")
	if run.Code != 125 || len(got) != 6 || got[0] != "cordon: usage: config: 5 problems in "+bad+":" {
		t.Fatalf("run --config = %d\nstderr: %s\nwant 125, a summary and five problems", run.Code, run.Stderr)
	}
	for i, p := range lines[:5] {
		if got[i+1] != p {
			t.Errorf("run --config problem %d = %q, config check said %q", i, got[i+1], p)
		}
	}

	good := "../examples/minimal.yaml"
	if r := cordon(t, cordonBin, st, "config", "check", good); r.Code != 0 || r.Stdout != "ok: "+good+"\n" {
		t.Errorf("config check %s = %d, %q, %q; want 0 and ok", good, r.Code, r.Stdout, r.Stderr)
	}
	if r := cordon(t, cordonBin, st, "run", "--config", good, "--", "/bin/true"); r.Code != 0 {
		t.Errorf("run --config %s = %d\nstderr: %s\nwant 0", good, r.Code, r.Stderr)
	}
}
