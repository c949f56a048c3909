package engines

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// stop removes the daemon's containers, stops dockerd, then containerd,
// by PID (SIGTERM, SIGKILL after 20 s), SIGKILLs any shim of this
// containerd still alive (found by its -address argument, which is this
// containerd's socket, never by name), unmounts what is left below Dir
// and ExecRoot and removes them.
func (d *Docker) stop() {
	if d.PID > 0 && alive(d.PID) {
		if ids := strings.Fields(d.Run(d.t, "ps", "-aq").Stdout); len(ids) > 0 {
			// Bounded: a runtime that hangs must not hang the cleanup;
			// stopping the daemons below ends what is left.
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			cmd := d.Cmd(append([]string{"rm", "-f"}, ids...)...)
			rm := exec.CommandContext(ctx, cmd.Path, cmd.Args[1:]...)
			rm.Env = cmd.Env
			if out, err := rm.CombinedOutput(); err != nil {
				d.t.Logf("cleanup: docker rm -f: %v %s", err, out)
			}
			cancel()
		}
		terminate(d.PID, 20*time.Second)
	}
	if d.ContainerdPID > 0 {
		terminate(d.ContainerdPID, 20*time.Second)
	}
	for _, pid := range d.Shims() {
		_ = unix.Kill(pid, unix.SIGKILL)
	}
	for _, dir := range []string{d.ExecRoot, d.Dir} {
		if dir == "" {
			continue
		}
		if left := unmountUnder(dir); len(left) > 0 {
			d.t.Errorf("cleanup: still mounted under %s, left in place: %v", dir, left)
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			d.t.Errorf("cleanup: %v", err)
		}
	}
}

// terminate sends SIGTERM to pid (a process this package started) and
// waits up to grace for it to go, then SIGKILLs it.
func terminate(pid int, grace time.Duration) {
	_ = unix.Kill(pid, unix.SIGTERM)
	for deadline := time.Now().Add(grace); alive(pid) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	if alive(pid) {
		_ = unix.Kill(pid, unix.SIGKILL)
		for deadline := time.Now().Add(5 * time.Second); alive(pid) && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

// Shims lists the live containerd shims of this daemon's containerd: the
// processes whose command line names its socket as -address.
func (d *Docker) Shims() []int { return shimsOf(d.ContainerdSock, "") }

// ShimOf is the pid of the shim serving container id (its command line
// names this containerd and `-id ID`), or 0.
func (d *Docker) ShimOf(id string) int {
	if p := shimsOf(d.ContainerdSock, id); len(p) > 0 {
		return p[0]
	}
	return 0
}

// Processes lists every pid in /proc.
func Processes() []int {
	es, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range es {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, n)
		}
	}
	return pids
}

func cmdline(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
}

// unmountUnder lazily unmounts every mount at or below dir, deepest
// first, and returns what is still mounted there afterwards.
func unmountUnder(dir string) []string {
	ms := MountsUnder(dir)
	sort.Slice(ms, func(i, j int) bool { return len(ms[i]) > len(ms[j]) })
	for _, m := range ms {
		_ = unix.Unmount(m, unix.MNT_DETACH) // what stays is reported below
	}
	return MountsUnder(dir)
}

// MountsUnder lists the mount points at or below dir (mountinfo escapes
// spaces and the like as \ooo; dir names made here have none).
func MountsUnder(dir string) []string {
	dir = filepath.Clean(dir)
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return []string{"(cannot read mountinfo: " + err.Error() + ")"}
	}
	defer f.Close()
	var m []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			m = append(m, fields[4])
		}
	}
	return m
}
