package linux

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/sandbox/linux/sbinit"
	"github.com/cordon-project/cordon/internal/testkit"
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

// FuzzExecReply: whatever the init's first answer on an exec connection
// is (any bytes, with no descriptor, a pty master, a pty slave or
// /dev/null beside it), readExecReply and startedMaster never panic,
// never keep a descriptor they refuse, and hand back a master only when
// one was asked for and it is a pty master.
func FuzzExecReply(f *testing.F) {
	for _, s := range []struct {
		b      string
		attach byte
		tty    bool
	}{
		{`{"type":"started","pid":7,"tty":true}`, 1, true},
		{`{"type":"started","pid":7}`, 0, false},
		{`{"type":"started","pid":7,"tty":true}`, 2, true},
		{`{"type":"started","pid":7,"tty":true}`, 3, true},
		{`{"type":"started","pid":7}`, 1, false},
		{`{"type":"error","step":"pty","error":"x"}`, 1, true},
		{`{"type":"started"`, 1, true},
	} {
		f.Add([]byte(s.b), s.attach, s.tty)
	}
	f.Fuzz(func(t *testing.T, b []byte, attach byte, tty bool) {
		if len(b) == 0 || len(b) > 4096 {
			return // an empty datagram is the end of the connection
		}
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		peer := os.NewFile(uintptr(fds[0]), "init")
		defer peer.Close()
		cf := os.NewFile(uintptr(fds[1]), "client")
		c, err := net.FileConn(cf)
		cf.Close()
		if err != nil {
			t.Fatal(err)
		}
		conn := c.(*net.UnixConn)
		defer conn.Close()
		var extra *os.File
		switch attach % 4 {
		case 1, 2:
			m, s := testkit.PtyPair(t)
			if attach%4 == 1 {
				extra = m
				defer s.Close()
			} else {
				extra = s
				defer m.Close()
			}
		case 3:
			if extra, err = os.Open(os.DevNull); err != nil {
				t.Fatal(err)
			}
		}
		var oob []byte
		if extra != nil {
			oob = unix.UnixRights(int(extra.Fd()))
		}
		if err := unix.Sendmsg(fds[0], b, oob, nil, 0); err != nil {
			t.Fatal(err)
		}
		if extra != nil {
			extra.Close()
		}
		before := openFDCount(t)
		var req *sbinit.Tty
		if tty {
			req = &sbinit.Tty{Stdin: true}
		}
		m, got, err := readExecReply(conn)
		if err != nil {
			if n := openFDCount(t); n != before {
				t.Fatalf("refused answer: %d descriptors open, %d before", n, before)
			}
			return
		}
		master, err := startedMaster(req, m, got)
		if err != nil || master == nil {
			if n := openFDCount(t); n != before {
				t.Fatalf("no master kept, yet %d descriptors open, %d before", n, before)
			}
			if master != nil {
				t.Fatal("a master with an error")
			}
			return
		}
		defer master.Close()
		if !tty {
			t.Fatal("a master without a terminal request")
		}
		if err := CheckPtyMaster(master); err != nil {
			t.Fatalf("kept a descriptor that is not a pty master: %v", err)
		}
	})
}

// startedMaster keeps a pty master only when one was asked for and
// reported; everything else is refused or ignored and closed. The master
// asked for is the positive control.
func TestStartedMaster(t *testing.T) {
	req := &sbinit.Tty{Stdin: true}
	started := sbinit.Message{Type: "started", Pid: 7, Tty: true}
	m, s := testkit.PtyPair(t)
	defer s.Close()
	got, err := startedMaster(req, started, []*os.File{m})
	if err != nil || got != m {
		t.Fatalf("asked and given a master: %v, %v; want it kept", got, err)
	}
	m.Close()
	for _, tc := range []struct {
		name string
		req  *sbinit.Tty
		msg  sbinit.Message
		fd   string // "master", "slave", ""
	}{
		{"asked, none sent", req, started, ""},
		{"asked, not reported", req, sbinit.Message{Type: "started", Pid: 7}, "master"},
		{"asked, a slave sent", req, started, "slave"},
		{"not asked, a master sent", nil, started, "master"},
		{"not asked, reported without one", nil, started, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fds []*os.File
			if tc.fd != "" {
				m, s := testkit.PtyPair(t)
				if tc.fd == "master" {
					defer s.Close()
					fds = append(fds, m)
				} else {
					defer m.Close()
					fds = append(fds, s)
				}
			}
			var nums []uintptr
			for _, f := range fds {
				nums = append(nums, f.Fd())
			}
			got, err := startedMaster(tc.req, tc.msg, fds)
			if err == nil || got != nil {
				t.Fatalf("= %v, %v; want refused", got, err)
			}
			for _, n := range nums {
				if _, err := unix.FcntlInt(n, unix.F_GETFD, 0); err != unix.EBADF {
					t.Errorf("the refused descriptor %d is still open (%v)", n, err)
				}
			}
		})
	}
	if got, err := startedMaster(nil, sbinit.Message{Type: "started", Pid: 7}, nil); err != nil || got != nil {
		t.Errorf("no terminal, none asked: %v, %v", got, err)
	}
}
