package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/testkit"
)

// notifyListener is a fake service manager: a unixgram socket the test
// binds, whose datagrams it reads. At READY=1 it dials the daemon's
// socket at once, so the test knows whether the socket accepted when
// readiness was reported.
type notifyListener struct {
	path   string
	msgs   chan notifyMsg
	conn   *net.UnixConn
	daemon string // the daemon socket dialed at READY=1
}

type notifyMsg struct {
	text     string
	accepted bool // READY=1 only: the daemon socket accepted a connection right then
}

func newNotifyListener(t *testing.T, daemonSocket string) *notifyListener {
	t.Helper()
	p := filepath.Join(t.TempDir(), "notify.sock")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: p, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	n := &notifyListener{path: p, msgs: make(chan notifyMsg, 64), conn: c, daemon: daemonSocket}
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 8192)
		for {
			k, err := c.Read(buf)
			if err != nil {
				return
			}
			m := notifyMsg{text: string(buf[:k])}
			if strings.Contains(m.text, "READY=1\n") {
				if dc, err := net.Dial("unixpacket", n.daemon); err == nil {
					m.accepted = true
					dc.Close()
				}
			}
			n.msgs <- m
		}
	}()
	return n
}

// next returns the next datagram, failing after 15 s.
func (n *notifyListener) next(t *testing.T, want string) notifyMsg {
	t.Helper()
	select {
	case m := <-n.msgs:
		if !strings.Contains(m.text, want) {
			t.Fatalf("notification %q, want %s", m.text, want)
		}
		return m
	case <-time.After(15 * time.Second):
		t.Fatalf("no notification (want %s)", want)
	}
	return notifyMsg{}
}

// none checks no datagram arrives for a moment.
func (n *notifyListener) none(t *testing.T, when string) {
	t.Helper()
	select {
	case m := <-n.msgs:
		t.Fatalf("%s: unexpected notification %q", when, m.text)
	case <-time.After(300 * time.Millisecond):
	}
}

// cgroupProcs returns the processes in a sandbox's pids cgroup.
func cgroupProcs(id string) []int {
	b, _ := os.ReadFile(filepath.Join("/sys/fs/cgroup/pids/cordon", id, "cgroup.procs"))
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if p, err := strconv.Atoi(f); err == nil {
			out = append(out, p)
		}
	}
	return out
}

func environ(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	return string(bytes.ReplaceAll(b, []byte{0}, []byte{'\n'}))
}

