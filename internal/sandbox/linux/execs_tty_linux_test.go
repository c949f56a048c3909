package linux

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/sandbox"
)

// initTerminals lists, read from the host, the init's descriptors that are
// pty masters (5:2) and pty slaves (UNIX98 slave majors 136–143).
func initTerminals(t *testing.T, pid int) (masters, slaves []string) {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		var st unix.Stat_t
		if unix.Stat(dir+"/"+e.Name(), &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR {
			continue
		}
		switch maj := unix.Major(st.Rdev); {
		case maj == ptmxMajor && unix.Minor(st.Rdev) == ptmxMinor:
			masters = append(masters, e.Name())
		case maj >= 136 && maj <= 143:
			slaves = append(slaves, e.Name())
		}
	}
	return masters, slaves
}

// With the console at start the master is the caller's right after Start,
// before Exec, and is not left in the sandbox: the init holds the slave
// (the positive control that the host reads the init's descriptors, and
// that the terminal exists) and no master. The program then runs on it:
// a tty on the descriptors asked for (stdin, stdout), not on stderr (a
// pipe), with the window size asked for, as its controlling terminal.
// The control: without TerminalAtStart nothing is handed out at Start.
func TestTerminalAtStart(t *testing.T) {
	requireSandboxes(t)
	dir, st := newStateDir(t)
	p := newStandaloneProvider(t, dir, st)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errR, errW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer errR.Close()
	const script = `read line; echo "got $line"; stty size; test -t 0 && test -t 1 && echo in-out-tty; test -t 2 || echo stderr-not-tty >&2; ` +
		`read pid comm state ppid pgrp sid ttynr rest < /proc/self/stat; echo "tty=$ttynr"; exit 6`
	term := &sandbox.Terminal{Stdin: true, Stdout: true, Rows: 30, Cols: 100}
	sb := startStandalone(t, p, sandbox.Spec{Argv: []string{"/bin/sh", "-c", script}, Terminal: term, Stderr: errW,
		Rootfs: ttyImageRoot(t), Image: &sandbox.Image{TerminalAtStart: true, Dir: "/"}}, true)
	errW.Close()
	m := sb.Master()
	if m == nil {
		t.Fatal("no master after Start with TerminalAtStart")
	}
	defer m.Close()
	if err := CheckPtyMaster(m); err != nil {
		t.Fatal(err)
	}
	if again := sb.Master(); again != nil {
		t.Error("a second Master returned a descriptor")
	}
	masters, slaves := initTerminals(t, sb.InitPid())
	if len(masters) != 0 {
		t.Errorf("the init holds pty masters at fds %v after Start", masters)
	}
	if len(slaves) != 1 {
		t.Errorf("the init holds pty slaves at fds %v after Start, want exactly one (the program's)", slaves)
	}
	// The console works before the program runs: typed input waits for it.
	if _, err := io.WriteString(m, "hello\n"); err != nil {
		t.Fatal(err)
	}
	if err := sb.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(m) // until EIO: every process inside closed it
	stderr, _ := io.ReadAll(errR)
	ex, err := sb.Wait(ctx)
	if err != nil || ex.Code != 6 {
		t.Fatalf("Wait = %+v, %v; want exit 6", ex, err)
	}
	o := strings.ReplaceAll(string(out), "\r\n", "\n")
	for _, want := range []string{"got hello\n", "30 100\n", "in-out-tty\n"} {
		if !strings.Contains(o, want) {
			t.Errorf("on the terminal: %q; want %q", o, want)
		}
	}
	if strings.Contains(o, "tty=0\n") || !strings.Contains(o, "tty=") {
		t.Errorf("on the terminal: %q; want a controlling terminal (tty_nr != 0)", o)
	}
	if string(stderr) != "stderr-not-tty\n" {
		t.Errorf("stderr (the caller's pipe) = %q", stderr)
	}

	// Control: the same terminal without TerminalAtStart comes with Exec.
	sb2 := startStandalone(t, p, sandbox.Spec{Argv: []string{"/bin/true"}, Terminal: term}, true)
	if m2 := sb2.Master(); m2 != nil {
		m2.Close()
		t.Error("a master after Start without TerminalAtStart")
	}
	if err := sb2.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	m2 := sb2.Master()
	if m2 == nil {
		t.Fatal("no master after Exec without TerminalAtStart")
	}
	m2.Close()
}

// The console at start with Execs (an OCI container with a terminal): the
// main program is on the console, an exec runs beside it, and the
// program's end ends the sandbox.
func TestTerminalAtStartWithExecs(t *testing.T) {
	requireSandboxes(t)
	dir, st := newStateDir(t)
	p := newStandaloneProvider(t, dir, st)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb := startStandalone(t, p, sandbox.Spec{Argv: []string{"/bin/sh", "-c", "read x; echo bye $x; exit 2"},
		Terminal: &sandbox.Terminal{Stdin: true, Stdout: true, Stderr: true}, Execs: true,
		Rootfs: ttyImageRoot(t), Image: &sandbox.Image{TerminalAtStart: true, Dir: "/"}}, true)
	m := sb.Master()
	if m == nil {
		t.Fatal("no master after Start")
	}
	defer m.Close()
	if err := sb.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if r := run(t, sb, "", "/bin/sh", "-c", "test -t 0 || echo exec-not-tty"); r.out != "exec-not-tty\n" {
		t.Errorf("exec beside the console = %+v", r)
	}
	if _, err := io.WriteString(m, "now\n"); err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(m)
	if ex, err := sb.Wait(ctx); err != nil || ex.Code != 2 {
		t.Errorf("Wait = %+v, %v; want exit 2", ex, err)
	}
	if !strings.Contains(string(out), "bye now") {
		t.Errorf("on the terminal: %q", out)
	}
}

// ttyImageRoot is an image root (the console at start is image mode's)
// with the busybox applets these tests run.
func ttyImageRoot(t *testing.T) string {
	root := imageRoot(t, "")
	for _, a := range []string{"sh", "stty", "cat", "echo", "test"} {
		if err := os.Symlink("busybox", root+"/bin/"+a); err != nil {
			t.Fatal(err)
		}
	}
	return root
}
