package e2e

// Escape tests. Each one attempts an escape from inside a sandbox with the
// probe, observes from the host that nothing happened (a host file, the
// sandbox's root or descriptor table through /proc, a host listener's
// accept count, a host process, the kernel's key accounting), and carries
// a positive control that shows the layer under test is what denies it:
// the same attempt succeeding on the host, or getting further in a test
// build without that layer (--test-skip-layer), or the seccomp filter
// alone refusing it to root on the host (escape_filter_test.go).

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/testkit"
)

// withoutLayer runs the test build with one hardening layer left out.
// Without seccomp or Landlock the process or filesystem boundary is
// unverified, so the run asks only for DOMAIN_ISOLATED (credentials).
func withoutLayer(layer string, args []string) []string {
	return append([]string{"--test-skip-layer", layer}, args...)
}

var lowerLevel = []string{"--level", "DOMAIN_ISOLATED"}

func mustNotExist(t *testing.T, what, p string) {
	t.Helper()
	if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s: lstat(%q) = %v, want ENOENT (the write escaped)", what, p, err)
	}
}

// TestEscapeWriteOutsideWritable: writes to /etc, /usr, /usr/bin, / and
// the uid-owned Landlock probe tmpfs are refused; the host's directories
// and the sandbox's own root (seen from the host) stay unchanged, while a
// write to /workspace lands on the host.
func TestEscapeWriteOutsideWritable(t *testing.T) {
	testkit.RequireRoot(t)
	t.Parallel()
	name := "cordon-escape-" + randHex(6)
	ws := workspace(t)
	probeFile := "/dev/.cordon-probe/" + name
	targets := []string{"/etc/" + name, "/usr/" + name, "/usr/bin/" + name, "/" + name, probeFile, "/workspace/" + name}

	h := startHeld(t, cordonBin, newStateDir(t), probeArgs([]string{"--json", "--workspace", ws}, "hold", append([]string{"writes"}, targets...)...)...)
	got := attempts(t, h.Probe)
	_, prog := h.pids()
	root := fmt.Sprintf("/proc/%d/root", prog)
	for _, dir := range []string{"/etc/", "/usr/", "/usr/bin/", "/"} {
		mustNotExist(t, "host", dir+name)
	}
	for _, p := range targets[:5] {
		mustNotExist(t, "sandbox root seen from the host", root+p)
	}
	// Positive control: the probe's write does reach the host.
	if b, err := os.ReadFile(filepath.Join(ws, name)); err != nil || string(b) != "probe" {
		t.Errorf("host read of the workspace write = %q, %v, want %q", b, err, "probe")
	}
	r := h.finish()
	if r.Code != 0 || r.Outcome.LevelAdmitted != "DEDICATED_CONTAINER" || len(r.Outcome.Unverified) != 0 {
		t.Fatalf("production run = %d, %+v, want 0 at DEDICATED_CONTAINER with every boundary verified\nstderr: %s", r.Code, r.Outcome, r.Stderr)
	}
	wantAttempts(t, "production", got, map[string]string{
		"/etc/" + name: "EROFS", "/usr/" + name: "EROFS", "/usr/bin/" + name: "EROFS", "/" + name: "EROFS",
		probeFile: "EACCES", "/workspace/" + name: "ok",
	})

	t.Run("landlock is what the filesystem verdict rests on", func(t *testing.T) {
		t.Parallel()
		r := cordon(t, hooksBin, newStateDir(t), withoutLayer("landlock", probeArgs([]string{"--json"}, "writes", probeFile))...)
		if r.Code != 125 || r.Outcome.FailureKind != "evidence_insufficient" || !slices.Contains(r.Outcome.Unverified, "filesystem") {
			t.Errorf("without Landlock: cordon = %d, %+v, want 125 evidence_insufficient with the filesystem boundary unverified\nstderr: %s", r.Code, r.Outcome, r.Stderr)
		}
		if r.Probe.Op != "" {
			t.Errorf("without Landlock the program ran (%+v); it must not start below the requested level", r.Probe)
		}
	})

	t.Run("without landlock the probe tmpfs is writable", func(t *testing.T) {
		t.Parallel()
		h := startHeld(t, hooksBin, newStateDir(t), withoutLayer("landlock", probeArgs(lowerLevel, "hold", "writes", probeFile, "/usr/"+name))...)
		got := attempts(t, h.Probe)
		_, prog := h.pids()
		if _, err := os.Lstat(fmt.Sprintf("/proc/%d/root%s", prog, probeFile)); err != nil {
			t.Errorf("without Landlock the host sees no %s in the sandbox (%v), want the write to have landed", probeFile, err)
		}
		mustNotExist(t, "host (read-only mount, not Landlock)", "/usr/"+name)
		if r := h.finish(); r.Code != 0 {
			t.Errorf("without Landlock at DOMAIN_ISOLATED: cordon = %d\nstderr: %s", r.Code, r.Stderr)
		}
		// The file is created; its content may not fit: the init's own
		// probe files fill that 4k tmpfs. Either way Landlock did not stop it.
		if g := got[probeFile]; g != "ok" && g != "ENOSPC" {
			t.Errorf("without Landlock: write %s = %s, want it past Landlock (ok or ENOSPC)", probeFile, g)
		}
		wantAttempts(t, "without Landlock", got, map[string]string{"/usr/" + name: "EROFS"})
	})
}