// The daemon as a service, against a fake service manager: READY=1 (with
// MAINPID and STATUS) only once its socket accepts; SIGHUP gives
// RELOADING=1 (with MONOTONIC_USEC) then READY=1, and applies the settings
// file's log level (a DEBUG request line appears after the reload to
// debug, not before); SIGTERM gives STOPPING=1 and leaves the sandbox
// running; a restart under a new notify socket says READY=1 and adopts
// the sandbox (listed, exec works). No sandbox, gateway or broker process
// has NOTIFY_SOCKET in its environment (positive control: the daemon's
// own initial environment has it).
func TestDaemonNotifyReadyReloadStopAdopt(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	settings := filepath.Join(t.TempDir(), "daemon.conf")
	os.WriteFile(settings, []byte("# test\nlog-level = info\n"), 0o644)
	// A first start only to learn the daemon's socket path; the test's
	// notify listener dials it the moment READY=1 arrives.
	d := startDaemonEnv(t, st, nil, "--settings", settings, "--drift-interval", "1h")
	d.kill()
	n := newNotifyListener(t, d.socket)
	d.env = []string{"NOTIFY_SOCKET=" + n.path}
	d.start("--settings", settings, "--drift-interval", "1h")
	pid := d.cmd.Process.Pid
	m := n.next(t, "READY=1")
	if !m.accepted {
		t.Fatalf("READY=1 came before the socket accepted: %q\n%s", m.text, d)
	}
	if !strings.Contains(m.text, fmt.Sprintf("MAINPID=%d\n", pid)) || !strings.Contains(m.text, "STATUS=serving on "+d.socket) {
		t.Fatalf("ready notification %q, want MAINPID=%d and a STATUS naming the socket", m.text, pid)
	}
	waitFor(t, func() bool { return strings.Contains(d.String(), "msg=ready") }, "the ready line")
	log := d.String()
	if i, j := strings.Index(log, "msg=serving"), strings.Index(log, "msg=ready"); i < 0 || j < i || !strings.Contains(log, "msg=reconciled") {
		t.Fatalf("log order: want reconciled, serving, ready:\n%s", log)
	}
	// Positive control: the variable reached the daemon (its initial
	// environment, which Go's unsetenv does not rewrite).
	if !strings.Contains(environ(pid), "NOTIFY_SOCKET="+n.path) {
		t.Fatalf("the daemon's environment lacks NOTIFY_SOCKET: %q", environ(pid))
	}

	up := testkit.NewModelUpstream(t, fakeKey, "via-notify-daemon")
	cfg := gatewayConfig(t, up.URL(), "")
	d.createStart("svc", "--config", cfg, "--", "/bin/sleep", "1000")
	info := d.ls()["svc"]
	if !alive(info.InitPid) {
		t.Fatalf("sandbox init %d not alive", info.InitPid)
	}
	for _, l := range []string{"msg=created", "msg=started"} {
		if !strings.Contains(d.String(), l) || !strings.Contains(d.String(), "id="+info.ID) || !strings.Contains(d.String(), "owner=0") {
			t.Fatalf("lifecycle line %s with id and owner missing:\n%s", l, d)
		}
	}
	procs := append(descendants(pid)[1:], cgroupProcs(info.ID)...) // [0] is the daemon
	procs = append(procs, descendants(info.InitPid)...)
	if len(procs) < 2 {
		t.Fatalf("found %d sandbox/gateway processes, want the init and the brokers at least", len(procs))
	}
	var names []string
	for _, p := range procs {
		names = append(names, fmt.Sprintf("%d:%s", p, readComm(p)))
	}
	t.Logf("processes checked for NOTIFY_SOCKET: %v", names)
	for _, p := range procs {
		if e := environ(p); strings.Contains(e, "NOTIFY_SOCKET") || strings.Contains(e, n.path) {
			t.Fatalf("process %d (%s) inherited the notify socket: %q", p, readComm(p), e)
		}
	}

	// Reload: the settings file now says debug.
	if r := d.cli("sandbox", "ls"); r.Code != 0 {
		t.Fatal(r.Stderr)
	}
	if strings.Contains(d.String(), "level=DEBUG") {
		t.Fatalf("a DEBUG line at info:\n%s", d)
	}
	os.WriteFile(settings, []byte("log-level = debug\n"), 0o644)
	n.none(t, "before SIGHUP")
	syscall.Kill(pid, syscall.SIGHUP)
	if m := n.next(t, "RELOADING=1"); !strings.Contains(m.text, "MONOTONIC_USEC=") {
		t.Fatalf("reloading %q", m.text)
	}
	n.next(t, "READY=1")
	if r := d.cli("sandbox", "ls"); r.Code != 0 {
		t.Fatal(r.Stderr)
	}
	waitFor(t, func() bool { return strings.Contains(d.String(), "level=DEBUG msg=request component=daemon op=ls") }, "a DEBUG request line after the reload to debug")

	// A settings file that does not parse is refused; the level stays,
	// the daemon still says READY=1.
	os.WriteFile(settings, []byte("log-level = loud\n"), 0o644)
	syscall.Kill(pid, syscall.SIGHUP)
	n.next(t, "RELOADING=1")
	n.next(t, "READY=1")
	waitFor(t, func() bool { return strings.Contains(d.String(), "settings refused") }, "the refused settings logged")

	// SIGTERM: STOPPING=1, exit 0, the sandbox keeps running.
	syscall.Kill(pid, syscall.SIGTERM)
	n.next(t, "STOPPING=1")
	if !d.exited() {
		t.Fatalf("SIGTERM: the daemon did not exit: %s", d)
	}
	if c := d.cmd.ProcessState.ExitCode(); c != 0 {
		t.Fatalf("SIGTERM: exit %d\n%s", c, d)
	}
	if !alive(info.InitPid) {
		t.Fatal("SIGTERM stopped the sandbox")
	}

	// Restart under a new notify socket: READY=1 there, the sandbox adopted.
	n2 := newNotifyListener(t, d.socket)
	d.env = []string{"NOTIFY_SOCKET=" + n2.path}
	os.WriteFile(settings, []byte("log-level = info\n"), 0o644)
	d.start("--settings", settings, "--drift-interval", "1h")
	if m := n2.next(t, "READY=1"); !m.accepted || !strings.Contains(m.text, "1 sandboxes adopted") {
		t.Fatalf("restart: ready %q (socket accepted then: %v)\n%s", m.text, m.accepted, d)
	}
	n.none(t, "the old notify socket after the restart")
	if got := d.ls()["svc"]; got.State != "running" || got.InitPid != info.InitPid {
		t.Fatalf("after restart: %+v, want svc running with init %d", got, info.InitPid)
	}
	if !strings.Contains(d.String(), "msg=adopted") || !strings.Contains(d.String(), "id="+info.ID) {
		t.Fatalf("adoption not logged with the id:\n%s", d)
	}
	if r := d.cli("sandbox", "exec", "svc", "--", "/bin/echo", "adopted-ok"); r.Code != 0 || !strings.Contains(r.Stdout, "adopted-ok") {
		t.Fatalf("exec after adoption: %d %s %s", r.Code, r.Stdout, r.Stderr)
	}
	if r := d.cli("sandbox", "rm", "svc"); r.Code != 0 {
		t.Fatalf("rm: %s", r.Stderr)
	}
	for _, l := range []string{"msg=stopped", "msg=removed"} {
		waitFor(t, func() bool { return strings.Contains(d.String(), l) }, l+" logged")
	}
}

