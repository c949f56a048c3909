package conformance

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// removeTree detaches what is mounted under the suite's directory before
// removing it (a provider that isolates nothing lets a program mount on
// the host there), also at a path mountinfo escapes (a space is "\040"):
// otherwise RemoveAll descends into the mount and deletes the host files
// it shows.
func TestRemoveTreeDetachesEscapedMounts(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("needs root (bind mounts) and CI is set")
		}
		t.Skip("needs root (bind mounts)")
	}
	for _, name := range []string{"plain", "a b", "tab\there", `back\slash`} {
		victim := t.TempDir()
		keep := filepath.Join(victim, "keep")
		if err := os.WriteFile(keep, []byte("host file"), 0o600); err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		mnt := filepath.Join(dir, "sub", name)
		if err := os.MkdirAll(mnt, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount(victim, mnt, "", unix.MS_BIND, ""); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
		removeTree(dir)
		if _, err := os.Stat(keep); err != nil {
			t.Errorf("mount at %q: the host file behind it: %v", name, err)
		}
		if _, err := os.Lstat(dir); err == nil {
			t.Errorf("mount at %q: %s is still there", name, dir)
		}
	}
}

// The same when the directory is named through a symlink (a TMPDIR that
// is one): mountinfo names the real path.
func TestRemoveTreeDetachesMountsThroughASymlinkedDir(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("needs root (bind mounts) and CI is set")
		}
		t.Skip("needs root (bind mounts)")
	}
	victim := t.TempDir()
	keep := filepath.Join(victim, "keep")
	if err := os.WriteFile(keep, []byte("host file"), 0o600); err != nil {
		t.Fatal(err)
	}
	real := t.TempDir()
	link := filepath.Join(t.TempDir(), "tmpdir")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(link, "cc")
	mnt := filepath.Join(dir, "m")
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(victim, mnt, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(filepath.Join(real, "cc", "m"), unix.MNT_DETACH) })
	removeTree(dir)
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("the host file behind a mount under %s (a symlinked path): %v", dir, err)
	}
	if _, err := os.Lstat(filepath.Join(real, "cc")); err == nil {
		t.Errorf("%s is still there", dir)
	}
}
