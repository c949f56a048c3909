package oci

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/testkit"
)

// escapeContainer runs a cordon container of the test image holding the
// cordon binary read-only at /cordon, and returns its id and the host pid
// of its program.
func escapeContainer(t *testing.T, e *engine) (id string, prog int) {
	t.Helper()
	return probeContainer(t, e, "cordon")
}

// probeContainer is escapeContainer under any handler.
func probeContainer(t *testing.T, e *engine, handler string) (id string, prog int) {
	t.Helper()
	p := e.runPod(t, handler)
	argv := []string{"sleep", "86401." + strconv.Itoa(os.Getpid())}
	id = e.runContainer(t, p, argv, probeMount())
	return id, findProgram(t, e.taskPID(t, id), argv)
}

// testCRIEscapeProbeSeen is the escape tests' harness control: the probe
// runs inside a CRI-started container (bound read-only through the CRI
// mount list) under each handler, and what it does there is seen from the
// host.
func testCRIEscapeProbeSeen(t *testing.T, e *engine) {
	for _, h := range handlers {
		t.Run(h, func(t *testing.T) {
			id, prog := probeContainer(t, e, h)
			name := "/tmp/cordon-cri-probe-" + hexID(4)
			if r := e.probeIn(t, id, "write", name); !r.OK {
				t.Fatalf("probe write %s inside: %+v", name, r)
			}
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/root%s", prog, name)); err != nil || string(b) != "probe" {
				t.Errorf("the host reads %s in the container's root: %q, %v; want %q", name, b, err, "probe")
			}
		})
	}
}

// testCRIEscapeNetwork: from a CRI-started cordon container, a TCP
// listener on the host's 127.0.0.1 and a host abstract Unix socket accept
// nothing (their own counts, read on the host); the same probe on the host
// reaches both (positive control).
func testCRIEscapeNetwork(t *testing.T, e *engine) {
	id, _ := escapeContainer(t, e)
	tcp := testkit.NewCountingListener(t, "tcp", "127.0.0.1:0")
	abstract := "@cordon-cri-" + hexID(6)
	unix := testkit.NewCountingListener(t, "unix", abstract)
	targets := []string{"tcp:" + tcp.Addr(), "unix:" + abstract}
	got := attemptsOf(t, e.probeIn(t, id, "connects", targets...))
	if n, m := tcp.Settle(0), unix.Settle(0); n != 0 || m != 0 {
		t.Errorf("from inside: the host's loopback listener accepted %d, its abstract socket %d; want 0 and 0 (probe said %v)", n, m, got)
	}
	for _, tg := range targets {
		if got[tg] == "ok" {
			t.Errorf("probe reports %s = ok from inside", tg)
		}
	}
	host := attemptsOf(t, probeHost(t, "connects", targets...))
	if n, m := tcp.Settle(1), unix.Settle(1); n != 1 || m != 1 {
		t.Errorf("positive control from the host: accepted %d and %d (probe said %v), want 1 and 1", n, m, host)
	}
}

// testCRIEscapeHostProcess: a host process is out of reach of a
// CRI-started cordon container (kill, ptrace, /proc/PID/mem): it is alive
// afterwards; the same attempt from the host kills a second one (positive
// control).
func testCRIEscapeHostProcess(t *testing.T, e *engine) {
	id, _ := escapeContainer(t, e)
	victim, spare := hostSleep(t), hostSleep(t)
	got := attemptsOf(t, e.probeIn(t, id, "procattack", strconv.Itoa(victim.Process.Pid)))
	v := identify(victim.Process.Pid)
	time.Sleep(100 * time.Millisecond)
	if !v.alive() {
		t.Errorf("the host process %d died after the attempt from inside (probe said %v)", victim.Process.Pid, got)
	}
	for k, o := range got {
		if o == "ok" {
			t.Errorf("from inside: %s = ok", k)
		}
	}
	host := attemptsOf(t, probeHost(t, "procattack", strconv.Itoa(spare.Process.Pid)))
	err := spare.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("positive control: the host's attempt left its target with %v (probe said %v), want killed by SIGKILL", err, host)
	}
}

// hostSleep is a host process the test owns (killed at cleanup).
func hostSleep(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
	return cmd
}

