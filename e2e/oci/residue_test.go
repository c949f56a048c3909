package oci

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/testkit/engines"
)

// testResidue SIGKILLs, mid-run, the engine's shim of a cordon container
// and, separately, cordon's keeper (the container's pid), then makes
// docker's next call on the container (`docker rm -f`) and `cordon gc`:
// nothing of the sandbox is left — no process, no cordon cgroup, no live
// record in cordon's store, no state directory under the runtime root.
func testResidue(t *testing.T, d *engines.Docker) {
	for _, victim := range []string{"shim", "keeper"} {
		t.Run("SIGKILL "+victim, func(t *testing.T) {
			marker := strconv.Itoa(4000 + int(time.Now().UnixNano()%1000))
			id := d.Must(t, base("cordon", "-d", image, "sleep", marker)...)
			s := cordonState(t, d, id)
			prog := hostPid(t, d, id, "sleep\x00"+marker)
			procs := append([]int{s.Pid}, descendants(s.Pid)...)
			if s.SandboxID == "" || len(cgroupDirsOf(s.SandboxID)) == 0 || !mentions(gc(t, s.StateDir).Live, s.SandboxID) {
				t.Fatalf("before the kill: sandbox %q, cgroups %v, not live in cordon gc: the checks below would prove nothing", s.SandboxID, cgroupDirsOf(s.SandboxID))
			}
			pid := s.Pid
			if victim == "shim" {
				if pid = d.ShimOf(id); pid == 0 {
					t.Fatalf("no shim of container %s found (shims %v)", id, d.Shims())
				}
				procs = append(procs, pid)
			}
			if err := unix.Kill(pid, unix.SIGKILL); err != nil {
				t.Fatalf("SIGKILL %s %d: %v", victim, pid, err)
			}
			t.Logf("SIGKILLed the %s (pid %d) of container %s, sandbox %s, program pid %d", victim, pid, id, s.SandboxID, prog)
			// docker's next call on the container.
			if r := d.Run(t, "rm", "-f", id); r.Code != 0 {
				t.Logf("docker rm -f after the kill: %d %s", r.Code, r.Stderr)
			}
			gone := func() []string {
				var left []string
				for _, p := range procs {
					if _, err := os.Stat("/proc/" + strconv.Itoa(p)); err == nil && alive(p) {
						left = append(left, "process "+strconv.Itoa(p))
					}
				}
				left = append(left, cgroupDirsOf(s.SandboxID)...)
				if _, err := os.Lstat(filepath.Join(s.Root, id)); err == nil {
					left = append(left, "state dir "+filepath.Join(s.Root, id))
				}
				return left
			}
			deadline := time.Now().Add(15 * time.Second)
			for len(gone()) > 0 && time.Now().Before(deadline) {
				time.Sleep(100 * time.Millisecond)
			}
			if left := gone(); len(left) > 0 {
				t.Logf("after docker rm -f alone, left (cordon gc follows): %v", left)
			}
			rep := gc(t, s.StateDir)
			if left := gone(); len(left) > 0 {
				t.Errorf("after SIGKILL of the %s, docker rm -f and cordon gc: left %v", victim, left)
			}
			if mentions(rep.Live, s.SandboxID) {
				t.Errorf("cordon gc still lists sandbox %s as live: %+v", s.SandboxID, rep)
			}
			if r := d.Run(t, "inspect", id); r.Code == 0 {
				t.Errorf("docker still knows container %s after docker rm -f", id)
			}
		})
	}
}

// alive reports whether pid runs (a zombie does not).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	for i := len(b) - 1; i > 0; i-- {
		if b[i] == ')' {
			return i+2 < len(b) && b[i+2] != 'Z'
		}
	}
	return true
}
