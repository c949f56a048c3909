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
	"unsafe"

	"github.com/cordon-project/cordon/internal/testkit"
	"golang.org/x/sys/unix"
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
	ids     *idWatch // the ids of the sandboxes this test's daemons created
	logFile *os.File
	failOK  bool // start may fail (cleanup)
	// volumeDir is the daemon's volume directory (a temp dir per test).
	volumeDir string
	// env is added to the daemon's environment (NOTIFY_SOCKET, …).
	env []string
}

// String is the daemon's log so far.
func (d *daemon) String() string { return readAll(d.logFile) }

// startDaemon starts the test-hooks build of cordon as a daemon and waits
// until it answers.
func startDaemon(t *testing.T, state string, args ...string) *daemon {
	t.Helper()
	return startDaemonEnv(t, state, nil, args...)
}

// startDaemonEnv is startDaemon with env added to the daemon's
// environment.
func startDaemonEnv(t *testing.T, state string, env []string, args ...string) *daemon {
	t.Helper()
	// The socket's own directory: root's, 0755, so that a group member can
	// reach the socket when --group lets them.
	sockDir := t.TempDir()
	os.Chmod(sockDir, 0o755)
	os.Chmod(filepath.Dir(sockDir), 0o755) // the test's temp root

	volDir := t.TempDir()
	os.Chmod(volDir, 0o711)
	d := &daemon{t: t, bin: hooksBin, state: state, socket: filepath.Join(sockDir, "d.sock"), log: &bytes.Buffer{}, done: make(chan struct{}),
		ids: watchSandboxIDs(t, state), volumeDir: volDir, env: env}
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
		killCgroupsOf(d.ids.seen())
	})
	return d
}

func (d *daemon) start(args ...string) bool {
	d.t.Helper()
	d.done = make(chan struct{})
	d.log.Reset()
	d.cmd = exec.Command(d.bin, append([]string{"--state-dir", d.state, "daemon", "--socket", d.socket, "--volume-dir", d.volumeDir}, args...)...)
	d.cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, d.env...)
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

