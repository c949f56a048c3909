package testkit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Tmux is one tmux server of a test's own (its own socket, so it never
// touches a user's tmux or another test's) with one window running a
// command in a real terminal: the test types into it and reads its screen
// the way a person would.
type Tmux struct {
	t      testing.TB
	socket string
	conf   string
	status string
	target string
}

// NewTmux starts cmd (argv, run by tmux through the shell of the server's
// environment: each word is quoted) in a detached window of the given size,
// with env set in the window's environment. The server is killed when the
// test ends. A missing tmux is Unavailable (a failure under CI=true).
func NewTmux(t testing.TB, cols, rows int, env []string, argv ...string) *Tmux {
	t.Helper()
	RequireCommand(t, "interactive tests drive a terminal in tmux (scripts/test.sh installs it)", "tmux")
	dir := t.TempDir()
	// remain-on-exit keeps the pane (and what the command last printed)
	// readable after the command ends, and its exit status queryable; it
	// is in the server's config so that even a command that ends at once
	// is kept.
	conf := filepath.Join(dir, "tmux.conf")
	if err := os.WriteFile(conf, []byte("set -g remain-on-exit on\nset -g history-limit 5000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	x := &Tmux{t: t, socket: filepath.Join(dir, "tmux.sock"), conf: conf, status: filepath.Join(dir, "status"), target: "cordon-test:0"}
	quoted := make([]string, len(argv))
	for i, a := range argv {
		quoted[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	args := []string{"new-session", "-d", "-s", "cordon-test", "-x", fmt.Sprint(cols), "-y", fmt.Sprint(rows)}
	for _, e := range env {
		args = append(args, "-e", e)
	}
	args = append(args, strings.Join(quoted, " ")+"; echo $? >'"+x.status+"'")
	x.tmux(args...)
	t.Cleanup(func() { _ = exec.Command("tmux", "-S", x.socket, "kill-server").Run() })
	return x
}

func (x *Tmux) tmux(args ...string) string {
	x.t.Helper()
	cmd := exec.Command("tmux", append([]string{"-S", x.socket, "-f", x.conf}, args...)...)
	cmd.Env = append(os.Environ(), "TERM=xterm-256color")
	out, err := cmd.CombinedOutput()
	if err != nil {
		x.t.Fatalf("tmux %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Keys sends keys as tmux key names ("C-c", "Enter", "C-z") or, with
// literal, as text typed character by character.
func (x *Tmux) Keys(literal bool, keys ...string) {
	x.t.Helper()
	args := []string{"send-keys", "-t", x.target}
	if literal {
		args = append(args, "-l")
	}
	x.tmux(append(args, keys...)...)
}

// Type types text and presses Enter.
func (x *Tmux) Type(text string) {
	x.t.Helper()
	x.Keys(true, text)
	x.Keys(false, "Enter")
}

// Screen is what the window shows now, with the scrollback.
func (x *Tmux) Screen() string {
	x.t.Helper()
	return x.tmux("capture-pane", "-p", "-J", "-S", "-200", "-t", x.target)
}

// WaitFor waits until the screen matches re, and returns the screen. On
// timeout the test fails with the screen as it was.
func (x *Tmux) WaitFor(re string, timeout time.Duration) string {
	x.t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(timeout)
	for {
		s := x.Screen()
		if rx.MatchString(s) {
			return s
		}
		if time.Now().After(deadline) {
			x.t.Fatalf("the terminal did not show %q within %s; screen:\n%s", re, timeout, s)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Resize sets the window's size (the command sees SIGWINCH).
func (x *Tmux) Resize(cols, rows int) {
	x.t.Helper()
	x.tmux("resize-window", "-t", x.target, "-x", fmt.Sprint(cols), "-y", fmt.Sprint(rows))
}

// Exited reports whether the command has ended, and its exit status
// (128+n for a signal n, as a shell reports it). The shell tmux starts
// writes it to a file of the test's (tmux 3.3 marks a pane dead before it
// records how the command ended, and sometimes never does).
func (x *Tmux) Exited() (bool, int) {
	x.t.Helper()
	b, err := os.ReadFile(x.status)
	if err != nil || !strings.HasSuffix(string(b), "\n") {
		return false, 0
	}
	var code int
	if _, err := fmt.Sscan(string(b), &code); err != nil {
		x.t.Fatalf("exit status file %q: %v", b, err)
	}
	return true, code
}

// WaitExit waits for the command to end and returns its exit status.
func (x *Tmux) WaitExit(timeout time.Duration) int {
	x.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if dead, status := x.Exited(); dead {
			return status
		}
		if time.Now().After(deadline) {
			x.t.Fatalf("the command in tmux did not end within %s; screen:\n%s", timeout, x.Screen())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// PID is the PID of the command (cordon itself, when the test started
// cordon; the child of the pane's shell), for signalling it from outside
// the terminal.
func (x *Tmux) PID() int {
	x.t.Helper()
	var shell int
	out := strings.TrimSpace(x.tmux("display-message", "-p", "-t", x.target, "#{pane_pid}"))
	if _, err := fmt.Sscan(out, &shell); err != nil {
		x.t.Fatalf("tmux pane pid %q: %v", out, err)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", shell, shell))
	var pid int
	if err == nil {
		_, err = fmt.Sscan(string(b), &pid)
	}
	if err != nil {
		x.t.Fatalf("the command under the pane's shell %d: %v", shell, err)
	}
	return pid
}
