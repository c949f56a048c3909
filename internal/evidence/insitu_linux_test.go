package evidence

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

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

// foreignConnector starts a child process (this test binary, in
// TestHelperInSituConnect) that keeps n connections to the abstract
// socket and n to the loopback port open until the test ends: a local
// user outside the sandbox.
func foreignConnector(t *testing.T, h *InSituHost, n int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperInSituConnect$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("CORDON_INSITU_HELPER=%s,%d,%d", h.Abstract, h.Port, n))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	var b [1]byte
	if _, err := out.Read(b[:]); err != nil {
		t.Fatalf("helper: %v", err)
	}
}

// TestHelperInSituConnect is foreignConnector's child, not a test.
func TestHelperInSituConnect(t *testing.T) {
	spec := os.Getenv("CORDON_INSITU_HELPER")
	if spec == "" {
		t.Skip("a helper process, run by foreignConnector")
	}
	var name string
	var port, n int
	parts := strings.Split(spec, ",")
	name = parts[0]
	fmt.Sscan(parts[1], &port)
	fmt.Sscan(parts[2], &n)
	for i := 0; i < n; i++ {
		for _, c := range []struct {
			family int
			sa     unix.Sockaddr
		}{{unix.AF_UNIX, &unix.SockaddrUnix{Name: "@" + name}}, {unix.AF_INET, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}, Port: port}}} {
			fd, err := unix.Socket(c.family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK, 0)
			if err == nil {
				_ = unix.Connect(fd, c.sa) // kept open; a full backlog is the point
			}
		}
	}
	os.Stdout.Write([]byte("."))
	var b [1]byte
	os.Stdin.Read(b[:])
}

// TestInSituControlCountsOnlyTheHostsOwn: connections queued by someone
// else must neither make the control count more than the host's own
// connection, nor, with the listen backlog full, hang the judge (a
// blocking connect to a full abstract socket waits for ever). A local
// user could otherwise refuse or stall every session start.
func TestInSituControlCountsOnlyTheHostsOwn(t *testing.T) {
	for _, n := range []int{1, 64} {
		h, err := OpenInSitu(false)
		if err != nil {
			t.Fatal(err)
		}
		foreignConnector(t, h, n)
		type res struct {
			n   [2]int
			err [2]error
		}
		done := make(chan res, 1)
		go func() {
			var r res
			r.n[0], r.err[0] = hostConnect(h.unixFD, unix.AF_UNIX, &unix.SockaddrUnix{Name: "@" + h.Abstract})
			r.n[1], r.err[1] = hostConnect(h.tcpFD, unix.AF_INET, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}, Port: h.Port})
			done <- r
		}()
		select {
		case r := <-done:
			for i := range r.n {
				if n == 1 && (r.err[i] != nil || r.n[i] != 1) {
					t.Errorf("listener %d, %d foreign connections queued: the host's own counted as %d (%v), want 1", i, n, r.n[i], r.err[i])
				}
				if r.n[i] > 1 {
					t.Errorf("listener %d, %d foreign connections queued: counted %d", i, n, r.n[i])
				}
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%d foreign connections queued: the judge hangs on a full backlog", n)
		}
		h.Close()
	}
}