// TestEscapeSetIDFiles: every way to leave a setuid or setgid file in the
// idmapped workspace is refused; the host sees no such bit. Without
// seccomp, chmod 04755 works and the host sees a setuid file owned by the
// workspace owner: the filter is what closes it.
func TestEscapeSetIDFiles(t *testing.T) {
	testkit.RequireRoot(t)
	t.Parallel()
	scan := func(t *testing.T, ws string) map[string]os.FileMode {
		t.Helper()
		modes := map[string]os.FileMode{}
		ents, err := os.ReadDir(ws)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			fi, err := os.Lstat(filepath.Join(ws, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			modes[e.Name()] = fi.Mode()
			if uid := fi.Sys().(*syscall.Stat_t).Uid; uid != wsOwner {
				t.Errorf("host stat %s: owner %d, want the workspace owner %d", e.Name(), uid, wsOwner)
			}
		}
		return modes
	}
	ws := workspace(t)
	r := cordon(t, cordonBin, newStateDir(t), probeArgs([]string{"--workspace", ws}, "setid", "/workspace")...)
	got := attempts(t, r.Probe)
	for name, mode := range scan(t, ws) {
		if mode&(os.ModeSetuid|os.ModeSetgid) != 0 {
			t.Errorf("host stat %s = %v: a setuid/setgid bit escaped", name, mode)
		}
	}
	want := map[string]string{}
	for _, k := range []string{"chmod4755", "chmod2755", "fchmodat6755", "fchmod4755", "open4755", "creat2755", "mknod4755", "mkdir2755"} {
		want[k] = "EPERM"
	}
	wantAttempts(t, "production", got, want)

	t.Run("without seccomp the host sees a setuid file", func(t *testing.T) {
		t.Parallel()
		ws := workspace(t)
		r := cordon(t, hooksBin, newStateDir(t), withoutLayer("seccomp", probeArgs(append([]string{"--workspace", ws}, lowerLevel...), "setid", "/workspace"))...)
		got := attempts(t, r.Probe)
		modes := scan(t, ws)
		t.Logf("without seccomp: attempts %v, host modes %v", got, modes)
		if got["chmod4755"] != "ok" || modes["chmod4755"]&os.ModeSetuid == 0 {
			t.Errorf("without seccomp: chmod 04755 = %s, host mode %v; want ok and the setuid bit visible on the host", got["chmod4755"], modes["chmod4755"])
		}
	})
}

// TestEscapeReadHostSecrets: /root and /home of the host are not in the
// sandbox; root-only and group-only files of a root-owned --ro bind are
// unreadable, while their world-readable sibling reads. No secret appears
// in anything the sandbox printed. The host probe reading them all is the
// control that shows a leak would be seen.
func TestEscapeReadHostSecrets(t *testing.T) {
	testkit.RequireRoot(t)
	t.Parallel()
	tag := randHex(6)
	secrets := map[string]string{}
	put := func(path, content string, mode os.FileMode, gid int) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(path) })
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(path, 0, gid); err != nil {
			t.Fatal(err)
		}
		secrets[path] = content
	}
	rootCanary := "/root/cordon-canary-" + tag
	put(rootCanary, "root-canary-"+randHex(16), 0o644, 0)
	inside := map[string]string{rootCanary: rootCanary} // host path -> sandbox path
	homeCanary := "/home/cordon-canary-" + tag
	if fi, err := os.Stat("/home"); err == nil && fi.IsDir() {
		put(homeCanary, "home-canary-"+randHex(16), 0o644, 0)
		inside[homeCanary] = homeCanary
	}
	data := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	put(filepath.Join(data, "root-only"), "root-only-"+randHex(16), 0o600, 0)
	put(filepath.Join(data, "group-only"), "group-only-"+randHex(16), 0o640, 4243)
	public := "public-" + randHex(16)
	if err := os.WriteFile(filepath.Join(data, "public"), []byte(public), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"root-only", "group-only"} {
		inside[filepath.Join(data, n)] = "/data/" + n
	}

	var paths []string
	for _, p := range inside {
		paths = append(paths, p)
	}
	paths = append(paths, "/data/public")
	st := newStateDir(t)
	r := cordon(t, cordonBin, st, probeArgs([]string{"--ro", data + ":/data"}, "reads", paths...)...)
	got := attempts(t, r.Probe)
	want := map[string]string{rootCanary: "ENOENT", "/data/root-only": "EACCES", "/data/group-only": "EACCES", "/data/public": "ok:" + public}
	if _, ok := inside[homeCanary]; ok {
		want[homeCanary] = "ENOENT"
	}
	wantAttempts(t, "production", got, want)
	home := cordon(t, cordonBin, st, probeArgs(nil, "ls", "/home")...)
	if !home.Probe.OK || home.Probe.Data != "agent" {
		t.Errorf("ls /home inside = %+v, want only agent", home.Probe)
	}
	rootDir := cordon(t, cordonBin, st, probeArgs(nil, "ls", "/root")...)
	if rootDir.Probe.Errno != "ENOENT" {
		t.Errorf("ls /root inside = %+v, want ENOENT", rootDir.Probe)
	}
	for path, s := range secrets {
		for _, out := range []result{r, home, rootDir} {
			if strings.Contains(out.Stdout+out.Stderr, s) {
				t.Errorf("the content of host %s appeared in the sandbox's output", path)
			}
		}
	}

	// Positive control: the probe on the host reads every one of them.
	var hostPaths []string
	for p := range inside {
		hostPaths = append(hostPaths, p)
	}
	hp := attempts(t, hostProbe(t, nil, "reads", hostPaths...))
	for _, p := range hostPaths {
		if hp[p] != "ok:"+secrets[p] {
			t.Errorf("host probe read %s = %q, want its content", p, hp[p])
		}
	}
}