// killCgroupsOf SIGKILLs every process in the cgroups of the sandboxes
// ids (the test's own: other sandboxes run on this host at the same time,
// and their cgroups are none of this test's business) and removes them.
func killCgroupsOf(ids map[string]bool) {
	for id := range cgroupIDs() {
		if !ids[id] {
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

// idWatch learns the id of every sandbox a daemon on one state dir
// creates: the daemon creates <state>/logs/<id>.log before anything else
// of the sandbox exists on the host (inotify on that directory).
type idWatch struct {
	fd  int
	ids map[string]bool
}

func watchSandboxIDs(t *testing.T, state string) *idWatch {
	t.Helper()
	dir := filepath.Join(state, "logs")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatalf("inotify_init1: %v", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CREATE|unix.IN_MOVED_TO); err != nil {
		t.Fatalf("watch %s: %v", dir, err)
	}
	return &idWatch{fd: fd, ids: map[string]bool{}}
}

// seen returns every id created so far.
func (w *idWatch) seen() map[string]bool {
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(w.fd, buf)
		if err != nil || n <= 0 {
			return w.ids
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := string(bytes.TrimRight(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+int(ev.Len)], "\x00"))
			if id := strings.TrimSuffix(name, ".log"); isSandboxID(id) {
				w.ids[id] = true
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
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

// createStart creates sandbox name with the create arguments args and
// starts it; either failing fails the test.
func (d *daemon) createStart(name string, args ...string) {
	d.t.Helper()
	if r := d.cli(append([]string{"sandbox", "create", name}, args...)...); r.Code != 0 {
		d.t.Fatalf("create %s: %d %s", name, r.Code, r.Stderr)
	}
	if r := d.cli("sandbox", "start", name); r.Code != 0 {
		d.t.Fatalf("start %s: %d %s", name, r.Code, r.Stderr)
	}
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
	return parseResult(cmd.ProcessState.ExitCode(), readAll(out), readAll(errf), "")
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
	testkit.RequireRoot(t)
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
	ours := d.ids.seen()
	for id := range cgroupIDs() {
		// <id>--gw is the gateway's group of sandbox <id>.
		if ours[strings.TrimSuffix(id, "--gw")] && !live[id] && !live[strings.TrimSuffix(id, "--gw")] {
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
	testkit.RequireRoot(t)
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
		// Refused as a bad name, not merely as an absent sandbox (positive
		// control below: a well-formed absent name is not_found).
		if r := d.cli("sandbox", "start", name); r.Code == 0 || !strings.Contains(r.Stderr, "cordon: bad_request: ") {
			t.Fatalf("name %q: %d %s", name, r.Code, r.Stderr)
		}
	}
	// The daemon's kind is what the caller reads first, never "usage".
	if r := d.cli("sandbox", "start", "nosuch"); r.Code == 0 || !strings.HasPrefix(r.Stderr, "cordon: not_found: ") {
		t.Fatalf("absent well-formed name: %d %s", r.Code, r.Stderr)
	}
	// The socket is root-only (0600): another user cannot even connect.
	if r := cordonSocket(t, d.socket, st, &syscall.Credential{Uid: 1000, Gid: 1000}, "sandbox", "ls"); r.Code == 0 || !strings.Contains(r.Stderr, "permission denied") {
		t.Fatalf("uid 1000 on a root-only socket: %d %s", r.Code, r.Stderr)
	}
}

// With --group, group members may create their own sandboxes (with a
// workspace they own, sent as a descriptor) and act only on those.
func TestDaemonPerUserAuthorization(t *testing.T) {
	testkit.RequireRoot(t)
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

// SIGKILL of the daemon at every point of create, start, exec, stop and
// rm: after a restart, records and host agree — what was running is
// adopted and still works, everything else is gone (no cgroup, record,
// lease or socket left), and nothing is provisioned twice.
func TestDaemonCrashRecovery(t *testing.T) {
	testkit.RequireRoot(t)
	ws := userWorkspace(t)
	for _, tc := range []struct {
		point string
		drive []string // the command that crashes the daemon
		setup string   // "", "created", "running"
		after string   // the state expected after the restart ("" = removed)
	}{
		{"create.after_record", []string{"sandbox", "create", "x", "--workspace", ws}, "", ""},
		{"create.after_provision", []string{"sandbox", "create", "x", "--workspace", ws}, "", ""},
		{"start.after_spawn", []string{"sandbox", "start", "x"}, "created", ""},
		{"start.after_gateway", []string{"sandbox", "start", "x"}, "created", ""},
		{"exec.after_start", []string{"sandbox", "exec", "x", "--", "/bin/sleep", "1000"}, "running", "running"},
		{"stop.after_record", []string{"sandbox", "stop", "x"}, "running", "stopped"},
		{"stop.after_kill", []string{"sandbox", "stop", "x"}, "running", "stopped"},
		{"rm.after_record", []string{"sandbox", "rm", "x"}, "running", ""},
	} {
		t.Run(tc.point, func(t *testing.T) {
			st := newStateDir(t)
			d := startDaemon(t, st, "--test-crash-at", tc.point)
			var pid int
			if tc.setup != "" {
				if r := d.cli("sandbox", "create", "x", "--workspace", ws, "--", "/bin/sleep", "1000"); r.Code != 0 {
					t.Fatalf("create: %s", r.Stderr)
				}
			}
			if tc.setup == "running" {
				if r := d.cli("sandbox", "start", "x"); r.Code != 0 {
					t.Fatalf("start: %s", r.Stderr)
				}
				pid = d.ls()["x"].InitPid
			}
			r := d.cli(tc.drive...)
			if !d.exited() {
				t.Fatalf("the daemon did not crash at %s (cli: %d %s)", tc.point, r.Code, r.Stderr)
			}
			d.start()
			i, ok := d.ls()["x"]
			switch {
			case tc.after == "" && ok:
				t.Fatalf("after restart: %+v, want it removed", i)
			case tc.after != "" && (!ok || i.State != tc.after):
				t.Fatalf("after restart: %+v (listed %v), want %s\n%s", i, ok, tc.after, d)
			}
			live := map[string]bool{}
			if tc.after == "running" {
				live[i.ID] = true
				if r := d.cli("sandbox", "exec", "x", "--", "/bin/echo", "adopted"); r.Code != 0 || !strings.Contains(r.Stdout, "adopted") {
					t.Fatalf("exec in the adopted sandbox: %d %s %s", r.Code, r.Stdout, r.Stderr)
				}
			} else if pid != 0 {
				if alive(pid) {
					t.Fatalf("the init %d of a sandbox that is %q is alive", pid, tc.after)
				}
			}
			d.assertNoResidue(live)
			// The same name can be created again: nothing was provisioned twice.
			if r := d.cli("sandbox", "rm", "x"); r.Code != 0 {
				t.Fatalf("rm: %s", r.Stderr)
			}
			if r := d.cli("sandbox", "create", "x", "--workspace", ws); r.Code != 0 {
				t.Fatalf("create after recovery: %s", r.Stderr)
			}
			d.cli("sandbox", "rm", "x")
			d.assertNoResidue(nil)
		})
	}
}

// A daemon restart adopts a running sandbox: its main program keeps
// running, exec works, its gateway listeners are reopened.
func TestDaemonRestartAdoptsAndReopensGateway(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	d := startDaemon(t, st)
	up := testkit.NewModelUpstream(t, fakeKey, "via-adopted-gateway")
	cfg := gatewayConfig(t, up.URL(), "")
	d.createStart("gw", "--config", cfg, "--", "/bin/sleep", "1000")
	before := d.ls()["gw"]
	// Managed state written before the daemon restart is there after it.
	if r := d.cli("sandbox", "exec", "gw", "--", "/usr/bin/curl", "-sS", "--max-time", "10", "-X", "PUT", "--data-binary", "remembered",
		"http://127.0.0.1:83/v1/state/notes/a"); r.Code != 0 {
		t.Fatalf("state PUT: %d %s %s", r.Code, r.Stdout, r.Stderr)
	}
	d.kill()
	// The daemon is gone: the sandbox is not (no parent-death signal).
	if !alive(before.InitPid) {
		t.Fatal("the sandbox died with the daemon")
	}
	d.start()
	after := d.ls()["gw"]
	if after.State != "running" || after.InitPid != before.InitPid || after.Profile != "SAFE_GUIDED" {
		t.Fatalf("after restart: %+v", after)
	}
	r := d.cli("sandbox", "exec", "gw", "--", "/usr/bin/curl", "-sS", "--max-time", "10", "-H", "content-type: application/json",
		"-d", `{"model":"claude-x","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, "http://127.0.0.1:80/v1/messages")
	if r.Code != 0 || !strings.Contains(r.Stdout, "via-adopted-gateway") {
		t.Fatalf("model call through the reopened gateway: %d %s %s", r.Code, r.Stdout, r.Stderr)
	}
	if r := d.cli("sandbox", "exec", "gw", "--", "/usr/bin/curl", "-sS", "--max-time", "10", "http://127.0.0.1:83/v1/state/notes/a"); r.Code != 0 || r.Stdout != "remembered" {
		t.Fatalf("state after the daemon restart: %d %q %s", r.Code, r.Stdout, r.Stderr)
	}
}

// Drift puts a sandbox in DRAIN: running work continues, exec is refused
// until it is re-admitted. Policy drift (the host policy directory) and
// runtime drift (another cordon binary) are both detected.
func TestDaemonDriftDrains(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	pdir := t.TempDir()
	os.WriteFile(filepath.Join(pdir, "host.cedar"), []byte(`@id("no-evil") forbid(principal, action == Action::"model.invoke", resource == Model::"evil");`), 0o644)
	d := startDaemon(t, st, "--policy-dir", pdir, "--drift-interval", "200ms")
	d.createStart("dr", "--", "/bin/sleep", "1000")
	if r := d.cli("sandbox", "exec", "dr", "--", "/bin/true"); r.Code != 0 {
		t.Fatalf("exec before drift: %s", r.Stderr)
	}
	os.WriteFile(filepath.Join(pdir, "host.cedar"), []byte(`@id("no-evil") forbid(principal, action == Action::"model.invoke", resource == Model::"evil2");`), 0o644)
	waitFor(t, func() bool { return strings.Contains(d.ls()["dr"].Drain, "policy") }, "policy drift")
	if r := d.cli("sandbox", "exec", "dr", "--", "/bin/true"); r.Code == 0 || !strings.Contains(r.Stderr, "drain") {
		t.Fatalf("exec while draining: %d %s", r.Code, r.Stderr)
	}
	pid := d.ls()["dr"].InitPid
	if !alive(pid) {
		t.Fatal("draining stopped the running work")
	}
	if r := d.cli("sandbox", "readmit", "dr"); r.Code != 0 {
		t.Fatalf("readmit: %s", r.Stderr)
	}
	if r := d.cli("sandbox", "exec", "dr", "--", "/bin/true"); r.Code != 0 {
		t.Fatalf("exec after readmit: %s", r.Stderr)
	}
	// Runtime drift: the daemon restarts as another cordon binary.
	d.kill()
	other := filepath.Join(t.TempDir(), "cordon-other")
	b, _ := os.ReadFile(hooksBin)
	os.WriteFile(other, append(b, []byte("\x00another build")...), 0o755)
	d.bin = other
	d.start("--policy-dir", pdir)
	if i := d.ls()["dr"]; i.State != "running" || !strings.Contains(i.Drain, "runtime") {
		t.Fatalf("after restart with another binary: %+v", i)
	}
	if r := d.cli("sandbox", "exec", "dr", "--", "/bin/true"); r.Code == 0 {
		t.Fatal("exec in a sandbox drained by runtime drift")
	}
}

// FULL_CONTROL_LAB needs the exact risk acceptance, lists what it
// bypasses, marks those boundaries UNVERIFIED, and resets to SAFE_GUIDED
// when the daemon restarts.
func TestDaemonProfiles(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	d := startDaemon(t, st)
	r := d.cli("sandbox", "create", "lab", "--profile", "FULL_CONTROL_LAB")
	if r.Code == 0 || !strings.Contains(r.Stderr, "policy") || !strings.Contains(r.Stderr, "approval") || !strings.Contains(r.Stderr, "I accept") {
		t.Fatalf("lab without acceptance: %d %s", r.Code, r.Stderr)
	}
	phrase := "I accept that sandbox lab runs without policy, approval and budget gates"
	d.createStart("lab", "--profile", "FULL_CONTROL_LAB", "--accept", phrase, "--", "/bin/sleep", "1000")
	r = d.cli("sandbox", "status", "lab", "--json")
	var s struct {
		Profile  string   `json:"profile"`
		Bypassed []string `json:"bypassed"`
		Evidence struct {
			EnforcementMode string `json:"enforcement_mode"`
			Boundaries      map[string]struct {
				Verified bool `json:"verified"`
			} `json:"boundaries"`
		} `json:"evidence"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &s); err != nil {
		t.Fatalf("status: %v %s", err, r.Stdout)
	}
	if s.Profile != "FULL_CONTROL_LAB" || len(s.Bypassed) != 3 || s.Evidence.EnforcementMode != "UNVERIFIED" ||
		s.Evidence.Boundaries["network"].Verified || s.Evidence.Boundaries["credential"].Verified || !s.Evidence.Boundaries["process"].Verified {
		t.Fatalf("lab status: %+v", s)
	}
	d.kill()
	d.start()
	if i := d.ls()["lab"]; i.Profile != "SAFE_GUIDED" || i.State != "running" {
		t.Fatalf("after restart: %+v", i)
	}
}

// stop --all ends every sandbox; the stop is persisted, a restart does
// not resume it.
func TestDaemonStopAll(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	d := startDaemon(t, st)
	var pids []int
	for i := range 5 {
		n := fmt.Sprintf("s%d", i)
		if r := d.cli("sandbox", "create", n, "--", "/bin/sleep", "1000"); r.Code != 0 {
			t.Fatalf("create: %s", r.Stderr)
		}
		if r := d.cli("sandbox", "start", n); r.Code != 0 {
			t.Fatalf("start: %s", r.Stderr)
		}
		pids = append(pids, d.ls()[n].InitPid)
	}
	if r := d.cli("stop", "--all"); r.Code != 0 || !strings.Contains(r.Stdout, "stopped 5") {
		t.Fatalf("stop --all: %d %s %s", r.Code, r.Stdout, r.Stderr)
	}
	for _, p := range pids {
		if alive(p) {
			t.Fatalf("init %d alive after stop --all", p)
		}
	}
	d.kill()
	d.start()
	for n, i := range d.ls() {
		if i.State != "stopped" {
			t.Fatalf("%s is %s after a restart", n, i.State)
		}
	}
	d.assertNoResidue(nil)
}

// Named volumes: managed by the daemon, bound by name, outliving the
// sandbox; another user cannot use one; rm refuses while in use.
func TestDaemonVolumes(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	d := startDaemon(t, st, "--group", "1000")
	if r := d.cli("volume", "create", "cache"); r.Code != 0 {
		t.Fatalf("volume create: %d %s", r.Code, r.Stderr)
	}
	if r := d.cli("volume", "create", "cache"); r.Code != 125 || !strings.Contains(r.Stderr, "exists") {
		t.Fatalf("second volume create: %d %s", r.Code, r.Stderr)
	}
	if r := d.cli("volume", "create", "../etc"); r.Code == 0 {
		t.Fatal("a volume name with path characters was accepted")
	}
	if r := d.cli("sandbox", "create", "writer", "--volume", "cache:/cache", "--", "/bin/sleep", "1000"); r.Code != 0 {
		t.Fatalf("create with a volume: %s", r.Stderr)
	}
	d.cli("sandbox", "start", "writer")
	if r := d.cli("sandbox", "exec", "writer", "--", "/bin/sh", "-c", "echo kept > /cache/f && id -u"); r.Code != 0 || !strings.Contains(r.Stdout, "1000") {
		t.Fatalf("write to the volume: %d %s %s", r.Code, r.Stdout, r.Stderr)
	}
	if r := d.cli("volume", "rm", "cache"); r.Code != 125 || !strings.Contains(r.Stderr, "used by sandbox writer") {
		t.Fatalf("rm of a volume in use: %d %s", r.Code, r.Stderr)
	}
	d.cli("sandbox", "rm", "writer")
	if r := d.cli("sandbox", "create", "reader", "--volume", "cache:/data:ro", "--", "/bin/sleep", "1000"); r.Code != 0 {
		t.Fatalf("create reader: %s", r.Stderr)
	}
	d.cli("sandbox", "start", "reader")
	if r := d.cli("sandbox", "exec", "reader", "--", "/bin/cat", "/data/f"); r.Code != 0 || strings.TrimSpace(r.Stdout) != "kept" {
		t.Fatalf("the volume did not outlive its writer: %d %q %s", r.Code, r.Stdout, r.Stderr)
	}
	if r := d.cli("sandbox", "exec", "reader", "--", "/bin/sh", "-c", "echo x > /data/g"); r.Code == 0 {
		t.Fatal("wrote to a read-only volume")
	}
	// Another user neither sees nor uses root's volume.
	alice := &syscall.Credential{Uid: 1000, Gid: 1000}
	if r := cordonSocket(t, d.socket, st, alice, "volume", "ls", "--json"); r.Code != 0 || strings.Contains(r.Stdout, "cache") {
		t.Fatalf("alice sees root's volume: %s", r.Stdout)
	}
	if r := cordonSocket(t, d.socket, st, alice, "sandbox", "create", "steal", "--volume", "cache:/c"); r.Code == 0 || !strings.Contains(r.Stderr, "no volume named cache") {
		t.Fatalf("alice using root's volume: %d %s", r.Code, r.Stderr)
	}
	d.cli("sandbox", "rm", "reader")
	for range 2 {
		if r := d.cli("volume", "rm", "cache"); r.Code != 0 {
			t.Fatalf("volume rm: %d %s", r.Code, r.Stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(d.volumeDir, "cache")); err == nil {
		t.Fatal("the volume's directory is still there")
	}
}
