package e2e

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/testkit"
)

// The terminal of `cordon sandbox exec` (docs/terminals.md): with a
// terminal on stdin the exec'd program runs on a pty of the sandbox's
// own devpts, as its controlling terminal; the client holds the master
// the daemon sent back and never sends its own terminal to the daemon.

// idleSandbox creates and starts an idle sandbox name on d.
func idleSandbox(t *testing.T, d *daemon, name string) sbInfo {
	t.Helper()
	if r := d.cli("sandbox", "create", name); r.Code != 0 {
		t.Fatalf("create %s: %d %s %s", name, r.Code, r.Stdout, r.Stderr)
	}
	if r := d.cli("sandbox", "start", name); r.Code != 0 {
		t.Fatalf("start %s: %d %s %s", name, r.Code, r.Stdout, r.Stderr)
	}
	i := d.ls()[name]
	if i.State != "running" || i.InitPid == 0 {
		t.Fatalf("after start: %+v", i)
	}
	return i
}

// execShellInTmux runs `cordon sandbox exec NAME [extra] -- /bin/bash
// --norc -i` in a tmux terminal of its own, then (in the same terminal)
// prints the client's exit status and `stty -a`, as shellInTmux does for
// cordon run.
func execShellInTmux(t *testing.T, d *daemon, name string, extra ...string) *testkit.Tmux {
	t.Helper()
	x := execInTmux(t, d, nil, name, extra...)
	x.WaitFor(`(?m)^bash-[0-9.]+\$ $`, 30*time.Second)
	return x
}

// execInTmux is execShellInTmux with the client started through prefix
// (setpriv: another user) and without waiting for the prompt.
func execInTmux(t *testing.T, d *daemon, prefix []string, name string, extra ...string) *testkit.Tmux {
	t.Helper()
	args := append(append(append([]string{}, prefix...), cordonBin, "--state-dir", d.state, "sandbox", "exec", name), extra...)
	args = append(args, "--", "/bin/bash", "--norc", "--noprofile", "-i")
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	script := strings.Join(quoted, " ") + `; c=$?; echo "cordon-exit=$c"; stty -a; exit $c`
	return testkit.NewTmux(t, 100, 30, []string{"PATH=/usr/bin:/bin", "CORDON_SOCKET=" + d.socket}, "/bin/sh", "-c", script)
}

// execTree is the client's pid in the pane and the exec'd program's host
// pid: the only child of the idle sandbox's init.
func execTree(t *testing.T, x *testkit.Tmux, initPid int) (client, prog int) {
	t.Helper()
	var kids []int
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if kids = childPids(x.PID()); len(kids) == 1 {
			break
		}
	}
	if len(kids) != 1 {
		t.Fatalf("the pane's shell %d has children %v, want exactly cordon", x.PID(), kids)
	}
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if progs := childPids(initPid); len(progs) == 1 {
			return kids[0], progs[0]
		}
	}
	t.Fatalf("the sandbox init %d has no single exec'd child: %v", initPid, childPids(initPid))
	return
}

// descendants is pid and every process under it, read from the host.
func descendants(pid int) []int {
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		out = append(out, childPids(out[i])...)
	}
	return out
}

func isMaster(st syscall.Stat_t) bool {
	return st.Mode&syscall.S_IFMT == syscall.S_IFCHR && st.Rdev == 5<<8|2
}

// TestDaemonTerminalJobControl: `sandbox exec NAME -- bash -i` has job
// control on its own pty: Ctrl-C interrupts only the foreground job,
// Ctrl-Z stops it, `exit 3` ends exec with 3 while the sandbox keeps
// running, and the client's terminal is restored afterwards.
func TestDaemonTerminalJobControl(t *testing.T) {
	testkit.RequireRoot(t)
	d := startDaemon(t, newStateDir(t))
	idleSandbox(t, d, "tty")
	x := execShellInTmux(t, d, "tty")
	driveJobControl(t, x, "sandbox exec")

	x.Type("exit 3")
	if code := x.WaitExit(30 * time.Second); code != 3 {
		t.Fatalf("exit 3 in the sandbox: sandbox exec = %d, want 3\n%s", code, x.Screen())
	}
	requireRestored(t, x.Screen())
	if i := d.ls()["tty"]; i.State != "running" {
		t.Errorf("after the exec ended the sandbox is %+v, want running", i)
	}
	if r := d.cli("sandbox", "exec", "tty", "--", "/bin/echo", "again"); r.Code != 0 || r.Stdout != "again\n" {
		t.Errorf("a later exec without a terminal: %d %q %q", r.Code, r.Stdout, r.Stderr)
	}
}

