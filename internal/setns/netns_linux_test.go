package setns

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
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
