package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/testkit"
	"github.com/cordon-project/cordon/internal/testkit/engines"
)

// TestDebPackageInstalls builds the Debian package with
// scripts/package.sh and installs it with `apt-get install ./cordon_….deb`
// into a throwaway Debian root (never this host's /usr), then checks from
// outside that every file landed where Debian looks for it, that man finds
// the page, that installing enabled nothing, and runs the installed
// binary: --version in the chroot, with the stamped version and commit,
// and `cordon doctor` with the Debian root as its root (pivot_root in a
// private mount namespace: a chroot cannot create user namespaces), whose
// probe sandbox must be admitted DEDICATED_CONTAINER. Purging removes the binary and keeps the state
// directory (the evidence log).
func TestDebPackageInstalls(t *testing.T) {
	testkit.RequireRoot(t)
	for _, tool := range []string{"mmdebstrap", "chroot", "tar", "mount", "umount", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			testkit.Unavailable(t, "needs %s (scripts/test.sh installs mmdebstrap)", tool)
		}
	}
	start := time.Now()
	deb := buildDeb(t)
	tarball := engines.DebianRoot(t, "apt", "man-db")
	root := extractRoot(t, tarball)
	t.Logf("package %s, root ready in %v", filepath.Base(deb), time.Since(start).Round(time.Second))

	// doctor builds a probe sandbox: it needs the kernel's views, the
	// cgroup hierarchies (under /sys) and the host-wide lease locks, so
	// that its UID range is never one another cordon on this host holds.
	mountInRoot(t, root, "/proc", false, "-t", "proc", "proc")
	mountInRoot(t, root, "/sys", true, "--rbind", "/sys")
	mountInRoot(t, root, "/dev", true, "--rbind", "/dev")
	if err := os.MkdirAll("/run/cordon/leases", 0o700); err != nil {
		t.Fatal(err)
	}
	mountInRoot(t, root, "/run/cordon/leases", true, "--bind", "/run/cordon/leases")

	in := func(args ...string) (string, error) {
		cmd := exec.Command("chroot", append([]string{root}, args...)...)
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND=noninteractive", "LANG=C"}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if err := copyFile(deb, filepath.Join(root, "tmp", filepath.Base(deb))); err != nil {
		t.Fatal(err)
	}
	if out, err := in("apt-get", "install", "-y", "--no-install-recommends", "/tmp/"+filepath.Base(deb)); err != nil {
		t.Fatalf("apt-get install ./%s: %v\n%s", filepath.Base(deb), err, out)
	}

	unit, err := os.ReadFile("../dist/systemd/cordon.service")
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string][]byte{
		"/lib/systemd/system/cordon.service":               unit,
		"/usr/bin/cordon":                                  nil,
		"/usr/share/man/man1/cordon.1.gz":                  nil,
		"/usr/share/man/man1/cordon-config-check.1.gz":     nil,
		"/usr/share/bash-completion/completions/cordon":    []byte("__complete"),
		"/usr/share/zsh/vendor-completions/_cordon":        []byte("#compdef cordon"),
		"/usr/share/fish/vendor_completions.d/cordon.fish": []byte("complete -c cordon"),
		"/usr/share/doc/cordon/copyright":                  []byte("Upstream-Name: cordon"),
	} {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil || (want != nil && !bytes.Contains(b, want)) {
			t.Errorf("installed %s: %v; want a file containing %.40q", p, err, want)
		}
	}
	if out, err := in("man", "-w", "cordon"); err != nil || strings.TrimSpace(out) != "/usr/share/man/man1/cordon.1.gz" {
		t.Errorf("man -w cordon = %q, %v; want /usr/share/man/man1/cordon.1.gz", out, err)
	}
	// Installing enables and starts nothing: no wants link, no state yet.
	for _, p := range []string{"/etc/systemd/system/multi-user.target.wants/cordon.service", "/var/lib/cordon"} {
		if _, err := os.Lstat(filepath.Join(root, p)); err == nil {
			t.Errorf("installing created %s; the package must not enable or start the daemon", p)
		}
	}

	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	ver := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(deb), "cordon_"), "_"+runtime.GOARCH+".deb")
	if out, err := in("cordon", "--version"); err != nil || !strings.HasPrefix(out, "cordon "+ver+"\n") || !strings.Contains(out, strings.TrimSpace(string(head))) {
		t.Errorf("cordon --version = %q, %v; want version %s and commit %s", out, err, ver, head)
	}
	// The kernel refuses to create a user namespace from a chroot
	// (clone(2): EPERM when the caller's root is not its mount
	// namespace's), so doctor runs in a private mount namespace whose
	// root is pivoted to the Debian root: the same files, a real root.
	pivot := `set -e; mount --rbind "$1" "$1"; cd "$1"; mkdir -p .oldroot; pivot_root . .oldroot; shift; exec "$@"`
	doctor := exec.Command("unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", pivot, "sh", root, "/usr/bin/cordon", "doctor")
	doctor.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C"}
	if out, err := doctor.CombinedOutput(); err != nil || !strings.Contains(string(out), "DEDICATED_CONTAINER") {
		t.Errorf("cordon doctor in the Debian root = %v; want success naming DEDICATED_CONTAINER\n%s", err, out)
	}

	if out, err := in("apt-get", "purge", "-y", "cordon"); err != nil {
		t.Fatalf("apt-get purge cordon: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(root, "usr/bin/cordon")); err == nil {
		t.Errorf("purge left /usr/bin/cordon")
	}
	if _, err := os.Stat(filepath.Join(root, "var/lib/cordon")); err != nil {
		t.Errorf("purge removed the state directory /var/lib/cordon (the evidence log): %v", err)
	}
	t.Logf("install test took %v", time.Since(start).Round(time.Second))
}

