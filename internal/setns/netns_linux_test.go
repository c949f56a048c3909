package setns

import (
	"errors"
	"os/exec"
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