// TestEscapeOtherSandboxWorkspace: a sandbox cannot see a concurrent
// sandbox's workspace, by its host path or through the other's /proc root,
// while that sandbox reads it fine.
func TestEscapeOtherSandboxWorkspace(t *testing.T) {
	testkit.RequireRoot(t)
	t.Parallel()
	wsA := workspace(t)
	secret := "sandbox-a-" + randHex(16)
	p := filepath.Join(wsA, "secret")
	if err := os.WriteFile(p, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, wsOwner, wsOwner); err != nil {
		t.Fatal(err)
	}
	// One state dir: concurrent sandboxes get distinct leases, as they
	// would on a host.
	st := newStateDir(t)
	a := startHeld(t, cordonBin, st, probeArgs([]string{"--workspace", wsA}, "hold", "reads", "/workspace/secret")...)
	if got := attempts(t, a.Probe); got["/workspace/secret"] != "ok:"+secret {
		t.Fatalf("sandbox A reading its own workspace = %q, want its secret", got["/workspace/secret"])
	}
	_, progA := a.pids()

	wsB := workspace(t)
	viaProc := fmt.Sprintf("/proc/%d/root/workspace/secret", progA)
	bh := startHeld(t, cordonBin, st, probeArgs([]string{"--workspace", wsB}, "hold", "reads", p, viaProc, "/workspace/secret")...)
	_, progB := bh.pids()
	if ua, ub := hostUID(t, progA), hostUID(t, progB); ua == ub {
		t.Errorf("sandboxes A and B both run as host uid %s, want distinct leases", ua)
	}
	b := bh.finish()
	wantAttempts(t, "sandbox B", attempts(t, b.Probe), map[string]string{p: "ENOENT", viaProc: "ENOENT", "/workspace/secret": "ENOENT"})
	if strings.Contains(b.Stdout+b.Stderr, secret) {
		t.Errorf("sandbox A's secret appeared in sandbox B's output")
	}
	if !alive(progA) {
		t.Errorf("sandbox A's program %d is gone", progA)
	}
	if r := a.finish(); r.Code != 0 {
		t.Errorf("sandbox A = %d, want 0\nstderr: %s", r.Code, r.Stderr)
	}
}

