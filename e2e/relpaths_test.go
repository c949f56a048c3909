package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/testkit"
)

// Host paths resolve against the current directory as a shell user
// expects, on `cordon run` as on `cordon sandbox create`: `--workspace .`
// binds the directory cordon runs in, `--ro data:/in` its data
// subdirectory. The sandbox side of a bind must still be absolute.
func TestRunRelativeHostPaths(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	ws := userWorkspace(t)
	os.Mkdir(filepath.Join(ws, "data"), 0o755)
	os.WriteFile(filepath.Join(ws, "here.txt"), []byte("workspace-marker"), 0o644)
	os.WriteFile(filepath.Join(ws, "data", "in.txt"), []byte("ro-marker"), 0o644)
	r := runCordon(t, st, runOpts{dir: ws}, "run", "--workspace", ".", "--ro", "data:/in", "--", "/bin/cat", "/workspace/here.txt", "/in/in.txt")
	if r.Code != 0 || r.Stdout != "workspace-markerro-marker" {
		t.Fatalf("run --workspace . --ro data:/in = %d %q\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
	r = runCordon(t, st, runOpts{dir: ws}, "run", "--ro", "data:in", "--", "/bin/true")
	if r.Code != 125 || !strings.Contains(r.Stderr, "SANDBOX path must be absolute") {
		t.Fatalf("run --ro data:in = %d %s; want refused (a relative sandbox path)", r.Code, r.Stderr)
	}
}
