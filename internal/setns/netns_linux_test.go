package setns

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/testkit"
)

// TestOpenEngineNet: the descriptor-level check the provider repeats
// before it joins. A network namespace the host's user namespace owns
// passes (the control); the host's own, one owned by another user
// namespace, a namespace of another type and a file that is no
// namespace are refused with their sentinel.
func TestOpenEngineNet(t *testing.T) {
	testkit.RequireRoot(t)
	child := func(flags uintptr, name string) string {
		c := exec.Command("sleep", "60")
		c.SysProcAttr = &syscall.SysProcAttr{Cloneflags: flags}
		if err := c.Start(); err != nil {
			t.Fatalf("start a child in new namespaces %#x: %v", flags, err)
		}
		t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
		return "/proc/" + strconv.Itoa(c.Process.Pid) + "/ns/" + name
	}
	for _, c := range []struct {
		path string
		want error
	}{
		{child(unix.CLONE_NEWNET, "net"), nil},
		{"/proc/self/ns/net", ErrHostNetNS},
		{"/proc/thread-self/ns/net", ErrHostNetNS},
		{child(unix.CLONE_NEWUSER|unix.CLONE_NEWNET, "net"), ErrForeignOwner},
		{child(unix.CLONE_NEWIPC, "ipc"), ErrNotNetNS},
		{"/dev/null", ErrNotNetNS},
	} {
		f, err := OpenEngineNet(c.path)
		if f != nil {
			f.Close()
		}
		if !errors.Is(err, c.want) && (c.want != nil || err != nil) {
			t.Errorf("OpenEngineNet(%s) = %v, want %v", c.path, err, c.want)
		}
	}
}

// TestOpenEngineNetIndirections: the host's network namespace (here the
// test's own, which is the runtime's: on this machine PID 1's is not
// readable) reached by an indirection — a bind-mounted nsfs file (as `ip
// netns` pins one), a symlink, a thread's task path, a path with ".." —
// is still the host's: the check is on the descriptor's inode, not on the
// path. The control: the
// same bind-mounted file and symlink, pinning a fresh namespace the
// host's user namespace owns, are accepted.
func TestOpenEngineNetIndirections(t *testing.T) {
	testkit.RequireRoot(t)
	dir := t.TempDir()
	pin := func(name, ns string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount(ns, p, "", unix.MS_BIND, ""); err != nil {
			t.Fatalf("bind %s at %s: %v", ns, p, err)
		}
		t.Cleanup(func() { _ = unix.Unmount(p, unix.MNT_DETACH) })
		return p
	}
	link := func(name, to string) string {
		p := filepath.Join(dir, name)
		if err := os.Symlink(to, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	c := exec.Command("sleep", "60")
	c.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWNET}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	fresh := "/proc/" + strconv.Itoa(c.Process.Pid) + "/ns/net"
	for _, tc := range []struct {
		path string
		want error
	}{
		{pin("host-pinned", "/proc/self/ns/net"), ErrHostNetNS},
		{link("host-link", "/proc/self/ns/net"), ErrHostNetNS},
		{link("host-link-via-pid", "/proc/"+strconv.Itoa(os.Getpid())+"/ns/net"), ErrHostNetNS},
		{"/proc/self/task/" + strconv.Itoa(os.Getpid()) + "/ns/net", ErrHostNetNS},
		{"/proc/" + strconv.Itoa(os.Getpid()) + "/task/" + strconv.Itoa(os.Getpid()) + "/../" + strconv.Itoa(os.Getpid()) + "/ns/net", ErrHostNetNS},
		{pin("fresh-pinned", fresh), nil},
		{link("fresh-link", fresh), nil},
	} {
		f, err := OpenEngineNet(tc.path)
		if f != nil {
			f.Close()
		}
		if !errors.Is(err, tc.want) && (tc.want != nil || err != nil) {
			t.Errorf("OpenEngineNet(%s) = %v, want %v", tc.path, err, tc.want)
		}
	}
}

// TestOpenEngineNetFromOtherNetns: the runtime itself may run in a
// network namespace that is not the host's (an engine started in one,
// as the e2e harness's containerd is), and PID 1's namespace may be out
// of reach (on this machine /proc/1/ns/net cannot be read). The host's
// namespace is still refused: the attack names it (through kthreadd's
// /proc/2/ns/net and a process of the host's) from a thread in a fresh
// namespace. The control: another fresh namespace is accepted from the
// same thread.
func TestOpenEngineNetFromOtherNetns(t *testing.T) {
	testkit.RequireRoot(t)
	c := exec.Command("sleep", "60")
	c.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWNET}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	other := "/proc/" + strconv.Itoa(c.Process.Pid) + "/ns/net"
	// A process of the host's, started before any thread of this one
	// moves (this process's own /proc/PID names its main thread, which
	// the goroutine below may be running on).
	h := exec.Command("sleep", "60")
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Process.Kill(); _ = h.Wait() })
	hostProc := "/proc/" + strconv.Itoa(h.Process.Pid) + "/ns/net"
	type result struct {
		path string
		err  error
	}
	done := make(chan []result)
	go func() {
		// This thread moves to a fresh namespace and is never unlocked:
		// it ends with the goroutine (the main thread, if it is the one,
		// stays parked).
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			done <- []result{{"unshare", err}}
			return
		}
		var out []result
		for _, p := range []string{"/proc/2/ns/net", hostProc, other} {
			f, err := OpenEngineNet(p)
			if f != nil {
				f.Close()
			}
			out = append(out, result{p, err})
		}
		done <- out
	}()
	for _, r := range <-done {
		want := ErrHostNetNS
		if r.path == other {
			want = nil
		}
		if r.path == "unshare" || (!errors.Is(r.err, want) && (want != nil || r.err != nil)) {
			t.Errorf("from a thread in a fresh network namespace, OpenEngineNet(%s) = %v, want %v", r.path, r.err, want)
		}
	}
}
