package evidence

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestInSituHostCountsAccepts: a connection that reached the host's
// listeners before the judge (as one from a sandbox without its network
// boundary would) fails the check; the control connection is counted.
func TestInSituHostCountsAccepts(t *testing.T) {
	for _, reach := range []bool{false, true} {
		h, err := OpenInSitu(false)
		if err != nil {
			t.Fatal(err)
		}
		if reach {
			for _, c := range []struct {
				family int
				sa     unix.Sockaddr
			}{{unix.AF_UNIX, &unix.SockaddrUnix{Name: "@" + h.Abstract}}, {unix.AF_INET, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}, Port: h.Port}}} {
				fd, err := unix.Socket(c.family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
				if err != nil {
					t.Fatal(err)
				}
				if err := unix.Connect(fd, c.sa); err != nil {
					t.Fatal(err)
				}
				defer unix.Close(fd)
			}
		}
		for _, c := range h.acceptChecks(fmt.Sprintf("/proc/%d", os.Getpid())) {
			want := c.Control || !reach
			if c.OK != want {
				t.Errorf("reached=%v: %s = %v (%s), want %v", reach, c.Name, c.OK, c.Got, want)
			}
			if !c.Control && reach && !strings.HasPrefix(c.Got, "1 ") {
				t.Errorf("reached=%v: %s got %q, want 1 connection counted", reach, c.Name, c.Got)
			}
		}
		h.Close()
	}
}

// TestInSituHostIgnoresForeignConnections: the listeners live in the
// host's network namespace, where any local user can find them
// (/proc/net/unix, /proc/net/tcp) and connect. Such a connection is not
// the sandbox's: it must not fail the sandbox's check (a hostile local
// user could otherwise refuse every session and blame its boundary). The
// "init" here is a process in a new pid and network namespace, the
// connections come from this test process (outside both).
func TestInSituHostIgnoresForeignConnections(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("needs root (new pid namespace)")
		}
		t.Skip("needs root")
	}
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNET}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	h, err := OpenInSitu(false)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for _, c := range []struct {
		family int
		sa     unix.Sockaddr
	}{{unix.AF_UNIX, &unix.SockaddrUnix{Name: "@" + h.Abstract}}, {unix.AF_INET, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}, Port: h.Port}}} {
		fd, err := unix.Socket(c.family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Connect(fd, c.sa); err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
	}
	for _, c := range h.acceptChecks(fmt.Sprintf("/proc/%d", cmd.Process.Pid)) {
		if !c.OK {
			t.Errorf("%s = false (%s): a connection from outside the sandbox failed its check", c.Name, c.Got)
		}
	}
}

// TestInSituChecksNameWhatJudgeReports: the list verify-receipt holds a
// set to is exactly what the judge reports for it.
func TestInSituChecksNameWhatJudgeReports(t *testing.T) {
	for _, full := range []bool{false, true} {
		h, err := OpenInSitu(full)
		if err != nil {
			t.Fatal(err)
		}
		s := h.Judge(InSituInputs{Pid: os.Getpid(), ProbeDir: "/nonexistent", Write: "w", Control: "/nonexistent/c", RoutePort: 9, Route: "192.0.2.1"})
		h.Close()
		var got []string
		for _, c := range s.Checks {
			got = append(got, c.Name)
		}
		want := InSituChecks(s.Set)
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("set %s: judge reports %v, InSituChecks %v", s.Set, got, want)
		}
		if m := MissingInSitu(s); len(m) != 0 {
			t.Errorf("set %s: MissingInSitu = %v", s.Set, m)
		}
	}
}