// testCRIEscapeMount: mounting a tmpfs inside a CRI-started cordon
// container is refused: the host sees no new mount in the program's
// mount table and the probe's file landed in the container's own
// directory underneath. Positive control: the same op run on the host as
// root in a private mount namespace mounts (its file is not left in the
// directory underneath).
func testCRIEscapeMount(t *testing.T, e *engine) {
	id, prog := escapeContainer(t, e)
	dir := "/tmp/cordon-cri-mnt-" + hexID(4)
	if _, _, code, err := e.cri.ExecSync(e.ctx, id, 30*time.Second, "mkdir", dir); err != nil || code != 0 {
		t.Fatalf("mkdir %s inside: exit %d, %v", dir, code, err)
	}
	r := e.probeIn(t, id, "kobj", "mount", dir)
	if r.OK {
		t.Errorf("probe reports the mount inside succeeded: %+v", r)
	}
	if mountedAt(t, prog, dir) {
		t.Errorf("the host sees a mount at %s in the container's mount table", dir)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d/root%s/after", prog, dir)); err != nil {
		t.Errorf("the probe's file is not in the container's %s as the host sees it (%v): the mount may have happened", dir, err)
	}

	hostDir := t.TempDir()
	out, err := exec.Command("unshare", "--mount", "--propagation", "private", cordonBin, "__probe", "kobj", "mount", hostDir).CombinedOutput()
	ctl := parseProbe(t, "on the host in a private mount namespace", string(out))
	if err != nil || !ctl.OK {
		t.Errorf("positive control: the host's mount = %+v, %v, want it to succeed", ctl, err)
	}
	if _, err := os.Stat(filepath.Join(hostDir, "after")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("positive control: the probe's file is in the host directory underneath (%v), want it to have gone to the tmpfs", err)
	}
}

// mountedAt reports whether pid's mount table has a mount point at p.
func mountedAt(t *testing.T, pid int, p string) bool {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fl := strings.Fields(sc.Text()); len(fl) > 4 && fl[4] == p {
			return true
		}
	}
	return false
}

// landlockProbeDir is the tmpfs cordon's init leaves under /dev for the
// Landlock check: owned by the program's uid and mounted read-write, so
// only Landlock stands between the program and a write there.
const landlockProbeDir = "/dev/.cordon-probe"

// testCRIEscapeLandlock: a write into the Landlock probe tmpfs inside a
// CRI-started cordon container lands nowhere (the host finds no file in
// the container's root). Positive control, read on the host: the
// directory is a read-write mount in the program's mount table and owned
// by the program's own host uid with the owner's write bit — DAC and the
// mount would let the write through, so Landlock is what refuses it.
func testCRIEscapeLandlock(t *testing.T, e *engine) {
	id, prog := escapeContainer(t, e)
	name := landlockProbeDir + "/cri-" + hexID(4)
	got := attemptsOf(t, e.probeIn(t, id, "writes", name))
	if _, err := os.Lstat(fmt.Sprintf("/proc/%d/root%s", prog, name)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the host finds %s in the container (%v; probe said %v): the write landed", name, err, got)
	}
	if got[name] == "ok" {
		t.Errorf("probe reports the write of %s succeeded", name)
	}
	dir := fmt.Sprintf("/proc/%d/root%s", prog, landlockProbeDir)
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		t.Fatalf("positive control: stat %s from the host: %v", dir, err)
	}
	ps, err := procStatus(prog)
	if err != nil {
		t.Fatal(err)
	}
	euid := strings.Fields(ps["Uid"])
	if len(euid) < 2 || strconv.FormatUint(uint64(st.Uid), 10) != euid[1] || st.Mode&0o200 == 0 {
		t.Errorf("positive control: %s is owned by host uid %d mode %o, the program runs as host uid %v: DAC, not Landlock, may be what refuses", landlockProbeDir, st.Uid, st.Mode&0o7777, euid)
	}
	if opts, ok := mountOptions(t, prog, landlockProbeDir); !ok || !slices.Contains(strings.Split(opts, ","), "rw") {
		t.Errorf("positive control: %s in the program's mount table: %q (mounted %v), want a read-write mount", landlockProbeDir, opts, ok)
	}
}

// mountOptions is the per-mount options of the mount at p in pid's mount
// table (false if nothing is mounted there).
func mountOptions(t *testing.T, pid int, p string) (string, bool) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		t.Fatal(err)
	}
	opts, found := "", false
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 5 && f[4] == p {
			opts, found = f[5], true // the last mount at p is the one seen
		}
	}
	return opts, found
}