// TestDaemonTerminalWindowSize: the exec's pty starts at the client's
// window size and follows it when the client's terminal is resized.
func TestDaemonTerminalWindowSize(t *testing.T) {
	testkit.RequireRoot(t)
	d := startDaemon(t, newStateDir(t))
	idleSandbox(t, d, "win")
	x := execShellInTmux(t, d, "win")
	x.Type("echo size-$(stty size | tr ' ' x)")
	x.WaitFor(`(?m)^size-30x100`, 10*time.Second)
	x.Resize(80, 20)
	waitSize(t, x, "20x80")
	x.Type("exit")
	x.WaitExit(30 * time.Second)
}

// TestDaemonTerminalNotTheClientTerminal: the exec'd program's
// descriptors 0, 1 and 2 are a pty slave of the sandbox's own devpts;
// no process in the sandbox, and not the daemon, holds the client's
// terminal; the pty master is held by the client only (none in the
// sandbox, none left in the daemon). Read from the host through /proc.
// Positive control: with --tty never the program's fd 0 is the client's
// terminal, which the same reading finds.
func TestDaemonTerminalNotTheClientTerminal(t *testing.T) {
	testkit.RequireRoot(t)
	d := startDaemon(t, newStateDir(t))
	for _, tc := range []struct {
		name   string
		extra  []string
		ownPty bool
	}{
		{"own pty", nil, true},
		{"control: --tty never", []string{"--tty", "never"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "t" + fmt.Sprint(tc.ownPty)
			info := idleSandbox(t, d, name)
			x := execShellInTmux(t, d, name, tc.extra...)
			client, prog := execTree(t, x, info.InitPid)
			host := ptyFacts(t, client, 0) // the pane's terminal
			if major(host.Rdev) < ptySlaveMajorLo || major(host.Rdev) > ptySlaveMajorHi {
				t.Fatalf("the client's fd 0 is not a pty (rdev %#x): the test's terminal is wrong", host.Rdev)
			}
			holds := func(pid int) (client, master []int) {
				for _, fd := range openFDs(t, pid) {
					st := ptyFacts(t, pid, fd)
					if st.Dev == host.Dev && st.Rdev == host.Rdev {
						client = append(client, fd)
					}
					if isMaster(st) {
						master = append(master, fd)
					}
				}
				return client, master
			}
			p0 := ptyFacts(t, prog, 0)
			if !tc.ownPty {
				if p0.Dev != host.Dev || p0.Rdev != host.Rdev {
					t.Errorf("control: with --tty never the program's fd 0 (dev %#x rdev %#x) is not the client's terminal (dev %#x rdev %#x): the check cannot see it", p0.Dev, p0.Rdev, host.Dev, host.Rdev)
				}
				x.Type("exit")
				x.WaitExit(30 * time.Second)
				return
			}
			for fd := 0; fd <= 2; fd++ {
				p := ptyFacts(t, prog, fd)
				if p.Dev == host.Dev {
					t.Errorf("program fd %d is on the host's devpts (dev %#x rdev %#x)", fd, p.Dev, p.Rdev)
				}
				if major(p.Rdev) < ptySlaveMajorLo || major(p.Rdev) > ptySlaveMajorHi {
					t.Errorf("program fd %d is not a pty slave (rdev %#x)", fd, p.Rdev)
				}
			}
			for _, pid := range descendants(info.InitPid) {
				if c, m := holds(pid); len(c) > 0 || len(m) > 0 {
					t.Errorf("pid %d in the sandbox holds the client's terminal as %v and a pty master as %v", pid, c, m)
				}
			}
			if c, m := holds(d.cmd.Process.Pid); len(c) > 0 || len(m) > 0 {
				t.Errorf("the daemon holds the client's terminal as %v and a pty master as %v", c, m)
			}
			// Positive control: the client holds the master.
			if _, m := holds(client); len(m) != 1 {
				t.Errorf("the client holds %d pty masters, want 1: the check cannot see one", len(m))
			}
			x.Type("exit")
			x.WaitExit(30 * time.Second)
		})
	}
}

