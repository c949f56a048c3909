package linux

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/sandbox"
)

// TestRootUnderSharedMountStaysPrivate: a root (an engine's container
// directory) under a SHARED mount — a host's / under systemd, dockerd's
// data root — must not become a peer of the host's mount: the init's
// /proc, /dev and binds must not appear in the host's mount table, nor
// the host's later mounts in the sandbox. Found under Docker: the
// sandbox's /proc and /dev showed in the host's mountinfo under the
// container's root. The control: the same mounts are there in the
// sandbox's own mount namespace.
func TestRootUnderSharedMountStaysPrivate(t *testing.T) {
	p := newImageProvider(t)
	base := t.TempDir()
	if err := unix.Mount(base, base, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(base, unix.MNT_DETACH) })
	if err := unix.Mount("", base, "", unix.MS_SHARED, ""); err != nil {
		t.Fatal(err)
	}
	root := imageRoot(t, base)
	sb := startImage(t, p, imageSpec(root, sandbox.Image{Writable: true, Dir: "/"}, "sleep 30"))
	defer sb.Stop(t.Context())
	host, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(host), "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], root+"/") {
			t.Errorf("a sandbox mount propagated to the host: %s", l)
		}
	}
	inside, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(sb.InitPid()), "mountinfo"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(inside), " /proc ") || !strings.Contains(string(inside), " /dev ") {
		t.Fatalf("control: the sandbox's own /proc and /dev are not in its mount table:\n%s", inside)
	}
	// And the host's mounts do not reach the sandbox.
	probe := filepath.Join(root, "tmp-host-mount")
	if err := os.Mkdir(probe, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", probe, "tmpfs", 0, "size=4k"); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(probe, unix.MNT_DETACH)
	time.Sleep(50 * time.Millisecond)
	inside, _ = os.ReadFile(filepath.Join("/proc", strconv.Itoa(sb.InitPid()), "mountinfo"))
	if strings.Contains(string(inside), "tmp-host-mount") {
		t.Errorf("a host mount propagated into the sandbox")
	}
}
