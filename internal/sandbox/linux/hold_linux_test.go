package linux

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestHoldUserns: both ways of holding an idmap namespace — the child
// stopped at its exec (the default) and the helper waiting on its stdin
// (the fallback where tracing is refused) — give a user namespace with
// the maps asked for: a file of uid 0 seen through a mount idmapped with
// it is the map's host id.
func TestHoldUserns(t *testing.T) {
	requireSandboxes(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	const host = 3_100_000
	maps := []syscall.SysProcIDMap{{ContainerID: 0, HostID: host, Size: 65536}}
	for name, hold := range map[string]func(u, g []syscall.SysProcIDMap) (int, error){"stopped": holdStopped, "running": holdRunning} {
		t.Run(name, func(t *testing.T) {
			ns, err := hold(maps, maps)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(ns)
			if typ, err := unix.IoctlRetInt(ns, unix.NS_GET_NSTYPE); err != nil || typ != unix.CLONE_NEWUSER {
				t.Fatalf("NS_GET_NSTYPE = %#x, %v; want a user namespace", typ, err)
			}
			tree, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(tree)
			attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(ns), Propagation: unix.MS_PRIVATE}
			if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &attr); err != nil {
				t.Fatal(err)
			}
			var st unix.Stat_t
			if err := unix.Fstatat(tree, "f", &st, 0); err != nil || st.Uid != host || st.Gid != host {
				t.Fatalf("through the idmapped mount: %d:%d %v; want %d:%d", st.Uid, st.Gid, err, host, host)
			}
		})
	}
}
