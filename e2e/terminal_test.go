package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/testkit"
)

// ptySlaveMajor is the first major of Unix98 pty slaves (136..143).
const ptySlaveMajorLo, ptySlaveMajorHi = 136, 143

// shellInTmux runs `cordon run [extra] -- /bin/bash --norc -i` in a tmux
// terminal of its own, then (in the same terminal, after cordon returns)
// prints cordon's exit status and `stty -a`, so a test sees how cordon
// left the terminal.
func shellInTmux(t *testing.T, st string, extra ...string) *testkit.Tmux {
	t.Helper()
	args := append([]string{cordonBin, "--state-dir", st, "run"}, extra...)
	args = append(args, "--", "/bin/bash", "--norc", "--noprofile", "-i")
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	script := strings.Join(quoted, " ") + `; c=$?; echo "cordon-exit=$c"; stty -a; exit $c`
	x := testkit.NewTmux(t, 100, 30, []string{"PATH=/usr/bin:/bin", "PS1=sbx$ "}, "/bin/sh", "-c", script)
	x.WaitFor(`(?m)^(bash-[0-9.]+\$|sbx\$) $`, 30*time.Second)
	return x
}

// cordonTree is cordon's pid in the pane, its sandbox init and the
// program (the init's only child), read from the host.
func cordonTree(t *testing.T, x *testkit.Tmux) (cordonPid, initPid, progPid int) {
	t.Helper()
	// The pane runs sh -c, whose child is cordon.
	sh := x.PID()
	var kids []int
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if kids = childPids(sh); len(kids) == 1 {
			break
		}
	}
	if len(kids) != 1 {
		t.Fatalf("the pane's shell %d has children %v, want exactly cordon", sh, kids)
	}
	cordonPid = kids[0]
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		for _, c := range childPids(cordonPid) {
			if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", c)); strings.HasPrefix(string(comm), "cordon-sandbox-init") {
				initPid = c
			}
		}
		if initPid != 0 {
			if progs := childPids(initPid); len(progs) >= 1 {
				return cordonPid, initPid, progs[0]
			}
		}
	}
	t.Fatalf("no sandbox init with a program under cordon %d", cordonPid)
	return
}

// requireRestored checks the `stty -a` the pane printed after cordon
// returned: canonical mode and echo are on again.
func requireRestored(t *testing.T, screen string) {
	t.Helper()
	i := strings.Index(screen, "cordon-exit=")
	if i < 0 {
		t.Fatalf("no exit status on the screen:\n%s", screen)
	}
	after := screen[i:]
	for _, flag := range []string{"icanon", "echo", "isig", "icrnl", "opost"} {
		if !regexp.MustCompile(`(^|\s)` + flag + `(\s|$)`).MatchString(after) {
			t.Errorf("after cordon returned, stty -a lacks %s (the terminal was left raw):\n%s", flag, after)
		}
	}
}

