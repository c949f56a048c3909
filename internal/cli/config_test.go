package cli

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// execCLI runs the command tree as Main does and returns the exit
// status, stdout and stderr.
func execCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb strings.Builder
	g := &globals{stdout: &out, stderr: &errb}
	root := newRoot(g)
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&errb)
	code := 0
	if err := root.Execute(); err != nil {
		var ee *exitError
		if !errors.As(err, &ee) {
			t.Fatalf("cordon %v: %v, want an exit status", args, err)
		}
		code = ee.code
	}
	return code, out.String(), errb.String()
}

// TestConfigCheck runs `cordon config check` on a valid example (the
// positive control: exit 0, "ok") and on a file with three problems of
// different kinds: all three are printed with file:line:column and the
// field, the exit status is 1, and --json lists the same problems.
func TestConfigCheck(t *testing.T) {
	if code, out, errs := execCLI(t, "config", "check", "../../examples/minimal.yaml", "../../examples/egress.yaml"); code != 0 || out != "ok: ../../examples/minimal.yaml\nok: ../../examples/egress.yaml\n" {
		t.Fatalf("config check examples = %d, %q, %q; want 0 and ok", code, out, errs)
	}
	bad := filepath.Join(t.TempDir(), "cordon.yaml")
	src := "version: cordon/v1\nworkload: demo\ntenant: acme\npurpose: coding\negress:\n  allow:\n    - host: a.example\n      ports: [443, 70000]\n      port: 1\nbudgets:\n  egress_bytes: 1PB\n"
	if err := os.WriteFile(bad, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	want := []string{
		bad + ":8:20: egress.allow[0].ports[1]: 70000 is not a port; want 1–65535",
		bad + `:9:7: egress.allow[0].port: unknown field "port"; want one of host, ports`,
		bad + `:11:3: budgets.egress_bytes: size "1PB": want a whole number of bytes, or a number with a 1024-based unit`,
	}
	code, out, errs := execCLI(t, "config", "check", bad)
	lines := strings.Split(strings.TrimSpace(errs), "\n")
	if code != 1 || out != "" || len(lines) != 4 || !strings.HasPrefix(lines[3], "cordon: usage: config check: 3 problems in 1 file") {
		t.Fatalf("config check bad = %d, %q, %q; want 1, three problems and the summary", code, out, errs)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("problem %d = %q, want %q…", i, lines[i], w)
		}
	}

	code, out, _ = execCLI(t, "config", "check", "--json", bad, "../../examples/minimal.yaml", filepath.Join(t.TempDir(), "absent.yaml"))
	var got []struct {
		File    string `json:"file"`
		Line    int    `json:"line"`
		Column  int    `json:"column"`
		Path    string `json:"path"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || code != 1 || len(got) != 4 {
		t.Fatalf("config check --json = %d, %q (%v); want 1 and four problems", code, out, err)
	}
	if d := cmp.Diff([]int{8, 20, 9, 7, 11, 3, 0, 0}, []int{got[0].Line, got[0].Column, got[1].Line, got[1].Column, got[2].Line, got[2].Column, got[3].Line, got[3].Column}); d != "" || got[0].Path != "egress.allow[0].ports[1]" || got[0].File != bad || !strings.Contains(got[3].Message, "no such file") {
		t.Errorf("config check --json = %+v (%s)", got, d)
	}
	if code, out, _ := execCLI(t, "config", "check", "--json", "../../examples/minimal.yaml"); code != 0 || out != "[]\n" {
		t.Errorf("config check --json valid = %d, %q; want 0 and []", code, out)
	}
}
