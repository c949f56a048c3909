package probes

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// The residue reading sees a mount left under a directory whose path
// mountinfo escapes (a TMPDIR with a space): a missed residue would pass.
func TestMountsUnderEscapedPath(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("needs root (bind mounts) and CI is set")
		}
		t.Skip("needs root (bind mounts)")
	}
	for _, name := range []string{"plain", "with space"} {
		dir := filepath.Join(t.TempDir(), name)
		mnt := filepath.Join(dir, "m")
		if err := os.MkdirAll(mnt, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount(t.TempDir(), mnt, "", unix.MS_BIND, ""); err != nil {
			t.Fatal(err)
		}
		got := mountsUnder(dir)
		_ = unix.Unmount(mnt, unix.MNT_DETACH)
		if !slices.Equal(got, []string{mnt}) {
			t.Errorf("mountsUnder(%q) = %q, want [%q]", dir, got, mnt)
		}
	}
}

// The same through a symlinked path (a TMPDIR that is one): mountinfo
// names the real path.
func TestMountsUnderSymlinkedPath(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("needs root (bind mounts) and CI is set")
		}
		t.Skip("needs root (bind mounts)")
	}
	real := t.TempDir()
	link := filepath.Join(t.TempDir(), "tmpdir")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	mnt := filepath.Join(real, "m")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(t.TempDir(), mnt, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(mnt, unix.MNT_DETACH)
	if got := mountsUnder(link); len(got) != 1 {
		t.Errorf("mountsUnder(%q) = %q, want the mount at %s", link, got, mnt)
	}
}
