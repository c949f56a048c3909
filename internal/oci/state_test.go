package oci

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cordon-project/cordon/internal/testkit"
)

// TestOpenRootRefusesUnsafeAncestors: the engine's --root holds every
// container's state and keeper socket, written as root. Found in review:
// only the root directory itself was checked, so a root under a
// directory another local user owns (which that user can rename away and
// replace with one of their own) was accepted. Every directory on the
// way must be root's and writable by no one else (a sticky /tmp is fine),
// also through a symlink. The control: the same layout with root's
// parents opens.
func TestOpenRootRefusesUnsafeAncestors(t *testing.T) {
	testkit.RequireRoot(t)
	base := t.TempDir()
	ok := filepath.Join(base, "ok", "parent", "root")
	if _, err := Open(ok); err != nil {
		t.Fatalf("control: a root under root's own directories: %v", err)
	}
	user := filepath.Join(base, "user")
	if err := os.Mkdir(user, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(user, 54321, 54321); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(filepath.Join(user, "parent", "root")); err == nil {
		t.Errorf("a root under a directory another user owns was accepted")
	}
	ww := filepath.Join(base, "ww")
	if err := os.Mkdir(ww, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(ww, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(filepath.Join(ww, "root")); err == nil {
		t.Errorf("a root under a world-writable, non-sticky directory was accepted")
	}
	if err := os.Chmod(ww, os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(filepath.Join(ww, "sticky-root")); err != nil {
		t.Errorf("control: a root under a sticky directory (as /tmp): %v", err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(user, link); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(filepath.Join(link, "root2")); err == nil {
		t.Errorf("a root reached through a symlink into another user's directory was accepted")
	}
}