// TestEscapeHostProcess: a host process is invisible from inside (kill
// ESRCH, ptrace EPERM from seccomp and ESRCH without it, no /proc entry)
// and is still alive afterwards; the probe on the host can signal it.
func TestEscapeHostProcess(t *testing.T) {
	testkit.RequireRoot(t)
	t.Parallel()
	target := exec.Command("sleep", "60")
	if err := target.Start(); err != nil {
		t.Fatal(err)
	}
	ended := make(chan struct{})
	go func() { target.Wait(); close(ended) }()
	t.Cleanup(func() { target.Process.Kill(); <-ended })
	pid := strconv.Itoa(target.Process.Pid)

	r := cordon(t, cordonBin, newStateDir(t), probeArgs(nil, "procattack", pid)...)
	wantAttempts(t, "production", attempts(t, r.Probe), map[string]string{"kill:" + pid: "ESRCH", "ptrace:" + pid: "EPERM", "mem:" + pid: "ENOENT"})
	rs := cordon(t, hooksBin, newStateDir(t), withoutLayer("seccomp", probeArgs(lowerLevel, "procattack", pid))...)
	wantAttempts(t, "without seccomp (PID namespace alone)", attempts(t, rs.Probe), map[string]string{"kill:" + pid: "ESRCH", "ptrace:" + pid: "ESRCH", "mem:" + pid: "ENOENT"})
	select {
	case <-ended:
		t.Fatalf("host process %s ended: %v", pid, target.ProcessState)
	default:
	}
	if !alive(target.Process.Pid) {
		t.Errorf("host process %s is not alive after the attempts", pid)
	}

	// Positive controls: the probe on the host reaches the process, and a
	// kill from the probe is something this test would see.
	if p := hostProbe(t, nil, "kill", pid, "0"); !p.OK {
		t.Errorf("host probe kill(%s, 0) = %+v, want ok", pid, p)
	}
	victim := exec.Command("sleep", "60")
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	if p := hostProbe(t, nil, "kill", strconv.Itoa(victim.Process.Pid), "9"); !p.OK {
		t.Errorf("host probe kill(victim, 9) = %+v, want ok", p)
	}
	err := victim.Wait()
	if ws, ok := victim.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("victim after the host probe's kill: %v, want killed by SIGKILL", err)
	}
}

// TestEscapeOtherSandboxProcess: a concurrent sandbox's init and program
// are invisible and untouched; the host probe can signal them.
func TestEscapeOtherSandboxProcess(t *testing.T) {
	testkit.RequireRoot(t)
	t.Parallel()
	st := newStateDir(t) // one store: distinct leases for concurrent sandboxes
	a := startHeld(t, cordonBin, st, probeArgs(nil, "hold", "ids")...)
	initA, progA := a.pids()
	si, sp := strconv.Itoa(initA), strconv.Itoa(progA)
	if initA < 10 || progA < 10 {
		t.Fatalf("host pids %d, %d could collide with pids inside the other sandbox", initA, progA)
	}
	bh := startHeld(t, cordonBin, st, probeArgs(nil, "hold", "procattack", si, sp)...)
	if _, progB := bh.pids(); hostUID(t, progA) == hostUID(t, progB) {
		t.Errorf("sandboxes A and B both run as host uid %s, want distinct leases", hostUID(t, progA))
	}
	b := bh.finish()
	wantAttempts(t, "production", attempts(t, b.Probe), map[string]string{
		"kill:" + si: "ESRCH", "ptrace:" + si: "EPERM", "mem:" + si: "ENOENT",
		"kill:" + sp: "ESRCH", "ptrace:" + sp: "EPERM", "mem:" + sp: "ENOENT",
	})
	bs := cordon(t, hooksBin, st, withoutLayer("seccomp", probeArgs(lowerLevel, "procattack", si, sp))...)
	wantAttempts(t, "without seccomp (PID namespace alone)", attempts(t, bs.Probe), map[string]string{
		"kill:" + si: "ESRCH", "ptrace:" + si: "ESRCH", "kill:" + sp: "ESRCH", "ptrace:" + sp: "ESRCH",
	})
	if !alive(initA) || !alive(progA) {
		t.Errorf("sandbox A's init %d alive %v, program %d alive %v; want both alive", initA, alive(initA), progA, alive(progA))
	}
	if p := hostProbe(t, nil, "kill", sp, "0"); !p.OK {
		t.Errorf("host probe kill(%s, 0) = %+v, want ok", sp, p)
	}
	if r := a.finish(); r.Code != 0 || !r.Probe.OK {
		t.Errorf("sandbox A = %d %+v, want 0 and its result\nstderr: %s", r.Code, r.Probe, r.Stderr)
	}
}

