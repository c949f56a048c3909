package linux

import (
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/sandbox"
)

// An exec with a terminal runs on a pty of the sandbox's own, as its
// controlling terminal, with the window size asked for; the master comes
// back and is a pty master; the descriptor not on the terminal (stdout, a
// pipe here) stays the caller's. The control: the same program without a
// terminal has no controlling terminal (tty_nr 0) and no master comes.
func TestDaemonExecTerminal(t *testing.T) {
	requireSandboxes(t)
	dir, st := newStateDir(t)
	p := newDaemonProvider(t, dir, st)
	sb := startDaemonSandbox(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	const script = `echo out; stty size; read pid comm state ppid pgrp sid ttynr tpgid rest < /proc/self/stat; echo "tty=$ttynr fg=$tpgid pgrp=$pgrp" >&2; exit 4`
	before := openFDCount(t)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	proc, m, err := sb.ExecProcessTerminal(ctx, []string{"/bin/sh", "-c", script}, nil, "", [3]*os.File{nil, pw, nil},
		sandbox.Terminal{Stdin: true, Stderr: true, Rows: 30, Cols: 100})
	pw.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := CheckPtyMaster(m); err != nil {
		t.Fatalf("the master that came back: %v", err)
	}
	term, _ := io.ReadAll(m) // until EIO: every process inside closed it
	piped, _ := io.ReadAll(pr)
	exit, err := proc.Wait(ctx)
	if err != nil || exit.Code != 4 {
		t.Fatalf("exit %+v, %v; want code 4", exit, err)
	}
	if string(piped) != "out\n30 100\n" {
		t.Errorf("stdout (the caller's pipe) = %q, want out and the window size 30 100", piped)
	}
	f := strings.Fields(strings.NewReplacer("tty=", "", "fg=", "", "pgrp=", "").Replace(string(term)))
	if len(f) != 3 || f[0] == "0" || f[1] != f[2] {
		t.Errorf("on the terminal: %q; want a controlling terminal (tty_nr != 0) with the shell's group in the foreground", term)
	}

	// Control: no terminal asked for, none given.
	r := run(t, sb, "", "/bin/sh", "-c", `read pid comm state ppid pgrp sid ttynr rest < /proc/self/stat; echo "$ttynr"`)
	if r.out != "0\n" {
		t.Errorf("without a terminal tty_nr = %q, want 0", r.out)
	}

	// A program that cannot be executed: an ExecError, and no master left
	// open anywhere in this process.
	_, m2, err := sb.ExecProcessTerminal(ctx, []string{"/nonexistent/prog"}, nil, "", [3]*os.File{}, sandbox.Terminal{Stdin: true, Stdout: true, Stderr: true})
	var xe *ExecError
	if !errors.As(err, &xe) || !xe.NotFound() || m2 != nil {
		t.Errorf("exec of a missing program with a terminal = %v, %v; want an ExecError NotFound and no master", m2, err)
	}
	m.Close()
	pr.Close()
	if after := openFDCount(t); after != before {
		t.Errorf("%d descriptors open before, %d after: a master leaked", before, after)
	}
}

func openFDCount(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}
