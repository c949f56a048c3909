package linux

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/testkit"
	"github.com/cordon-project/cordon/internal/textsafe"
)

// suggested returns the remove command at the end of a socket refusal as a
// person sees it: the error printed through textsafe.Line, as the CLI
// prints every error.
func suggested(t *testing.T, shown string) string {
	t.Helper()
	if i := strings.LastIndex(shown, "and run again: "); i >= 0 {
		return shown[i+len("and run again: "):]
	}
	// The form before the fix: "… remove it (rm -- X) and run again".
	i, j := strings.Index(shown, "(rm -- "), strings.LastIndex(shown, ") and run again")
	if i < 0 || j < i {
		t.Fatalf("no remove command in %q", shown)
	}
	return shown[i+1 : j]
}

// Issue 9 item 8 (attack review): the socket refusal ends with a command
// to remove the socket, which a person copies into a root shell. The
// socket's name is the program's. For each hostile name: a socket with
// that name is created, the command is taken from the refusal as printed,
// run by /bin/sh, and afterwards (observed on the host) the socket is gone
// and the payload in the name did not run. Control: the quoting this
// replaced, printed the same way, does run the payload (the name is live).
func TestSocketRefusalCommandIsSafeToRun(t *testing.T) {
	testkit.RequireCommand(t, "the refusal's command is run by a shell", "sh")
	base := t.TempDir()
	marker := filepath.Join(base, "pwned")
	payload := "touch pwned" // run in base: a name holds no slash
	names := []string{
		"plain.sock",
		"-rf",
		"a b",
		"x'; " + payload + "; '",
		"x'\"; " + payload + "; \"'",
		"$(" + payload + ")",
		"`" + payload + "`",
		"x\\'; " + payload + "; '",
		"esc\x1b]0;t\x07'; " + payload + "; '",
		"nl\n" + payload + "\n",
		"bad\xff'; " + payload + "; '",
	}
	for i, name := range names {
		dir := filepath.Join(base, "w's "+string(rune('a'+i))) // the caller's path, quoted too
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		sock := filepath.Join(dir, name)
		if err := unix.Mknod(sock, unix.S_IFSOCK|0o600, 0); err != nil {
			t.Fatalf("mknod %q: %v", name, err)
		}
		got, err := findSocketFD(openDirFD(t, dir), 1000)
		if err != nil || got == "" {
			t.Fatalf("findSocketFD(%q) = %q, %v", name, got, err)
		}
		shown := textsafe.Line(socketRefusal("workspace", dir, got).Error())
		cmd := suggested(t, shown)
		c := exec.Command("sh", "-c", cmd)
		c.Dir = base
		out, err := c.CombinedOutput()
		if _, serr := os.Stat(marker); serr == nil {
			t.Fatalf("name %q: running the suggested command %q ran the payload (output %q)", name, cmd, out)
		}
		if err != nil {
			t.Errorf("name %q: suggested command %q failed: %v: %s", name, cmd, err, out)
		}
		if _, serr := os.Lstat(sock); serr == nil {
			t.Errorf("name %q: the socket is still there after the suggested command %q", name, cmd)
		}
	}

	// A sandbox still running on the directory swaps the socket's parent
	// for a symlink to a host directory between the refusal and the
	// command: the command removes nothing there. Control: a command
	// naming the socket's path would have removed the host's socket.
	t.Run("parent swapped for a symlink", func(t *testing.T) {
		dir, host := filepath.Join(base, "swap"), filepath.Join(base, "host")
		for _, d := range []string{filepath.Join(dir, "sub"), host} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for _, p := range []string{filepath.Join(dir, "sub", "victim"), filepath.Join(host, "victim")} {
			if err := unix.Mknod(p, unix.S_IFSOCK|0o600, 0); err != nil {
				t.Fatal(err)
			}
		}
		got, err := findSocketFD(openDirFD(t, dir), 1000)
		if err != nil || got == "" {
			t.Fatalf("findSocketFD = %q, %v", got, err)
		}
		cmd := suggested(t, textsafe.Line(socketRefusal("workspace", dir, got).Error()))
		if err := os.Rename(filepath.Join(dir, "sub"), filepath.Join(dir, "sub2")); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(host, filepath.Join(dir, "sub")); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("sh", "-c", cmd).CombinedOutput(); err != nil {
			t.Fatalf("%q: %v %s", cmd, err, out)
		}
		if _, err := os.Lstat(filepath.Join(host, "victim")); err != nil {
			t.Errorf("the suggested command %q removed the host's %s/victim through the swapped symlink", cmd, host)
		}
		if _, err := os.Lstat(filepath.Join(dir, "sub2", "victim")); err == nil {
			t.Errorf("the suggested command %q left the socket (now sub2/victim)", cmd)
		}
		if err := exec.Command("rm", "--", filepath.Join(dir, got)).Run(); err != nil {
			t.Fatalf("control: rm of the named path: %v", err)
		}
		if _, err := os.Lstat(filepath.Join(host, "victim")); err == nil {
			t.Errorf("control: rm of the named path did not reach the host's socket")
		}
	})

	t.Run("control: backslash quoting, printed escaped, runs the payload", func(t *testing.T) {
		name := "x'; " + payload + "; '"
		old := "'" + strings.ReplaceAll(filepath.Join(base, name), "'", `'\''`) + "'"
		cmd := "rm -f -- " + textsafe.Line(textsafe.Line(old))
		c := exec.Command("sh", "-c", cmd)
		c.Dir = base
		_ = c.Run()
		if _, err := os.Stat(marker); err != nil {
			t.Fatalf("control: %q did not run the payload; the test's names are not live", cmd)
		}
		os.Remove(marker)
	})
}

func openDirFD(t *testing.T, dir string) int {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}