// TestEscapeSandboxInit: the program cannot kill, ptrace or open the
// memory of its own sandbox's init. The run completing normally is the
// host's observation that the init survived; SIGKILL from the host ends
// the run, so this test would see a dead init.
func TestEscapeSandboxInit(t *testing.T) {
	testkit.RequireRoot(t)
	t.Parallel()
	r := cordon(t, cordonBin, newStateDir(t), probeArgs([]string{"--json"}, "pid1")...)
	if r.Code != 0 || r.Outcome.Signal != 0 || r.Outcome.ExitCode != 0 {
		t.Fatalf("after kill(1, SIGKILL) the run = %d, %+v, want a normal exit 0\nstderr: %s", r.Code, r.Outcome, r.Stderr)
	}
	wantAttempts(t, "production", attempts(t, r.Probe), map[string]string{
		"kill":         "ok", // accepted, and dropped: PID 1 has no SIGKILL handler
		"ptrace":       "EPERM",
		"mem_rw":       "EACCES",
		"mem_ro":       "EACCES",
		"self_mem_ro":  "ok", // control: /proc/PID/mem works on a dumpable process
		"ptrace_child": "EPERM",
	})

	t.Run("without seccomp ptrace of a child works, of the init not", func(t *testing.T) {
		t.Parallel()
		r := cordon(t, hooksBin, newStateDir(t), withoutLayer("seccomp", probeArgs(lowerLevel, "pid1"))...)
		if r.Code != 0 {
			t.Fatalf("without seccomp: run = %d\nstderr: %s", r.Code, r.Stderr)
		}
		wantAttempts(t, "without seccomp", attempts(t, r.Probe), map[string]string{"ptrace_child": "ok", "ptrace": "EPERM", "mem_ro": "EACCES", "self_mem_ro": "ok"})
	})
	t.Run("without landlock /proc/self/mem opens read-write, /proc/1/mem not", func(t *testing.T) {
		t.Parallel()
		r := cordon(t, hooksBin, newStateDir(t), withoutLayer("landlock", probeArgs(lowerLevel, "pid1"))...)
		if r.Code != 0 {
			t.Fatalf("without Landlock: run = %d\nstderr: %s", r.Code, r.Stderr)
		}
		wantAttempts(t, "without Landlock", attempts(t, r.Probe), map[string]string{"self_mem_rw": "ok", "mem_rw": "EACCES", "mem_ro": "EACCES"})
	})
	t.Run("a killed init is seen from the host", func(t *testing.T) {
		t.Parallel()
		h := startHeld(t, cordonBin, newStateDir(t), probeArgs([]string{"--json"}, "hold", "ids")...)
		initPid, _ := h.pids()
		if err := syscall.Kill(initPid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if r := h.finish(); r.Code != 128+9 || r.Outcome.Signal != 9 {
			t.Errorf("after the host killed the init: cordon = %d, %+v, want 137 with signal 9", r.Code, r.Outcome)
		}
	})
}

// TestEscapeNetwork: a host TCP listener on 127.0.0.1 and on the host's
// address, and a host abstract Unix socket, are unreachable from inside
// and accept nothing; the probe on the host reaches all three.
func TestEscapeNetwork(t *testing.T) {
	testkit.RequireRoot(t)
	t.Parallel()
	var targets []string
	counts := map[string]*atomic.Int32{}
	listen := func(network, addr, spec string) {
		t.Helper()
		l, err := net.Listen(network, addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		if spec == "" {
			spec = network + ":" + l.Addr().String()
		}
		n := &atomic.Int32{}
		counts[spec] = n
		targets = append(targets, spec)
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				n.Add(1)
				go func() {
					c.SetDeadline(time.Now().Add(5 * time.Second))
					io.Copy(io.Discard, c)
					c.Close()
				}()
			}
		}()
	}
	listen("tcp", "127.0.0.1:0", "")
	abstract := "@cordon-test-" + randHex(8)
	listen("unix", abstract, "unix:"+abstract)
	want := map[string]string{targets[0]: "ECONNREFUSED", targets[1]: "ECONNREFUSED"}
	if ip := hostAddress(); ip != "" {
		listen("tcp", net.JoinHostPort(ip, "0"), "")
		want[targets[2]] = "ENETUNREACH"
	} else {
		t.Log("no non-loopback IPv4 address on the host; only loopback and abstract sockets tried")
	}

	r := cordon(t, cordonBin, newStateDir(t), probeArgs(nil, "connects", targets...)...)
	wantAttempts(t, "production", attempts(t, r.Probe), want)
	time.Sleep(200 * time.Millisecond)
	for spec, n := range counts {
		if c := n.Load(); c != 0 {
			t.Errorf("host listener %s accepted %d connections from the sandbox, want 0", spec, c)
		}
	}

	// Positive control: the probe on the host connects to each.
	hp := attempts(t, hostProbe(t, nil, "connects", targets...))
	deadline := time.Now().Add(5 * time.Second)
	for spec, n := range counts {
		for n.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if hp[spec] != "ok" || n.Load() != 1 {
			t.Errorf("host probe connect %s = %q, listener accepted %d; want ok and 1", spec, hp[spec], n.Load())
		}
	}
}

