package conformance

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/testkit"
)

// buildCordon builds the cordon binary into a 0711 directory (sandbox
// inits traverse the state dirs beside it).
func buildCordon(t *testing.T) (bin, dir string) {
	t.Helper()
	testkit.RequireRoot(t)
	testkit.RequireStaticBuild(t)
	dir = t.TempDir()
	os.Chmod(filepath.Dir(dir), 0o711)
	os.Chmod(dir, 0o711)
	bin = filepath.Join(dir, "cordon")
	cmd := exec.Command("go", "build", "-o", bin, "../../cmd/cordon")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin, dir
}

// pidsOf lists the processes whose executable is bin (device and inode:
// sandbox inits and daemons of it included, in any namespace).
func pidsOf(t *testing.T, bin string) []int {
	t.Helper()
	var want syscall.Stat_t
	if err := syscall.Stat(bin, &want); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat(filepath.Join("/proc", e.Name(), "exe"), &st) == nil && st.Dev == want.Dev && st.Ino == want.Ino {
			out = append(out, pid)
		}
	}
	return out
}

// Env.Daemon: a daemon on a root-only socket under the probe's Dir runs
// a sandbox created with the suite's profile; when the probe ends —
// after a clean run, and after the probe SIGKILLed the daemon — no
// process of the binary is left (the sandbox's init included: it is a
// re-exec of the binary) and the probe's Dir is gone. Control: while it
// runs, the daemon and the sandbox's init are seen by the same check.
func TestEnvDaemon(t *testing.T) {
	bin, dir := buildCordon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, crash := range []bool{false, true} {
		e := newEnv(Options{Bin: bin, Profile: "SAFE_GUIDED", Level: "DEDICATED_CONTAINER"}, dir, "daemon")
		if e == nil {
			t.Fatal("newEnv")
		}
		d, err := e.Daemon(ctx)
		if err != nil {
			e.finish()
			t.Fatal(err)
		}
		if fi, err := os.Stat(d.Socket); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("socket %s: %v %v, want mode 0600", d.Socket, fi.Mode(), err)
		}
		if fi, err := os.Stat(filepath.Dir(d.Socket)); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("socket directory: %v %v, want 0700", fi.Mode(), err)
		}
		if err := d.Create(ctx, "t1"); err != nil {
			t.Fatalf("%v\ndaemon log:\n%s", err, d.Log())
		}
		r, err := d.Cordon(ctx, "sandbox", "exec", "t1", "--", "/bin/echo", "hi")
		if err != nil || r.Code != 0 || r.Stdout != "hi\n" {
			t.Errorf("exec: %v %d %q %q", err, r.Code, r.Stdout, r.Stderr)
		}
		ls, _ := d.Cordon(ctx, "sandbox", "ls", "--json")
		var is []struct{ Name, Profile string }
		if json.Unmarshal([]byte(ls.Stdout), &is); len(is) != 1 || is[0].Profile != "SAFE_GUIDED" {
			t.Errorf("sandbox ls = %s, want t1 with the suite's profile", ls.Stdout)
		}
		if pids := pidsOf(t, bin); len(pids) < 2 {
			t.Errorf("control: processes of the binary while the daemon and its sandbox run = %v, want the daemon and the init", pids)
		}
		if crash {
			d.Kill()
		}
		e.finish()
		if pids := pidsOf(t, bin); len(pids) > 0 {
			t.Errorf("crash=%v: processes of the binary left after the probe ended: %v", crash, pids)
		}
		if _, err := os.Stat(e.Dir); !os.IsNotExist(err) {
			t.Errorf("crash=%v: the probe's Dir is still there: %v", crash, err)
		}
	}
}
