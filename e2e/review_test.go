package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/testkit"
)

// A descriptor cordon inherits (a shell's "exec 7<>file") must never reach
// the program: it would carry a root-only host file past every namespace.
func TestEscapeInheritedFD(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	secret := filepath.Join(t.TempDir(), "secret")
	const content = "inherited-secret-4711"
	if err := os.WriteFile(secret, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(secret)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	run := func(argv ...string) (string, int) {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.ExtraFiles = []*os.File{f} // fd 3 in the child, not close-on-exec
		out, _ := cmd.CombinedOutput()
		return string(out), cmd.ProcessState.ExitCode()
	}
	// Positive control: the probe on the host, given the same fd, reads it.
	if out, _ := run(filepath.Join(probeDir, "probe"), "readfd", "3"); !strings.Contains(out, content) {
		t.Fatalf("host probe readfd 3 = %q, want the secret (the control must see the leak)", out)
	}
	args := append([]string{cordonBin, "--state-dir", st}, probeArgs(nil, "readfd", "3")...)
	out, code := run(args...)
	if strings.Contains(out, content) {
		t.Fatalf("sandboxed probe read the inherited fd: %q", out)
	}
	if code != 0 || !strings.Contains(out, `"ok":false`) {
		t.Fatalf("cordon run readfd 3 = %d %q, want the probe to run and fail", code, out)
	}
}

// A socket too deep for a path walk (beyond PATH_MAX) is still found.
func TestEscapeDeepSocketRefused(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	ws := t.TempDir()
	if err := os.Chown(ws, 2345, 2345); err != nil {
		t.Fatal(err)
	}
	// 20 levels of 250 characters: 5000+ bytes of path.
	dfd, err := syscall.Open(ws, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		name := strings.Repeat(string(rune('a'+i)), 250)
		if err := syscall.Mkdirat(dfd, name, 0o755); err != nil {
			t.Fatal(err)
		}
		nfd, err := syscall.Openat(dfd, name, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
		syscall.Close(dfd)
		if err != nil {
			t.Fatal(err)
		}
		dfd = nfd
	}
	// Bind a socket there through /proc/self/fd (the path is too long).
	sock, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(sock)
	oldwd, _ := os.Getwd()
	if err := syscall.Fchdir(dfd); err != nil {
		t.Fatal(err)
	}
	err = syscall.Bind(sock, &syscall.SockaddrUnix{Name: "deep.sock"})
	os.Chdir(oldwd)
	syscall.Close(dfd)
	if err != nil {
		t.Fatal(err)
	}
	r := cordon(t, cordonBin, st, "run", "--workspace", ws, "--", "/bin/true")
	if r.Code != 125 || !strings.Contains(r.Stderr, "Unix socket") {
		t.Fatalf("run with a deep socket in the workspace = %d %q, want 125 naming the socket", r.Code, r.Stderr)
	}
}

// A writable bind whose group is a system group is refused: the program
// would act as that group on the host.
func TestEscapeSystemGroupWorkspaceRefused(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	ws := t.TempDir()
	if err := os.Chown(ws, 2345, 0); err != nil {
		t.Fatal(err)
	}
	r := cordon(t, cordonBin, st, "run", "--workspace", ws, "--", "/bin/true")
	if r.Code != 125 || !strings.Contains(r.Stderr, "2345:0") {
		t.Fatalf("run with a 2345:0 workspace = %d %q, want 125", r.Code, r.Stderr)
	}
	// Positive control: the same directory with a user group is accepted.
	if err := os.Chown(ws, 2345, 2345); err != nil {
		t.Fatal(err)
	}
	if r := cordon(t, cordonBin, st, "run", "--workspace", ws, "--", "/bin/true"); r.Code != 0 {
		t.Fatalf("run with a 2345:2345 workspace = %d %q, want 0", r.Code, r.Stderr)
	}
}

// Crash signals sent to the init from inside do not take it down: the
// program keeps running and the run ends with the program's own status.
func TestEscapeCrashInit(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	for _, sig := range []syscall.Signal{syscall.SIGSEGV, syscall.SIGABRT, syscall.SIGTRAP, syscall.SIGSYS, syscall.SIGBUS} {
		start := time.Now()
		r := cordon(t, cordonBin, st, "run", "--ro", probeDir+":/probe", "--", "/bin/sh", "-c",
			"/probe/probe signal1 "+strconv.Itoa(int(sig))+"; sleep 0.3; echo alive")
		if r.Code != 0 || !strings.Contains(r.Stdout, "alive") || strings.Contains(r.Stderr, "goroutine") {
			t.Fatalf("kill(1, %v) from inside: run = %d, stdout %q, stderr %q (after %s); want the init to survive", sig, r.Code, r.Stdout, r.Stderr, time.Since(start))
		}
		if !strings.Contains(r.Stdout, `"ok":true`) {
			t.Fatalf("kill(1, %v) was not delivered (%q): the test would prove nothing", sig, r.Stdout)
		}
	}
}