func readComm(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return strings.TrimSpace(string(b))
}

// health is the JSON of 'cordon daemon status --json'.
type health struct {
	Healthy   bool           `json:"healthy"`
	Problems  []string       `json:"problems"`
	Version   string         `json:"version"`
	PID       int            `json:"pid"`
	Scope     string         `json:"scope"`
	Sandboxes map[string]int `json:"sandboxes"`
	Store     struct{ OK bool }
	Policy    struct {
		Digest       string `json:"digest"`
		Refused      bool   `json:"refused"`
		RefusedError string `json:"refused_error"`
	} `json:"policy"`
}

// 'cordon daemon status': root sees every sandbox, a group member only
// their own (positive control: root's count includes alice's, so the
// daemon's filter is what hides them from bob); a refused policy reload
// makes it exit 1 (the reason for root only); no daemon on the socket is
// exit 3.
func TestDaemonHealthStatus(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	pdir := t.TempDir()
	d := startDaemon(t, st, "--group", "1000", "--policy-dir", pdir, "--drift-interval", "1h")
	alice := &syscall.Credential{Uid: 1000, Gid: 1000}
	bob := &syscall.Credential{Uid: 1001, Gid: 1000}
	ws := userWorkspace(t)
	os.Chmod(filepath.Dir(ws), 0o755)
	if r := cordonSocket(t, d.socket, st, alice, "sandbox", "create", "alice-box", "--workspace", ws); r.Code != 0 {
		t.Fatalf("alice create: %d %s", r.Code, r.Stderr)
	}
	if r := d.cli("sandbox", "create", "root-box"); r.Code != 0 {
		t.Fatalf("root create: %s", r.Stderr)
	}
	status := func(cred *syscall.Credential, args ...string) (health, result) {
		t.Helper()
		r := cordonSocket(t, d.socket, st, cred, append([]string{"daemon", "status", "--json"}, args...)...)
		var h health
		if r.Code <= 1 {
			if err := json.Unmarshal([]byte(r.Stdout), &h); err != nil {
				t.Fatalf("status --json: %v: %q %s", err, r.Stdout, r.Stderr)
			}
		}
		return h, r
	}
	h, r := status(nil)
	if r.Code != 0 || !h.Healthy || h.Scope != "all" || h.Sandboxes["created"] != 2 || h.PID != d.cmd.Process.Pid || !h.Store.OK || !strings.HasPrefix(h.Policy.Digest, "sha256:") {
		t.Fatalf("root: %d %+v %s", r.Code, h, r.Stderr)
	}
	if h, r = status(alice); r.Code != 0 || h.Scope != "own" || h.Sandboxes["created"] != 1 {
		t.Fatalf("alice: %d %+v %s", r.Code, h, r.Stderr)
	}
	if h, r = status(bob); r.Code != 0 || h.Scope != "own" || len(h.Sandboxes) != 0 || strings.Contains(r.Stdout, "alice") {
		t.Fatalf("bob: %d %+v %s", r.Code, h, r.Stdout)
	}
	// Readable output.
	if r := d.cli("daemon", "status"); r.Code != 0 || !strings.Contains(r.Stdout, "cordon daemon: healthy") || !strings.Contains(r.Stdout, "created 2 (on this host)") {
		t.Fatalf("status text: %d %q %s", r.Code, r.Stdout, r.Stderr)
	}

	// A refused reload: unhealthy, exit 1; bob learns it was refused, not why.
	os.WriteFile(filepath.Join(pdir, "bad.cedar"), []byte(`forbid(principal, action, resource`), 0o644)
	syscall.Kill(d.cmd.Process.Pid, syscall.SIGHUP)
	waitFor(t, func() bool { return strings.Contains(d.String(), "host policy refused") }, "the refusal logged")
	if h, r = status(nil); r.Code != 1 || h.Healthy || !h.Policy.Refused || !strings.Contains(h.Policy.RefusedError, "bad.cedar") {
		t.Fatalf("root after a refused reload: %d %+v", r.Code, h)
	}
	if h, r = status(bob); r.Code != 1 || !h.Policy.Refused || h.Policy.RefusedError != "" {
		t.Fatalf("bob after a refused reload: %d %+v", r.Code, h)
	}
	if r := d.cli("daemon", "status"); r.Code != 1 || !strings.Contains(r.Stdout, "UNHEALTHY") || !strings.Contains(r.Stdout, "bad.cedar") {
		t.Fatalf("status text, unhealthy: %d %q", r.Code, r.Stdout)
	}
	os.Remove(filepath.Join(pdir, "bad.cedar"))
	syscall.Kill(d.cmd.Process.Pid, syscall.SIGHUP)
	waitFor(t, func() bool {
		h, r := status(nil)
		return r.Code == 0 && h.Healthy
	}, "healthy again after a good reload")

	// No daemon: exit 3.
	if r := cordon(t, cordonBin, st, "daemon", "status", "--socket", filepath.Join(t.TempDir(), "none.sock")); r.Code != 3 || !strings.Contains(r.Stderr, "unreachable") {
		t.Fatalf("no daemon: %d %s", r.Code, r.Stderr)
	}
}

