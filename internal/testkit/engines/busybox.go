package engines

import (
	"archive/tar"
	"os"
	"path/filepath"
	"testing"

	"github.com/cordon-project/cordon/internal/testkit"
)

// BusyboxApplets are the commands a BusyboxRoot has in /bin.
var BusyboxApplets = []string{"sh", "sleep", "true", "cat", "echo"}

// BusyboxRoot returns a root filesystem tarball holding only the host's
// static busybox (/bin/busybox, package busybox-static) with a few applets
// linked to it, the empty directories a container root needs and the
// files the engine binds over (/etc/hosts, hostname, resolv.conf): a tiny
// image for a benchmark, where the native snapshotter copies the whole
// image for every container. Built in t's temporary directory.
func BusyboxRoot(t testing.TB) string {
	t.Helper()
	testkit.RequireFile(t, "/bin/busybox", "the benchmark's tiny image is the static busybox (package busybox-static)")
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "busybox-root.tar")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	for _, d := range []string{"bin/", "dev/", "etc/", "proc/", "sys/", "tmp/"} {
		mode := int64(0o755)
		if d == "tmp/" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: mode}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.WriteHeader(&tar.Header{Name: "bin/busybox", Mode: 0o755, Size: int64(len(bb))}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(bb); err != nil {
		t.Fatal(err)
	}
	// The engine binds these over the image's: in a read-only root (the
	// pod sandbox's) cordon needs the mount points to exist.
	for _, e := range []string{"etc/hosts", "etc/hostname", "etc/resolv.conf"} {
		if err := tw.WriteHeader(&tar.Header{Name: e, Mode: 0o644}); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range BusyboxApplets {
		if err := tw.WriteHeader(&tar.Header{Name: "bin/" + a, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}
