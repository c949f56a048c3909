package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// daemon is a `cordon daemon` the test started (by PID) on its own socket
// and state dir.
type daemon struct {
	t       *testing.T
	bin     string
	state   string
	socket  string
	cmd     *exec.Cmd
	log     *bytes.Buffer
	done    chan struct{}
	before  map[string]bool // cgroups that existed before the daemon
	logFile *os.File
	failOK  bool // start may fail (cleanup)
	// volumeDir is the daemon's volume directory (a temp dir per test).
	volumeDir string
}

// String is the daemon's log so far.
func (d *daemon) String() string { return readAll(d.logFile) }

// startDaemon starts the test-hooks build of cordon as a daemon and waits
// until it answers.
func startDaemon(t *testing.T, state string, args ...string) *daemon {
	t.Helper()
	// The socket's own directory: root's, 0755, so that a group member can
	// reach the socket when --group lets them.
	sockDir := t.TempDir()
	os.Chmod(sockDir, 0o755)
	os.Chmod(filepath.Dir(sockDir), 0o755) // the test's temp root

	volDir := t.TempDir()
	os.Chmod(volDir, 0o711)
	d := &daemon{t: t, bin: hooksBin, state: state, socket: filepath.Join(sockDir, "d.sock"), log: &bytes.Buffer{}, done: make(chan struct{}),
		before: cgroupIDs(), volumeDir: volDir}
	d.start(args...)
	t.Cleanup(func() {
		d.kill()
		// Nothing a test left may outlive it: stop and remove every sandbox
		// through a fresh daemon; whatever still runs in a cgroup made since
		// (a daemon that cannot start, say) is killed by its PIDs.
		d.bin, d.failOK = hooksBin, true
		if d.start() {
			r := d.cli("sandbox", "ls", "--json")
			var is []struct{ Name string }
			_ = json.Unmarshal([]byte(r.Stdout), &is)
			for _, i := range is {
				d.cli("sandbox", "rm", i.Name)
			}
			d.kill()
		}
		killNewCgroups(d.before)
	})
	return d
}

func (d *daemon) start(args ...string) bool {
	d.t.Helper()
	d.done = make(chan struct{})
	d.log.Reset()
	d.cmd = exec.Command(d.bin, append([]string{"--state-dir", d.state, "daemon", "--socket", d.socket, "--volume-dir", d.volumeDir}, args...)...)
	d.cmd.Env = []string{"PATH=/usr/bin:/bin"}
	lf := tempOut(d.t)
	d.logFile = lf
	d.cmd.Stdout, d.cmd.Stderr = lf, lf
	if err := d.cmd.Start(); err != nil {
		d.t.Fatal(err)
	}
	go func() { d.cmd.Wait(); close(d.done) }()
	for i := 0; i < 200; i++ {
		if c, err := net.Dial("unixpacket", d.socket); err == nil {
			c.Close()
			return true
		}
		select {
		case <-d.done:
			if d.failOK {
				return false
			}
			d.t.Fatalf("daemon exited at start: %s", d)
		case <-time.After(25 * time.Millisecond):
		}
	}
	if d.failOK {
		d.kill()
		return false
	}
	d.t.Fatalf("daemon did not answer on %s: %s", d.socket, d)
	return false
}