// buildDeb runs scripts/package.sh and returns the package it built.
func buildDeb(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("../scripts/package.sh")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/package.sh: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	deb := lines[len(lines)-1]
	if !strings.HasSuffix(deb, "_"+runtime.GOARCH+".deb") {
		t.Fatalf("scripts/package.sh printed %q, want the .deb path last", out)
	}
	t.Cleanup(func() { os.Remove(deb) })
	return deb
}

// extractRoot unpacks tarball into a fresh directory. The directory is
// removed at the end only when nothing is mounted under it any more: a
// bind of /dev or /sys left behind must never be deleted through.
func extractRoot(t *testing.T, tarball string) string {
	t.Helper()
	root, err := os.MkdirTemp("/var/tmp", "cordon-debroot-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if m := engines.MountsUnder(root); len(m) > 0 {
			t.Errorf("still mounted under %s, left in place: %v", root, m)
			return
		}
		os.RemoveAll(root)
	})
	if out, err := exec.Command("tar", "-xf", tarball, "-C", root).CombinedOutput(); err != nil {
		t.Fatalf("tar -xf %s: %v\n%s", tarball, err, out)
	}
	return root
}

// mountInRoot runs mount(8) with args and root+dst as the target, and
// registers its unmount (recursive, so an --rbind goes whole). A bind is
// made a slave at once: nothing unmounted under root propagates to the host.
func mountInRoot(t *testing.T, root, dst string, bind bool, args ...string) {
	t.Helper()
	at := filepath.Join(root, dst)
	if err := os.MkdirAll(at, 0o755); err != nil {
		t.Fatal(err)
	}
	args = append(args, at)
	if out, err := exec.Command("mount", args...).CombinedOutput(); err != nil {
		t.Fatalf("mount %v: %v\n%s", args, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-R", at).CombinedOutput(); err != nil {
			t.Logf("umount -R %s: %v\n%s; retrying lazily", at, err, out)
			if out, err := exec.Command("umount", "-R", "-l", at).CombinedOutput(); err != nil {
				t.Errorf("umount -R -l %s: %v\n%s", at, err, out)
			}
		}
	})
	if bind {
		if out, err := exec.Command("mount", "--make-rslave", at).CombinedOutput(); err != nil {
			t.Fatalf("mount --make-rslave %s: %v\n%s", at, err, out)
		}
	}
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o644)
}