// driveJobControl drives bash -i on the program's own pty in x: job
// control works, Ctrl-C, Ctrl-Z and Ctrl-\ reach only the foreground job
// (bash, and what, live on). Each key is sent once its job is seen
// running in /proc, never after a guessed delay.
func driveJobControl(t *testing.T, x *testkit.Tmux, what string) {
	t.Helper()
	x.Type("tty; echo job-$((1+1))")
	s := x.WaitFor(`(?m)^job-2`, 10*time.Second)
	if strings.Contains(s, "no job control") {
		t.Errorf("bash has no job control:\n%s", s)
	}
	if !regexp.MustCompile(`(?m)^/dev/pts/\d+`).MatchString(s) {
		t.Errorf("tty in the sandbox is not a pty:\n%s", s)
	}
	x.Type("sleep 30 &")
	x.Type("jobs")
	x.WaitFor(`\[1\]\+?\s+Running\s+sleep 30 &`, 10*time.Second)
	alive := func(key string) {
		t.Helper()
		if dead, code := x.Exited(); dead {
			t.Fatalf("%s ended %s (%d)", key, what, code)
		}
	}

	// Ctrl-C interrupts the foreground sleep only.
	x.Type("sleep 31")
	waitRunning(t, "sleep", "31")
	x.Keys(false, "C-c")
	x.Type("echo alive-$((6*7))")
	x.WaitFor(`(?m)^alive-42`, 10*time.Second)
	alive("Ctrl-C")

	// Ctrl-Z stops the foreground job; the sandbox runs on.
	x.Type("sleep 32")
	waitRunning(t, "sleep", "32")
	x.Keys(false, "C-z")
	x.Type("jobs")
	x.WaitFor(`Stopped\s+sleep 32`, 10*time.Second)

	// Ctrl-\ quits the foreground job only.
	x.Type("sleep 33")
	waitRunning(t, "sleep", "33")
	x.Keys(false, `C-\`)
	x.Type("echo still-$((2+3))")
	x.WaitFor(`(?m)^still-5`, 10*time.Second)
	alive("Ctrl-\\")

	// fg brings the stopped job back; Ctrl-C ends it.
	x.Type("fg %2")
	x.WaitFor(`(?m)^sleep 32\s*$`, 10*time.Second)
	x.Keys(false, "C-c")
	x.Type("kill %1; wait; echo reaped-$((3*3))")
	x.WaitFor(`(?m)^reaped-9`, 10*time.Second)
}

// waitRunning waits until a process with exactly this argv runs on the
// host (the sandbox's processes are the host's, seen through /proc).
func waitRunning(t *testing.T, argv ...string) {
	t.Helper()
	want := strings.Join(argv, "\x00") + "\x00"
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && string(b) == want {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no process %q within 10s", argv)
		}
	}
}

// waitSize types `stty size` until the program's terminal reports
// rows x cols (a resize reaches it asynchronously).
func waitSize(t *testing.T, x *testkit.Tmux, size string) {
	t.Helper()
	for i := 0; ; i++ {
		x.Type("echo size-$(stty size | tr ' ' x)")
		if i == 20 {
			x.WaitFor(`(?m)^size-`+size, 10*time.Second)
			return
		}
		time.Sleep(250 * time.Millisecond)
		if regexp.MustCompile(`(?m)^size-` + size).MatchString(x.Screen()) {
			return
		}
	}
}

// TestTerminalJobControl: with a terminal on stdin the program gets a
// pty of the sandbox's own as its controlling terminal: job control
// works, Ctrl-C, Ctrl-Z and Ctrl-\ reach only the foreground job (bash
// and cordon live on), exit 7 ends cordon with 7, and the terminal is
// restored afterwards.
func TestTerminalJobControl(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	x := shellInTmux(t, st)
	driveJobControl(t, x, "cordon")

	x.Type("exit 7")
	if code := x.WaitExit(30 * time.Second); code != 7 {
		t.Fatalf("exit 7 in the sandbox: cordon = %d, want 7\n%s", code, x.Screen())
	}
	requireRestored(t, x.Screen())
}

// TestTerminalWindowSize: the pty starts at the terminal's size and
// follows it when the terminal is resized.
func TestTerminalWindowSize(t *testing.T) {
	testkit.RequireRoot(t)
	x := shellInTmux(t, newStateDir(t))
	x.Type("echo size-$(stty size | tr ' ' x)")
	x.WaitFor(`(?m)^size-30x100`, 10*time.Second)
	x.Resize(80, 20)
	waitSize(t, x, "20x80")
	x.Type("exit")
	x.WaitExit(30 * time.Second)
}

// ptyFacts stats what /proc/pid/fd/n is, from the host.
func ptyFacts(t *testing.T, pid, fd int) syscall.Stat_t {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(fmt.Sprintf("/proc/%d/fd/%d", pid, fd), &st); err != nil {
		t.Fatalf("stat /proc/%d/fd/%d: %v", pid, fd, err)
	}
	return st
}

func major(rdev uint64) uint64 { return (rdev >> 8) & 0xfff }

// TestTerminalNotTheHostTerminal: the program's descriptors 0, 1 and 2
// are a pty slave of the sandbox's own devpts instance, never cordon's
// terminal, and the sandbox init does not hold cordon's terminal either.
// Read from the host through /proc. Positive control: with --tty never
// the same reading finds cordon's own terminal as the program's fd 0.
func TestTerminalNotTheHostTerminal(t *testing.T) {
	testkit.RequireRoot(t)
	for _, tc := range []struct {
		name   string
		extra  []string
		ownPty bool
	}{
		{"own pty", nil, true},
		{"control: --tty never", []string{"--tty", "never"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := shellInTmux(t, newStateDir(t), tc.extra...)
			cordonPid, initPid, prog := cordonTree(t, x)
			host := ptyFacts(t, cordonPid, 0) // the pane's terminal
			if major(host.Rdev) < ptySlaveMajorLo || major(host.Rdev) > ptySlaveMajorHi {
				t.Fatalf("cordon's fd 0 is not a pty (rdev %#x): the test's terminal is wrong", host.Rdev)
			}
			for fd := 0; fd <= 2; fd++ {
				p := ptyFacts(t, prog, fd)
				same := p.Dev == host.Dev && p.Rdev == host.Rdev
				if tc.ownPty {
					if same || p.Dev == host.Dev {
						t.Errorf("program fd %d is on the host's devpts (dev %#x rdev %#x; host terminal dev %#x rdev %#x)", fd, p.Dev, p.Rdev, host.Dev, host.Rdev)
					}
					if major(p.Rdev) < ptySlaveMajorLo || major(p.Rdev) > ptySlaveMajorHi {
						t.Errorf("program fd %d is not a pty slave (rdev %#x)", fd, p.Rdev)
					}
					if i := ptyFacts(t, initPid, fd); i.Dev == host.Dev && i.Rdev == host.Rdev {
						t.Errorf("the sandbox init holds cordon's terminal as fd %d", fd)
					}
				} else if fd == 0 && !same {
					t.Errorf("control: with --tty never the program's fd 0 (dev %#x rdev %#x) is not cordon's terminal (dev %#x rdev %#x): the check cannot see it", p.Dev, p.Rdev, host.Dev, host.Rdev)
				}
			}
			if tc.ownPty {
				// The master went to cordon and was closed inside: no
				// descriptor of the program or the init is a pty master.
				for _, pid := range []int{initPid, prog} {
					for _, fd := range openFDs(t, pid) {
						if st := ptyFacts(t, pid, fd); st.Mode&syscall.S_IFMT == syscall.S_IFCHR && st.Rdev == 5<<8|2 {
							t.Errorf("pid %d in the sandbox holds a pty master as fd %d", pid, fd)
						}
					}
				}
				// Positive control: cordon holds it.
				held := false
				for _, fd := range openFDs(t, cordonPid) {
					if st := ptyFacts(t, cordonPid, fd); st.Mode&syscall.S_IFMT == syscall.S_IFCHR && st.Rdev == 5<<8|2 {
						held = true
					}
				}
				if !held {
					t.Errorf("cordon holds no pty master: the check cannot see one")
				}
			}
			x.Type("exit")
			x.WaitExit(30 * time.Second)
		})
	}
}

// openFDs lists pid's open descriptors, read from the host.
func openFDs(t *testing.T, pid int) []int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range ents {
		var fd int
		if _, err := fmt.Sscan(e.Name(), &fd); err == nil {
			out = append(out, fd)
		}
	}
	return out
}

// TestTerminalSignalledFromOutside: kill -TERM of cordon's pid (not a
// key in the terminal) ends the sandbox: cordon exits, the program and
// the init are gone, and the terminal is restored.
// SIGQUIT too: the Go runtime's default (a goroutine dump and exit 2)
// would skip restoring the terminal and deprovisioning.
func TestTerminalSignalledFromOutside(t *testing.T) {
	testkit.RequireRoot(t)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGQUIT, syscall.SIGINT, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			st := newStateDir(t)
			x := shellInTmux(t, st)
			cordonPid, initPid, prog := cordonTree(t, x)
			if err := syscall.Kill(cordonPid, sig); err != nil {
				t.Fatal(err)
			}
			code := x.WaitExit(30 * time.Second)
			if code == 0 || code == 2 {
				t.Errorf("cordon after %v = %d, want the program's end by signal", sig, code)
			}
			for _, pid := range []int{initPid, prog} {
				if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
					if ppid, _ := procState(pid); ppid == cordonPid || ppid == initPid {
						t.Errorf("pid %d of the sandbox is still alive after cordon exited", pid)
					}
				}
			}
			requireRestored(t, x.Screen())
			if rep := runGC(t, st); len(rep.Live) != 0 || len(rep.Reclaimed) != 0 {
				t.Errorf("after %v cordon left a sandbox for gc: %+v", sig, rep)
			}
		})
	}
}

// TestTerminalTimeout: on a terminal, --timeout still ends the sandbox
// (exit 124), the terminal is restored and nothing is left for gc.
func TestTerminalTimeout(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	script := fmt.Sprintf(`'%s' --state-dir '%s' run --timeout 2s -- /bin/sleep 60; echo "cordon-exit=$?"; stty -a`, cordonBin, st)
	x := testkit.NewTmux(t, 100, 30, []string{"PATH=/usr/bin:/bin"}, "/bin/sh", "-c", script)
	waitRunning(t, "/bin/sleep", "60")
	x.WaitExit(30 * time.Second)
	s := x.Screen()
	if !strings.Contains(s, "cordon-exit=124") {
		t.Fatalf("cordon run --timeout 2s on a terminal did not exit 124:\n%s", s)
	}
	requireRestored(t, s)
	if rep := runGC(t, st); len(rep.Live) != 0 || len(rep.Reclaimed) != 0 {
		t.Errorf("after the timeout cordon left a sandbox for gc: %+v", rep)
	}
}

// TestTerminalRestoredAfterRefusal: a run refused before the program
// starts, or whose program is not found (the init's exec error with a
// terminal asked for: still 127, not a terminal failure), leaves the
// terminal as it found it.
func TestTerminalRestoredAfterRefusal(t *testing.T) {
	testkit.RequireRoot(t)
	for _, tc := range []struct {
		name string
		args string
		code int
	}{
		{"refused level", "--level DEDICATED_VM -- /bin/true", 125},
		{"not found", "-- /nonexistent-program", 127},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newStateDir(t)
			script := fmt.Sprintf(`'%s' --state-dir '%s' run %s; echo "cordon-exit=$?"; stty -a`, cordonBin, st, tc.args)
			x := testkit.NewTmux(t, 100, 30, []string{"PATH=/usr/bin:/bin"}, "/bin/sh", "-c", script)
			x.WaitExit(30 * time.Second)
			s := x.Screen()
			if !strings.Contains(s, fmt.Sprintf("cordon-exit=%d", tc.code)) {
				t.Fatalf("cordon run %s did not exit %d:\n%s", tc.args, tc.code, s)
			}
			requireRestored(t, s)
		})
	}
}

// TestRunJSONOnFD3: --json writes the outcome on descriptor 3, so the
// program's stdout is exactly its own; without descriptor 3 it is a usage
// error before anything runs; --json-file writes it to a file; and the
// program never inherits descriptor 3 (positive control: the same shell
// test sees a descriptor 3 it opened itself).
func TestRunJSONOnFD3(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	r := cordon(t, cordonBin, st, "run", "--json", "--", "/usr/bin/printf", "abc")
	if r.Code != 0 || r.Stdout != "abc" {
		t.Fatalf("run --json printf abc: %d, stdout %q, want exactly \"abc\"\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
	var o Outcome
	if err := json.Unmarshal([]byte(r.OutcomeJSON), &o); err != nil || !isSandboxID(o.SandboxID) || o.ExitCode != 0 {
		t.Fatalf("outcome on descriptor 3 = %q (%v), want a JSON outcome with a sandbox id", r.OutcomeJSON, err)
	}

	// Without descriptor 3: refused before anything runs.
	cmd := []string{"--state-dir", st, "run", "--json", "--", "/bin/sh", "-c", "echo ran"}
	out, code := runPlain(t, cmd...)
	if code != 125 || strings.Contains(out, "ran") || !strings.Contains(out, "3>") {
		t.Errorf("run --json without descriptor 3 = %d %q, want 125 saying how to open it, and nothing run", code, out)
	}

	// --json-file.
	jf := filepath.Join(t.TempDir(), "outcome.json")
	r = cordon(t, cordonBin, st, "run", "--json-file", jf, "--", "/usr/bin/printf", "abc")
	b, err := os.ReadFile(jf)
	if r.Code != 0 || r.Stdout != "abc" || err != nil || json.Unmarshal(b, &o) != nil || !isSandboxID(o.SandboxID) {
		t.Errorf("run --json-file: %d stdout %q, file %q (%v)", r.Code, r.Stdout, b, err)
	}

	// The program never has descriptor 3.
	probe := `if { true >&3; } 2>/dev/null; then echo fd3-open; else echo fd3-closed; fi; exec 3>/dev/null; if { true >&3; } 2>/dev/null; then echo control-open; fi`
	r = cordon(t, cordonBin, st, "run", "--json", "--", "/bin/sh", "-c", probe)
	if r.Code != 0 || r.Stdout != "fd3-closed\ncontrol-open\n" {
		t.Errorf("descriptor 3 in the sandbox: %d %q, want fd3-closed then the control's control-open\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
}

// runPlain runs cordon with its stdio only (no descriptor 3) and returns
// its combined output and exit status.
func runPlain(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(cordonBin, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	out, _ := cmd.CombinedOutput()
	return string(out), cmd.ProcessState.ExitCode()
}

// TestRunLogNotOnTerminal: a warning the gateway logs while the program
// runs (a denied egress CONNECT) is not in the program's output streams
// while it runs; cordon prints a summary naming the log when the program
// ends, and the log file has the line. The program's own output shows
// the denial happened (positive control: the gateway did log it).
func TestRunLogNotOnTerminal(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	up := testkit.NewModelUpstream(t, fakeKey, "x")
	cfg := gatewayConfig(t, up.URL(), `egress:
  allow:
    - host: allowed.test
      ports: [80]
`)
	logFile := filepath.Join(t.TempDir(), "run.log")
	r := cordon(t, cordonBin, st, "run", "--config", cfg, "--log-file", logFile, "--", "/bin/sh", "-c",
		"/usr/bin/curl -sS -k --max-time 10 https://denied.test:443/ 2>&1; echo program-done")
	if !strings.Contains(r.Stdout, "403") || !strings.Contains(r.Stdout, "program-done") {
		t.Fatalf("the denied CONNECT did not happen: %d %q %q", r.Code, r.Stdout, r.Stderr)
	}
	log, err := os.ReadFile(logFile)
	if err != nil || !strings.Contains(string(log), "decision=deny") || !strings.Contains(string(log), "level=WARN") {
		t.Fatalf("the run log %s has no WARN line of the denial (%v):\n%s", logFile, err, log)
	}
	for _, stream := range []string{r.Stdout, r.Stderr} {
		for _, l := range strings.Split(stream, "\n") {
			if strings.HasPrefix(l, "time=") || strings.Contains(l, "level=WARN") && !strings.HasPrefix(l, "cordon: ") {
				t.Errorf("a log line reached the program's streams: %q", l)
			}
		}
	}
	want := "warning(s) while the program ran; first: "
	if !strings.Contains(r.Stderr, want) || !strings.Contains(r.Stderr, "full log: "+logFile) {
		t.Errorf("no summary naming the log on stderr: %q", r.Stderr)
	}
	if fi, err := os.Stat(logFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("run log mode = %v (%v), want 0600", fi.Mode(), err)
	}
}

// TestTerminalRestoredAfterPanic: cordon panicking while the program runs
// on its terminal (a test build's --test-panic-at) still restores the
// terminal, and ends the sandbox. The panic's message on the screen shows
// it happened after the terminal was made raw.
func TestTerminalRestoredAfterPanic(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	script := fmt.Sprintf(`'%s' --state-dir '%s' --test-panic-at run.after_attach run -- /bin/sleep 30; echo "cordon-exit=$?"; stty -a`, hooksBin, st)
	x := testkit.NewTmux(t, 100, 40, []string{"PATH=/usr/bin:/bin"}, "/bin/sh", "-c", script)
	x.WaitExit(60 * time.Second)
	s := x.Screen()
	if !strings.Contains(s, "test: run.after_attach") || !strings.Contains(s, "cordon-exit=2") {
		t.Fatalf("cordon did not panic after attaching the terminal:\n%s", s)
	}
	requireRestored(t, s)
	if rep := runGC(t, st); len(rep.Live) != 0 {
		t.Errorf("the sandbox outlived cordon's panic: live %v", rep.Live)
	}
}

// TestTerminalCtrlCAtStart: Ctrl-C pressed while the program is starting
// (a test build pauses cordon 3 s after the program started, before its
// terminal is relayed) is a key for the program's terminal, never a
// signal that ends the sandbox: the program's foreground job gets SIGINT
// (its sleep ends, its trap runs) and the program finishes on its own.
// Positive control: the trap's "got-int" shows the key did arrive.
func TestTerminalCtrlCAtStart(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	prog := `trap "echo got-int" INT; sleep 30; echo survived; exit 3`
	// The pane's shell survives a SIGINT (and says so) to print the end.
	script := fmt.Sprintf(`trap "echo pane-got-int" INT; '%s' --state-dir '%s' --test-pause-at run.after_exec run -- /bin/sh -c '%s'; echo "cordon-exit=$?"; stty -a`, hooksBin, st, prog)
	x := testkit.NewTmux(t, 100, 40, []string{"PATH=/usr/bin:/bin"}, "/bin/sh", "-c", script)
	cordonTree(t, x) // the program runs: cordon is in its pause
	x.Keys(false, "C-c")
	x.WaitExit(60 * time.Second)
	s := x.Screen()
	if strings.Contains(s, "pane-got-int") || !strings.Contains(s, "got-int") || !strings.Contains(s, "survived") || !strings.Contains(s, "cordon-exit=3") {
		t.Fatalf("Ctrl-C at the program's start did not reach only its foreground job (want got-int, survived, cordon-exit=3 and no SIGINT in the pane):\n%s", s)
	}
	requireRestored(t, s)
}