// --log-format json: every line of the daemon's log parses as JSON;
// --log-level error drops a WARN line that the default level shows (the
// warning of a notify socket nobody listens on), and so does
// CORDON_LOG_LEVEL=error; bad values are usage errors on any command.
func TestLogFlags(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	absent := "NOTIFY_SOCKET=" + filepath.Join(t.TempDir(), "nobody-listens")
	const warn = "service manager notification failed"

	d := startDaemonEnv(t, st, []string{absent}, "--log-format", "json")
	waitFor(t, func() bool { return strings.Contains(d.String(), `"msg":"ready"`) }, "the ready line")
	lines := strings.Split(strings.TrimSpace(d.String()), "\n")
	sawWarn := false
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("a log line is not JSON: %v: %q", err, l)
		}
		if m["level"] == "WARN" && strings.Contains(fmt.Sprint(m["msg"]), warn) {
			sawWarn = true
		}
	}
	if len(lines) < 4 || !sawWarn {
		t.Fatalf("json log: %d lines, warn seen %v (positive control: the default level shows it):\n%s", len(lines), sawWarn, d)
	}
	d.kill()

	for _, how := range [][]string{{"--log-level", "error"}, nil} {
		d.env = []string{absent}
		if how == nil {
			d.env = append(d.env, "CORDON_LOG_LEVEL=error")
		}
		d.start(how...)
		if r := d.cli("sandbox", "ls"); r.Code != 0 {
			t.Fatal(r.Stderr)
		}
		time.Sleep(300 * time.Millisecond)
		if strings.Contains(d.String(), warn) || strings.Contains(d.String(), "level=INFO") {
			t.Fatalf("%v: WARN/INFO lines at level error:\n%s", how, d)
		}
		d.kill()
	}

	for _, args := range [][]string{{"--log-level", "loud", "version"}, {"sandbox", "ls", "--log-format", "xml"}} {
		if r := cordon(t, cordonBin, st, args...); r.Code != 125 || !strings.Contains(r.Stderr, "usage") {
			t.Fatalf("%v: %d %s", args, r.Code, r.Stderr)
		}
	}
	if r := cordon(t, cordonBin, st, "--log-level", "debug", "--log-format", "json", "version"); r.Code != 0 {
		t.Fatalf("good flags on a one-shot command: %d %s", r.Code, r.Stderr)
	}
}