// hostAddress returns a non-loopback IPv4 address of the host, or "".
func hostAddress() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	return ""
}

// TestEscapeNestedUserns: a child in a new user namespace is refused by
// seccomp (EPERM) and, without seccomp, by max_user_namespaces=0 (ENOSPC);
// the child never runs (its marker never appears on the host). On the host
// the same probe's child runs and leaves its marker.
func TestEscapeNestedUserns(t *testing.T) {
	testkit.RequireRoot(t)
	t.Parallel()
	for _, tc := range []struct {
		name, bin, errno string
		layer            []string
	}{
		{"production", cordonBin, "EPERM", nil},
		{"without seccomp", hooksBin, "ENOSPC", []string{"seccomp"}},
	} {
		ws := workspace(t)
		args := probeArgs([]string{"--workspace", ws}, "userns", "/workspace/marker")
		if tc.layer != nil {
			args = withoutLayer(tc.layer[0], probeArgs(append([]string{"--workspace", ws}, lowerLevel...), "userns", "/workspace/marker"))
		}
		r := cordon(t, tc.bin, newStateDir(t), args...)
		if r.Probe.OK || r.Probe.Errno != tc.errno {
			t.Errorf("%s: clone(CLONE_NEWUSER) = %+v, want %s\nstderr: %s", tc.name, r.Probe, tc.errno, r.Stderr)
		}
		mustNotExist(t, tc.name+": marker of the nested child", filepath.Join(ws, "marker"))
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if p := hostProbe(t, nil, "userns", filepath.Join(dir, "marker")); !p.OK {
		t.Errorf("host probe userns = %+v, want ok", p)
	}
	if _, err := os.Stat(filepath.Join(dir, "marker")); err != nil {
		t.Errorf("host probe userns: no marker from the child (%v)", err)
	}
}

// TestEscapeKernelObjects: io_uring, userfaultfd, perf events, BPF maps
// and keyrings are refused with EPERM, and the host finds no such object
// in the program's descriptor table (or charged to its uid in
// /proc/key-users). Without seccomp, the ones that need no capability are
// created and the host sees them; bpf and mount are shown on the host in
// TestEscapeFilterAloneDenies.
func TestEscapeKernelObjects(t *testing.T) {
	testkit.RequireRoot(t)
	t.Parallel()
	for _, tc := range []struct {
		kind, fd string // fd: what /proc/PID/fd/N points to
		control  bool   // the call succeeds without seccomp
	}{
		{"io_uring", "anon_inode:[io_uring]", true},
		{"userfaultfd", "anon_inode:[userfaultfd]", true},
		{"perf", "anon_inode:[perf_event]", true},
		{"keyctl", "", true},
		{"bpf", "anon_inode:bpf-map", false},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			t.Parallel()
			op := []string{"kobj", tc.kind, "cordon-escape-" + randHex(6)}
			look := func(t *testing.T, h *held) bool {
				t.Helper()
				_, prog := h.pids()
				if tc.kind == "keyctl" {
					uid := hostUID(t, prog)
					n := keyCount(t, uid)
					t.Logf("/proc/key-users: uid %s holds %d keys", uid, n)
					return n > 0
				}
				fds := fdTargets(t, prog)
				return slices.Contains(fds, tc.fd)
			}
			h := startHeld(t, cordonBin, newStateDir(t), probeArgs(nil, "hold", op...)...)
			if h.Probe.OK || h.Probe.Errno != "EPERM" {
				t.Errorf("production: %s = %+v, want EPERM", tc.kind, h.Probe)
			}
			if look(t, h) {
				t.Errorf("production: the host sees a %s object held by the program", tc.kind)
			}
			if r := h.finish(); r.Code != 0 {
				t.Errorf("production: cordon = %d\nstderr: %s", r.Code, r.Stderr)
			}

			hs := startHeld(t, hooksBin, newStateDir(t), withoutLayer("seccomp", probeArgs(lowerLevel, "hold", op...))...)
			seen := look(t, hs)
			_, prog := hs.pids()
			uid := hostUID(t, prog)
			hs.finish()
			if tc.kind == "keyctl" {
				// The control's keyring dies with its sandbox; wait for the
				// kernel's key collector, so no later run sees it.
				deadline := time.Now().Add(10 * time.Second)
				for keyCount(t, uid) > 0 && time.Now().Before(deadline) {
					time.Sleep(20 * time.Millisecond)
				}
				if n := keyCount(t, uid); n > 0 {
					t.Errorf("uid %s still holds %d keys 10s after its sandbox ended", uid, n)
				}
			}
			if !tc.control {
				if hs.Probe.OK || seen {
					t.Errorf("without seccomp: %s = %+v (seen %v); want it refused by the missing capability", tc.kind, hs.Probe, seen)
				}
				t.Logf("without seccomp: %s = %s (needs a capability; the filter alone is shown on the host)", tc.kind, hs.Probe.Errno)
				return
			}
			if !hs.Probe.OK || !seen {
				t.Errorf("without seccomp: %s = %+v, host sees it %v; want it created and seen", tc.kind, hs.Probe, seen)
			}
		})
	}
	t.Run("mount", func(t *testing.T) {
		t.Parallel()
		ws := workspace(t)
		m := filepath.Join(ws, "m")
		if err := os.Mkdir(m, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(m, wsOwner, wsOwner); err != nil {
			t.Fatal(err)
		}
		r := cordon(t, cordonBin, newStateDir(t), probeArgs([]string{"--workspace", ws}, "kobj", "mount", "/workspace/m")...)
		if r.Probe.OK || r.Probe.Errno != "EPERM" {
			t.Errorf("production: mount = %+v, want EPERM", r.Probe)
		}
		// The write after the refused mount lands in the host directory.
		if _, err := os.Stat(filepath.Join(m, "after")); err != nil {
			t.Errorf("the write under the mount point did not reach the host (%v): was a tmpfs mounted?", err)
		}
	})
}