// TestDaemonTerminalGroupMembers: two non-root clients (members of the
// daemon's socket group) each exec a shell on a terminal in their own
// sandbox at the same time: each client holds exactly one pty master, and
// what each types comes back on its own terminal only. A client that
// names the other's sandbox is refused (as if it did not exist) and gets
// no terminal.
func TestDaemonTerminalGroupMembers(t *testing.T) {
	testkit.RequireRoot(t)
	d := startDaemon(t, newStateDir(t), "--group", "1000")
	users := []struct {
		name string
		cred *syscall.Credential
	}{
		{"alice", &syscall.Credential{Uid: 1000, Gid: 1000}},
		{"bob", &syscall.Credential{Uid: 1001, Gid: 1000}},
	}
	panes := make([]*testkit.Tmux, len(users))
	for i, u := range users {
		box := u.name + "-tty"
		for _, op := range []string{"create", "start"} {
			if r := cordonSocket(t, d.socket, d.state, u.cred, "sandbox", op, box); r.Code != 0 {
				t.Fatalf("%s %s %s: %d %s", u.name, op, box, r.Code, r.Stderr)
			}
		}
		as := []string{"setpriv", fmt.Sprintf("--reuid=%d", u.cred.Uid), fmt.Sprintf("--regid=%d", u.cred.Gid), "--clear-groups"}
		panes[i] = execInTmux(t, d, as, box)
		panes[i].WaitFor(`(?m)^bash-[0-9.]+\$ $`, 30*time.Second)
	}
	for i, u := range users {
		panes[i].Type(fmt.Sprintf("echo typed-by-%s-$((40+2)); id -u", u.name))
		panes[i].WaitFor(fmt.Sprintf(`(?m)^typed-by-%s-42`, u.name), 10*time.Second)
	}
	for i, u := range users {
		s := panes[i].Screen()
		other := users[1-i].name
		if strings.Contains(s, "typed-by-"+other+"-42") {
			t.Errorf("%s's terminal shows what %s typed:\n%s", u.name, other, s)
		}
		client := childPids(panes[i].PID())
		if len(client) != 1 {
			t.Fatalf("%s's pane runs %v, want one client", u.name, client)
		}
		masters := 0
		for _, fd := range openFDs(t, client[0]) {
			if isMaster(ptyFacts(t, client[0], fd)) {
				masters++
			}
		}
		if masters != 1 {
			t.Errorf("%s's client holds %d pty masters, want exactly its own", u.name, masters)
		}
	}
	// Bob names alice's sandbox: refused before anything runs.
	x := execInTmux(t, d, []string{"setpriv", "--reuid=1001", "--regid=1000", "--clear-groups"}, "alice-tty")
	if code := x.WaitExit(30 * time.Second); code == 0 || !strings.Contains(x.Screen(), "no sandbox named alice-tty") {
		t.Errorf("bob's exec in alice's sandbox = %d, want refused as absent:\n%s", code, x.Screen())
	}
	requireRestored(t, x.Screen())
	for i := range panes {
		panes[i].Type("exit 5")
		if code := panes[i].WaitExit(30 * time.Second); code != 5 {
			t.Errorf("%s: exit 5 = %d", users[i].name, code)
		}
	}
}

// TestDaemonTerminalClientGone: when the exec's client is killed, the
// master's last copy closes and the program's terminal hangs up: the
// shell ends (SIGHUP) and the sandbox runs on. Control: until then the
// shell is alive.
func TestDaemonTerminalClientGone(t *testing.T) {
	testkit.RequireRoot(t)
	d := startDaemon(t, newStateDir(t))
	info := idleSandbox(t, d, "gone")
	x := execShellInTmux(t, d, "gone")
	client, prog := execTree(t, x, info.InitPid)
	time.Sleep(300 * time.Millisecond)
	if _, state := procState(prog); state == "" || state == "Z" {
		t.Fatalf("control: the shell %d is not alive (%q) before the client is killed", prog, state)
	}
	if err := syscall.Kill(client, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { _, state := procState(prog); return state == "" }, "the shell to end after its terminal hung up")
	if i := d.ls()["gone"]; i.State != "running" {
		t.Errorf("after the client was killed the sandbox is %+v, want running", i)
	}
}

// TestDaemonTerminalAlways: --tty always gives the exec a terminal
// without one on stdin (stdin /dev/null here): stdin is the sandbox's pty
// while stdout, a file, stays the caller's; without it (the control) stdin
// is no terminal. A bad --tty value is a usage error before anything runs.
func TestDaemonTerminalAlways(t *testing.T) {
	testkit.RequireRoot(t)
	d := startDaemon(t, newStateDir(t))
	idleSandbox(t, d, "always")
	const probe = `if test -t 0; then echo "stdin-tty $(tty)"; else echo stdin-not-tty; fi; test -t 1 || echo stdout-not-tty`
	r := d.cli("sandbox", "exec", "always", "--tty", "always", "--", "/bin/sh", "-c", probe)
	if r.Code != 0 || !strings.Contains(r.Stdout, "stdin-tty /dev/pts/") || !strings.Contains(r.Stdout, "stdout-not-tty") {
		t.Errorf("--tty always: %d %q %q; want stdin the sandbox's pty, stdout the caller's file", r.Code, r.Stdout, r.Stderr)
	}
	r = d.cli("sandbox", "exec", "always", "--", "/bin/sh", "-c", probe)
	if r.Code != 0 || !strings.Contains(r.Stdout, "stdin-not-tty") {
		t.Errorf("control, --tty auto without a terminal: %d %q %q; want stdin not a terminal", r.Code, r.Stdout, r.Stderr)
	}
	if r := d.cli("sandbox", "exec", "always", "--tty", "sometimes", "--", "/bin/true"); r.Code != 125 || !strings.Contains(r.Stderr, "--tty") {
		t.Errorf("--tty sometimes: %d %q, want a usage error (125)", r.Code, r.Stderr)
	}
}
