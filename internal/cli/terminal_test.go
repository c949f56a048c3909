package cli

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/testkit"
	"golang.org/x/sys/unix"
)

func lflag(t *testing.T, fd int) uint32 {
	t.Helper()
	tio, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	return tio.Lflag
}

// The terminal is restored on a normal stop, on a second stop, and when
// the code holding it panics. Positive control: makeRaw did clear
// ICANON, ECHO and ISIG (so restoring is what sets them again).
func TestTerminalRestored(t *testing.T) {
	for _, how := range []string{"return", "panic"} {
		t.Run(how, func(t *testing.T) {
			_, host := testkit.PtyPair(t)
			defer host.Close()
			const cooked = unix.ICANON | unix.ECHO | unix.ISIG
			if lflag(t, int(host.Fd()))&cooked != cooked {
				t.Fatalf("a fresh pty is not in cooked mode")
			}
			inner, innerSlave := testkit.PtyPair(t)
			defer innerSlave.Close()
			func() {
				defer func() { _ = recover() }()
				saved, err := makeRaw(int(host.Fd()))
				if err != nil {
					t.Fatal(err)
				}
				term := &terminal{master: inner, in: int(host.Fd()), saved: saved, winch: make(chan os.Signal, 1), copied: make(chan struct{})}
				close(term.copied)
				defer term.stop()
				if lflag(t, int(host.Fd()))&cooked != 0 {
					t.Fatalf("makeRaw left %#x of ICANON|ECHO|ISIG set", lflag(t, int(host.Fd()))&cooked)
				}
				if how == "panic" {
					panic("boom")
				}
				term.stop()
			}()
			if got := lflag(t, int(host.Fd())); got&cooked != cooked {
				t.Errorf("after %s the terminal's lflag = %#x, want ICANON|ECHO|ISIG restored", how, got)
			}
		})
	}
}

func TestTerminalRequestFlag(t *testing.T) {
	if _, err := terminalRequest("sometimes"); err == nil {
		t.Errorf("--tty sometimes accepted")
	}
	if r, err := terminalRequest(ttyNever); r != nil || err != nil {
		t.Errorf("--tty never = %+v, %v; want no terminal", r, err)
	}
	if r, err := terminalRequest(ttyAlways); r == nil || !r.Stdin || err != nil {
		t.Errorf("--tty always = %+v, %v; want a terminal on stdin", r, err)
	}
}

// relayChild is the environment variable that makes the test binary a
// child of TestRelayOutBrokenPipe, whose descriptor 1 is a pipe without a
// reader: "relay" copies through relayOut, "direct" (the control) copies
// to os.Stdout as it is.
const relayChild = "CORDON_TEST_RELAY_CHILD"

// TestRelayOutBrokenPipe: the program's terminal output relayed to
// cordon's stdout, a pipe whose reader is gone, neither kills cordon
// (SIGPIPE, which skips restoring the terminal and deprovisioning) nor
// stops reading the master (the program would block). Positive control:
// the same copy straight to os.Stdout is killed by SIGPIPE.
func TestRelayOutBrokenPipe(t *testing.T) {
	if mode := os.Getenv(relayChild); mode != "" {
		src := strings.NewReader(strings.Repeat("x", 1<<20))
		if mode == "direct" {
			_, _ = io.Copy(os.Stdout, src)
		} else {
			relayOut(os.Stdout, src)
		}
		fmt.Fprintf(os.Stderr, "survived, %d bytes unread\n", src.Len())
		os.Exit(0)
	}
	run := func(mode string) (*os.ProcessState, string) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		r.Close()
		defer w.Close()
		cmd := exec.Command(os.Args[0], "-test.run=^TestRelayOutBrokenPipe$")
		cmd.Env = append(os.Environ(), relayChild+"="+mode)
		var stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = w, &stderr
		_ = cmd.Run()
		return cmd.ProcessState, stderr.String()
	}
	st, out := run("relay")
	if !st.Success() || !strings.Contains(out, "survived, 0 bytes unread") {
		t.Errorf("relay to a broken pipe: %v, %q; want to survive and read everything", st, out)
	}
	st, out = run("direct")
	if ws, ok := st.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGPIPE {
		t.Errorf("control: a copy straight to os.Stdout ended %v (%q), want killed by SIGPIPE", st, out)
	}
}

// readable waits up to d for f to have input and reads it.
func readable(t *testing.T, f *os.File, d time.Duration) string {
	t.Helper()
	fds := []unix.PollFd{{Fd: int32(f.Fd()), Events: unix.POLLIN}}
	if n, err := unix.Poll(fds, int(d/time.Millisecond)); err != nil || n == 0 {
		return ""
	}
	buf := make([]byte, 256)
	n, _ := unix.Read(int(f.Fd()), buf)
	if n < 0 {
		n = 0
	}
	return string(buf[:n])
}

// TestTerminalInputStopsAtStop: while the program runs, what is typed on
// cordon's terminal reaches the program's (the positive control); once
// stop has run, nothing more is read from cordon's terminal: a command
// typed while cordon tears down stays queued for the user's shell.
func TestTerminalInputStopsAtStop(t *testing.T) {
	hostM, host := testkit.PtyPair(t)
	defer host.Close()
	saved, err := makeRaw(int(host.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	inner, innerSlave := testkit.PtyPair(t)
	defer innerSlave.Close()
	if _, err := makeRaw(int(innerSlave.Fd())); err != nil {
		t.Fatal(err)
	}
	qr, qw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	term := &terminal{master: inner, in: int(host.Fd()), saved: saved, winch: make(chan os.Signal, 1), copied: make(chan struct{}), quit: qw, inDone: make(chan struct{})}
	close(term.copied)
	go term.copyIn(qr)
	if _, err := hostM.Write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	if got := readable(t, innerSlave, 5*time.Second); got != "a" {
		t.Fatalf("control: a key typed while the program runs reached it as %q, want \"a\"", got)
	}
	term.stop()
	select {
	case <-term.inDone:
	default:
		t.Fatal("stop returned while the input relay still ran")
	}
	if _, err := hostM.Write([]byte("ls\n")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if n, err := unix.IoctlGetInt(int(host.Fd()), unix.TIOCINQ); err != nil || n != 3 {
		t.Errorf("after stop, %d bytes (%v) of a typed \"ls\\n\" wait on cordon's terminal, want all 3 (cordon took them)", n, err)
	}
}
