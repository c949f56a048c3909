package engines

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/testkit"
)

// CacheDir is where Debian roots built with mmdebstrap are kept between
// test runs, one tarball per suite, variant and package list. Delete a
// tarball to rebuild it.
const CacheDir = "/var/cache/cordon-test"

// Suite is the Debian release every cached root is built from.
const Suite = "bookworm"

// ImagePackages is what Image adds to the minbase variant: procps, so
// that tests can list processes inside a container.
var ImagePackages = []string{"procps"}

// Image returns the path of a tarball of a small Debian root (mmdebstrap
// --variant=minbase plus ImagePackages), built once per machine and
// cached under CacheDir. It is what the engine tests import as their
// image (`docker import`, or an OCI layer for containerd): no registry is
// reachable from the test hosts.
func Image(t testing.TB) string {
	t.Helper()
	return DebianRoot(t, "minbase", ImagePackages...)
}

// DebianRoot returns the cached tarball of a Debian root made by
// `mmdebstrap --variant=VARIANT --include=PKG,… bookworm`, building it
// on first use (from the Debian mirror this host's apt uses: ~30 s to a
// minute). The cache key is the variant and the package list. Concurrent
// test runs take turns through a lock; the tarball appears by rename,
// whole or not at all. A missing mmdebstrap is Unavailable (a failure
// under CI=true).
func DebianRoot(t testing.TB, variant string, include ...string) string {
	t.Helper()
	testkit.RequireRoot(t)
	testkit.RequireCommand(t, "Debian roots are built with mmdebstrap (scripts/test.sh installs it)", "mmdebstrap")
	if err := os.MkdirAll(CacheDir, 0o755); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(filepath.Join(CacheDir, ".lock"), os.O_CREATE|os.O_RDONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	tarball := filepath.Join(CacheDir, cacheName(variant, include))
	if _, err := os.Stat(tarball); err == nil {
		return tarball
	}
	tmp := tarball + ".part.tar"
	args := []string{"--variant=" + variant}
	if len(include) > 0 {
		args = append(args, "--include="+strings.Join(include, ","))
	}
	start := time.Now()
	cmd := exec.Command("mmdebstrap", append(args, Suite, tmp)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		t.Fatalf("mmdebstrap %v: %v\n%s", args, err, out)
	}
	if err := os.Rename(tmp, tarball); err != nil {
		t.Fatal(err)
	}
	t.Logf("built %s with mmdebstrap in %v", tarball, time.Since(start).Round(time.Second))
	return tarball
}

// cacheName is the tarball's name for a variant and package list:
// bookworm-minbase-procps.tar, bookworm-apt-man-db.tar.
func cacheName(variant string, include []string) string {
	return strings.Join(append([]string{Suite, variant}, include...), "-") + ".tar"
}