// killNewCgroups SIGKILLs every process in a sandbox cgroup that did not
// exist before (the test's own sandboxes) and removes those cgroups.
func killNewCgroups(before map[string]bool) {
	for id := range cgroupIDs() {
		if before[id] {
			continue
		}
		for _, ctl := range []string{"pids", "memory", "cpu", "cpuacct"} {
			b, _ := os.ReadFile(filepath.Join("/sys/fs/cgroup", ctl, "cordon", id, "cgroup.procs"))
			for _, f := range strings.Fields(string(b)) {
				var pid int
				fmt.Sscan(f, &pid)
				if pid > 1 {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
		for _, ctl := range []string{"pids", "memory", "cpu", "cpuacct"} {
			os.Remove(filepath.Join("/sys/fs/cgroup", ctl, "cordon", id))
		}
	}
}

// kill SIGKILLs the daemon (by the PID this test started) and waits.
func (d *daemon) kill() {
	if d.cmd != nil && d.cmd.Process != nil {
		d.cmd.Process.Kill()
		<-d.done
	}
}

// exited reports whether the daemon died (a crash point) within 10 s.
func (d *daemon) exited() bool {
	select {
	case <-d.done:
		return true
	case <-time.After(10 * time.Second):
		return false
	}
}

func (d *daemon) cli(args ...string) result {
	d.t.Helper()
	return cordonSocket(d.t, d.socket, d.state, nil, args...)
}

func cordonSocket(t *testing.T, socket, state string, cred *syscall.Credential, args ...string) result {
	t.Helper()
	cmd := exec.Command(cordonBin, append([]string{"--state-dir", state}, args...)...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "CORDON_SOCKET=" + socket}
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	// Files, not pipes: a program exec'd in a sandbox holds the caller's
	// stdio and may outlive this command (a pipe would keep Run waiting).
	out, errf := tempOut(t), tempOut(t)
	cmd.Stdout, cmd.Stderr = out, errf
	_ = cmd.Run()
	return parseResult(cmd.ProcessState.ExitCode(), readAll(out), readAll(errf))
}

func tempOut(t *testing.T) *os.File {
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func readAll(f *os.File) string {
	b, _ := os.ReadFile(f.Name())
	return string(b)
}

type sbInfo struct {
	Name     string `json:"name"`
	ID       string `json:"id"`
	State    string `json:"state"`
	Profile  string `json:"profile"`
	Drain    string `json:"drain"`
	Level    string `json:"level"`
	InitPid  int    `json:"init_pid"`
	MainExit string `json:"main_exit"`
	Note     string `json:"note"`
	Bypassed []string
}

func (d *daemon) ls() map[string]sbInfo {
	d.t.Helper()
	r := d.cli("sandbox", "ls", "--json")
	var is []sbInfo
	if err := json.Unmarshal([]byte(r.Stdout), &is); err != nil {
		d.t.Fatalf("ls: %v\n%s\n%s", err, r.Stdout, r.Stderr)
	}
	out := map[string]sbInfo{}
	for _, i := range is {
		out[i.Name] = i
	}
	return out
}

// userWorkspace is a directory owned by uid 1000, as a user's would be.
func userWorkspace(t *testing.T) string {
	ws := t.TempDir()
	os.Chown(ws, 1000, 1000)
	return ws
}

// The whole lifecycle through the daemon: the sandbox outlives each CLI
// call, exec runs under the same boundary with the caller's stdio, stop
// is final, rm is idempotent.
func TestDaemonLifecycle(t *testing.T) {
	requireRoot(t)
	st := newStateDir(t)
	d := startDaemon(t, st)
	ws := userWorkspace(t)
	r := d.cli("sandbox", "create", "dev", "--workspace", ws, "--", "/bin/sh", "-c", "echo main-started; exec sleep 1000")
	if r.Code != 0 {
		t.Fatalf("create: %d %s %s", r.Code, r.Stdout, r.Stderr)
	}
	if i := d.ls()["dev"]; i.State != "created" {
		t.Fatalf("after create: %+v", i)
	}
	if r := d.cli("sandbox", "create", "dev"); r.Code != 125 || !strings.Contains(r.Stderr, "exists") {
		t.Fatalf("second create of dev: %d %s", r.Code, r.Stderr)
	}
	if r := d.cli("sandbox", "start", "dev"); r.Code != 0 {
		t.Fatalf("start: %d %s %s", r.Code, r.Stdout, r.Stderr)
	}
	if r := d.cli("sandbox", "start", "dev"); r.Code != 0 {
		t.Fatalf("start is idempotent: %d %s", r.Code, r.Stderr)
	}
	i := d.ls()["dev"]
	if i.State != "running" || i.Level != "DEDICATED_CONTAINER" || i.InitPid == 0 {
		t.Fatalf("after start: %+v", i)
	}
	waitFor(t, func() bool { return strings.Contains(d.cli("sandbox", "logs", "dev").Stdout, "main-started") }, "main program output in logs")
	// exec: stdio, exit status, the workspace, the same namespaces.
	r = d.cli("sandbox", "exec", "dev", "--", "/bin/sh", "-c", "echo hi; echo err >&2; id -u; touch /workspace/made-by-exec; exit 3")
	if r.Code != 3 || !strings.Contains(r.Stdout, "hi") || !strings.Contains(r.Stdout, "1000") || !strings.Contains(r.Stderr, "err") {
		t.Fatalf("exec: %d %q %q", r.Code, r.Stdout, r.Stderr)
	}
	if fi, err := os.Stat(filepath.Join(ws, "made-by-exec")); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 1000 {
		t.Fatalf("file made by exec: %v", err)
	}
	r = d.cli("sandbox", "exec", "dev", "--", "/bin/readlink", "/proc/self/ns/pid")
	if ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", i.InitPid)); r.Code != 0 || strings.TrimSpace(r.Stdout) != ns {
		t.Fatalf("exec'd process in another pid namespace: %q vs %q (%s)", r.Stdout, ns, r.Stderr)
	}
	if r := d.cli("sandbox", "exec", "dev", "--", "/nonexistent"); r.Code != 127 {
		t.Fatalf("exec of a missing program: %d %s", r.Code, r.Stderr)
	}
	// Standalone gc never reclaims a daemon-owned sandbox.
	cordon(t, cordonBin, st, "gc")
	if r := d.cli("sandbox", "exec", "dev", "--", "/bin/true"); r.Code != 0 {
		t.Fatalf("the sandbox did not survive cordon gc: %d %s", r.Code, r.Stderr)
	}
	if r := d.cli("sandbox", "stop", "dev"); r.Code != 0 {
		t.Fatalf("stop: %d %s", r.Code, r.Stderr)
	}
	if alive(i.InitPid) {
		t.Fatalf("the init %d is alive after stop", i.InitPid)
	}
	if r := d.cli("sandbox", "exec", "dev", "--", "/bin/true"); r.Code == 0 {
		t.Fatal("exec in a stopped sandbox succeeded")
	}
	if r := d.cli("sandbox", "start", "dev"); r.Code != 125 || !strings.Contains(r.Stderr, "stopped") {
		t.Fatalf("start after stop: %d %s", r.Code, r.Stderr)
	}
	for range 2 {
		if r := d.cli("sandbox", "rm", "dev"); r.Code != 0 {
			t.Fatalf("rm: %d %s", r.Code, r.Stderr)
		}
	}
	if _, ok := d.ls()["dev"]; ok {
		t.Fatal("dev still listed after rm")
	}
	d.assertNoResidue(nil)
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for i := 0; i < 100; i++ {
		if cond() {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// cgroupIDs lists the sandbox cgroups on the host now.
func cgroupIDs() map[string]bool {
	out := map[string]bool{}
	for _, ctl := range []string{"memory", "pids", "cpu"} {
		dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", ctl, "cordon", "*"))
		for _, dir := range dirs {
			if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
				out[filepath.Base(dir)] = true
			}
		}
	}
	return out
}

// assertNoResidue checks the host holds nothing for the daemon's
// sandboxes other than the live ones: no cgroup that appeared since the
// daemon started, no host record, no run socket, no gateway secrets.
func (d *daemon) assertNoResidue(live map[string]bool) {
	t := d.t
	t.Helper()
	for id := range cgroupIDs() {
		if !d.before[id] && !live[id] {
			t.Errorf("cgroup residue %s", id)
		}
	}
	for _, pat := range []string{"run/*.sock", "gateway-secrets/*.json"} {
		files, _ := filepath.Glob(filepath.Join(d.state, pat))
		for _, f := range files {
			base := filepath.Base(f)
			if !live[strings.TrimSuffix(strings.TrimSuffix(base, ".sock"), ".json")] {
				t.Errorf("residue %s", f)
			}
		}
	}
	// Host records (leases) of the state dir: only the live sandboxes.
	out, _ := exec.Command(cordonBin, "--state-dir", d.state, "gc", "--json").Output()
	var g struct {
		Live []string `json:"live"`
	}
	_ = json.Unmarshal(out, &g)
	for _, id := range g.Live {
		if !live[id] {
			t.Errorf("host record (lease) residue %s", id)
		}
	}
}

// The protocol refuses what it must: another version, an oversized frame,
// malformed JSON, names with path characters, a caller without access to
// the socket, and another user's sandbox.
func TestDaemonRefusals(t *testing.T) {
	requireRoot(t)
	st := newStateDir(t)
	d := startDaemon(t, st)
	raw := func(b []byte) string {
		c, err := net.Dial("unixpacket", d.socket)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write(b); err != nil {
			return "write: " + err.Error()
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 1<<20)
		n, err := c.Read(buf)
		if err != nil {
			return "read: " + err.Error()
		}
		return string(buf[:n])
	}
	if got := raw([]byte(`{"version":"cordon-host/v2","id":1,"op":"ls"}`)); !strings.Contains(got, "cordon-host/v1") || !strings.Contains(got, "version") {
		t.Fatalf("other version: %s", got)
	}
	if got := raw([]byte(`{"version":"cordon-host/v1","id":1,`)); !strings.Contains(got, `"error"`) {
		t.Fatalf("malformed frame: %s", got)
	}
	big := append([]byte(`{"version":"cordon-host/v1","id":1,"op":"ls","args":{"x":"`), bytes.Repeat([]byte("a"), 300<<10)...)
	if got := raw(append(big, []byte(`"}}`)...)); !strings.Contains(got, "too") {
		t.Fatalf("oversized frame: %s", got)
	}
	for _, name := range []string{"../x", "a/b", "a b", ".", ""} {
		if r := d.cli("sandbox", "start", name); r.Code == 0 {
			t.Fatalf("name %q accepted", name)
		}
	}
	// The socket is root-only (0600): another user cannot even connect.
	if r := cordonSocket(t, d.socket, st, &syscall.Credential{Uid: 1000, Gid: 1000}, "sandbox", "ls"); r.Code == 0 || !strings.Contains(r.Stderr, "permission denied") {
		t.Fatalf("uid 1000 on a root-only socket: %d %s", r.Code, r.Stderr)
	}
}

// With --group, group members may create their own sandboxes (with a
// workspace they own, sent as a descriptor) and act only on those.
func TestDaemonPerUserAuthorization(t *testing.T) {
	requireRoot(t)
	st := newStateDir(t)
	d := startDaemon(t, st, "--group", "1000")
	alice := &syscall.Credential{Uid: 1000, Gid: 1000}
	bob := &syscall.Credential{Uid: 1001, Gid: 1000}
	ws := userWorkspace(t)
	os.Chmod(filepath.Dir(ws), 0o755)
	if r := cordonSocket(t, d.socket, st, alice, "sandbox", "create", "alice-box", "--workspace", ws); r.Code != 0 {
		t.Fatalf("alice create: %d %s", r.Code, r.Stderr)
	}
	if r := cordonSocket(t, d.socket, st, bob, "sandbox", "create", "bob-box", "--workspace", ws); r.Code == 0 || !strings.Contains(r.Stderr, "owned by uid 1000") {
		t.Fatalf("bob binding alice's workspace: %d %s", r.Code, r.Stderr)
	}
	if r := cordonSocket(t, d.socket, st, bob, "sandbox", "rm", "alice-box"); r.Code != 0 {
		t.Fatalf("bob rm alice-box: %d %s", r.Code, r.Stderr) // answered like an absent one
	}
	if _, ok := d.ls()["alice-box"]; !ok {
		t.Fatal("bob removed alice's sandbox")
	}
	if r := cordonSocket(t, d.socket, st, bob, "sandbox", "ls", "--json"); r.Code != 0 || strings.Contains(r.Stdout, "alice-box") {
		t.Fatalf("bob sees alice's sandbox: %s", r.Stdout)
	}
	if r := cordonSocket(t, d.socket, st, bob, "stop", "--all"); r.Code == 0 || !strings.Contains(r.Stderr, "root") {
		t.Fatalf("bob stop --all: %d %s", r.Code, r.Stderr)
	}
	if r := cordonSocket(t, d.socket, st, alice, "sandbox", "rm", "alice-box"); r.Code != 0 {
		t.Fatalf("alice rm: %d %s", r.Code, r.Stderr)
	}
	// The identity a sandbox crosses the gateway with is the caller's own:
	// bob cannot claim alice's tenant or an unprefixed workload (budgets,
	// state and policy are keyed by them).
	cfgDir := t.TempDir()
	os.Chmod(cfgDir, 0o755)
	conf := func(name, workload, tenant string) string {
		p := filepath.Join(cfgDir, name)
		os.WriteFile(p, []byte(fmt.Sprintf("version: cordon/v1\nworkload: %s\ntenant: %s\npurpose: testing\n", workload, tenant)), 0o644)
		return p
	}
	for _, c := range []struct{ workload, tenant, want string }{
		{"u1001-agent", "alice-corp", "tenant"},
		{"alice-agent", "u1001", "workload"},
	} {
		r := cordonSocket(t, d.socket, st, bob, "sandbox", "create", "bob-claim", "--config", conf("c.yaml", c.workload, c.tenant))
		if r.Code == 0 || !strings.Contains(r.Stderr, c.want) {
			t.Fatalf("bob claiming %s/%s: %d %s", c.tenant, c.workload, r.Code, r.Stderr)
		}
	}
	if r := cordonSocket(t, d.socket, st, bob, "sandbox", "create", "bob-own", "--config", conf("ok.yaml", "u1001-agent", "u1001")); r.Code != 0 {
		t.Fatalf("bob with his own identity: %d %s", r.Code, r.Stderr)
	}
	cordonSocket(t, d.socket, st, bob, "sandbox", "rm", "bob-own")
	// A user cannot fill the daemon's connections: past the per-user cap
	// they are refused, and root still gets in.
	holder := exec.Command(filepath.Join(probeDir, "probe"), "hold-unix", d.socket, "40", "60")
	holder.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1001, Gid: 1000}}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { holder.Process.Kill(); holder.Wait() }()
	waitFor(t, func() bool { return strings.Contains(d.String(), "too many connections of this user") }, "the per-user connection cap")
	if r := d.cli("sandbox", "ls"); r.Code != 0 {
		t.Fatalf("root refused while bob holds connections: %d %s", r.Code, r.Stderr)
	}
	// A workspace nested too deep for the socket check is refused.
	deep := userWorkspace(t)
	os.Chmod(filepath.Dir(deep), 0o755)
	p := deep
	for range 300 {
		p = filepath.Join(p, "d")
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if r := cordonSocket(t, d.socket, st, alice, "sandbox", "create", "deep", "--workspace", deep); r.Code == 0 || !strings.Contains(r.Stderr, "too deep") {
		t.Fatalf("deep workspace: %d %s", r.Code, r.Stderr)
	}
}