// TestEscapeFilterAloneDenies: mount and bpf fail in the sandbox for want
// of capabilities too. As root on the host, with the sandbox's seccomp
// filter installed, they fail with EPERM; without it they work.
func TestEscapeFilterAloneDenies(t *testing.T) {
	testkit.RequireRoot(t)
	t.Parallel()
	const tmpfsMagic = "fstype=0x1021994"
	dir := t.TempDir()
	if p := runFilterChild(t, "mount", false, dir, nil, nil); !p.OK || p.Data != tmpfsMagic {
		t.Errorf("root without the filter: mount tmpfs = %+v, want ok and %s", p, tmpfsMagic)
	}
	if p := runFilterChild(t, "mount", true, dir, nil, nil); p.OK || p.Errno != "EPERM" || p.Data == tmpfsMagic {
		t.Errorf("root with the filter: mount tmpfs = %+v, want EPERM", p)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil || fmt.Sprintf("fstype=%#x", st.Type) == tmpfsMagic {
		t.Errorf("the host sees a tmpfs on %s (%v): the control's mount leaked", dir, err)
	}
	if p := runFilterChild(t, "bpf", false, "", nil, nil); !p.OK {
		t.Errorf("root without the filter: bpf(BPF_MAP_CREATE) = %+v, want ok", p)
	}
	if p := runFilterChild(t, "bpf", true, "", nil, nil); p.OK || p.Errno != "EPERM" {
		t.Errorf("root with the filter: bpf(BPF_MAP_CREATE) = %+v, want EPERM", p)
	}
}
