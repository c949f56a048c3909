package proc

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/cordon-project/cordon/"

// rootOnly are the packages only the root side may link: the store and
// policy.
var rootOnly = []string{module + "internal/store", module + "internal/policy"}

// unprivileged are the packages the gateway process links to parse agent
// bytes: this one and every broker's agent-facing half.
var unprivileged = []string{
	"internal/gateway/proc", "internal/gateway/wire", "internal/crossing",
	"internal/broker/model", "internal/broker/egress", "internal/broker/tool", "internal/broker/state",
	"internal/broker/ingress",
}

// deps lists pkg's dependencies, transitively, as `go list -deps` does.
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := exec.LookPath(goBin); err != nil {
		if goBin, err = exec.LookPath("go"); err != nil {
			t.Fatalf("no go command to list %s's dependencies: %v", pkg, err)
		}
	}
	cmd := exec.Command(goBin, "list", "-deps", module+pkg)
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

// The unprivileged process and the brokers' agent-facing halves import
// neither the store nor policy, directly or transitively. The root
// gateway package does (positive control: the listing sees them).
func TestUnprivilegedImportsNoStoreOrPolicy(t *testing.T) {
	for _, pkg := range unprivileged {
		d := deps(t, pkg)
		for _, bad := range rootOnly {
			if slices.Contains(d, bad) {
				t.Errorf("%s imports %s (directly or transitively): the unprivileged plane must not", pkg, bad)
			}
		}
	}
	root := deps(t, "internal/gateway")
	for _, want := range rootOnly {
		if !slices.Contains(root, want) {
			t.Errorf("control: internal/gateway does not list %s; the check cannot see imports", want)
		}
	}
}
