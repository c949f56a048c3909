package evidence

import (
	"os"
	"path/filepath"
	"testing"
)

// rootCheck runs filesystemChecks over a fake /proc/PID holding only a
// mountinfo whose / has opts, and returns the root's check.
func rootCheck(t *testing.T, opts string, in Inputs) Check {
	t.Helper()
	proc := t.TempDir()
	line := "100 99 8:1 /img / " + opts + " - ext4 /dev/sda1 rw\n"
	if err := os.WriteFile(filepath.Join(proc, "mountinfo"), []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range filesystemChecks(proc, in) {
		if c.Name == "root_read_only" || c.Name == "root_writable_idmapped" {
			return c
		}
	}
	t.Fatal("no root check")
	return Check{}
}

// TestRootMountNodevNosuid: an image's (or any given) root holds files
// the program did not make: device nodes and setuid binaries are inert
// only while / is nodev and nosuid (the trusted side's mount_setattr).
// The root check must read both from the mountinfo, read-only root
// included — it judged only "ro" (and idmapped), so a root whose nodev
// was missing, where a block device node in the image opens the host's
// disk, was verified all the same (review finding).
func TestRootMountNodevNosuid(t *testing.T) {
	for _, tc := range []struct {
		name, opts string
		in         Inputs
		ok         bool
	}{
		{"ro image root", "ro,nosuid,nodev,relatime,idmapped", Inputs{RootIdmapped: true}, true},
		{"ro image root without nodev", "ro,nosuid,relatime,idmapped", Inputs{RootIdmapped: true}, false},
		{"ro image root without nosuid", "ro,nodev,relatime,idmapped", Inputs{RootIdmapped: true}, false},
		{"ro image root not idmapped", "ro,nosuid,nodev,relatime", Inputs{RootIdmapped: true}, false},
		{"ro given root", "ro,nosuid,nodev,relatime", Inputs{}, true},
		{"ro given root without nodev", "ro,nosuid,relatime", Inputs{}, false},
		{"rw image root", "rw,nosuid,nodev,relatime,idmapped", Inputs{RootIdmapped: true, RootWritable: true}, true},
		{"rw image root without nodev", "rw,nosuid,relatime,idmapped", Inputs{RootIdmapped: true, RootWritable: true}, false},
		{"rw root asked read-only", "rw,nosuid,nodev,relatime,idmapped", Inputs{RootIdmapped: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if c := rootCheck(t, tc.opts, tc.in); c.OK != tc.ok {
				t.Errorf("/ mounted %s: %s OK=%v (got %q), want OK=%v", tc.opts, c.Name, c.OK, c.Got, tc.ok)
			}
		})
	}
}

// devCheck runs filesystemChecks over a fake /proc/PID whose mountinfo
// has a nodev root and the lines given, and returns mounts_nodev.
func devCheck(t *testing.T, lines string) Check {
	t.Helper()
	proc := t.TempDir()
	b := "100 99 8:1 /img / ro,nosuid,nodev,relatime - ext4 /dev/sda1 rw\n" + lines
	if err := os.WriteFile(filepath.Join(proc, "mountinfo"), []byte(b), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range filesystemChecks(proc, Inputs{}) {
		if c.Name == "mounts_nodev" {
			return c
		}
	}
	t.Fatal("no mounts_nodev check")
	return Check{}
}

// TestMountsNodev: a bind of a host tree (a volume, an engine's bind)
// may hold device nodes; only its nodev keeps them closed, and nothing
// read it back (review finding). Every mount must be nodev and nosuid
// but the sandbox's own devpts and the single host device nodes bound
// into /dev or over masked /proc files.
func TestMountsNodev(t *testing.T) {
	const devs = "101 100 0:5 /null /dev/null rw,nosuid,noexec,relatime - devtmpfs devtmpfs rw\n" +
		"102 100 0:5 /tty /dev/tty rw,nosuid,noexec,relatime - devtmpfs devtmpfs rw\n" +
		"103 100 0:60 / /dev/pts rw,nosuid,noexec,relatime - devpts devpts rw\n" +
		"104 100 0:5 /null /proc/kcore ro,nosuid,noexec,relatime - devtmpfs devtmpfs rw\n"
	for _, tc := range []struct {
		name, lines string
		ok          bool
	}{
		{"device nodes and devpts", devs, true},
		{"bind nodev", devs + "105 100 8:1 /home/u/data /data ro,nosuid,nodev,relatime,idmapped - ext4 /dev/sda1 rw\n", true},
		{"bind without nodev", devs + "105 100 8:1 /home/u/data /data ro,nosuid,relatime,idmapped - ext4 /dev/sda1 rw\n", false},
		{"bind without nosuid", devs + "105 100 8:1 /home/u/data /data ro,nodev,relatime - ext4 /dev/sda1 rw\n", false},
		{"tmpfs without nodev", devs + "105 100 0:61 / /scratch rw,nosuid,relatime - tmpfs tmpfs rw\n", false},
		{"the host's whole devtmpfs", devs + "105 100 0:5 / /data rw,nosuid,relatime - devtmpfs devtmpfs rw\n", false},
		{"another host device", devs + "105 100 0:5 /sda /data rw,nosuid,relatime - devtmpfs devtmpfs rw\n", false},
		{"device node without nosuid", "101 100 0:5 /null /dev/null rw,noexec,relatime - devtmpfs devtmpfs rw\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if c := devCheck(t, tc.lines); c.OK != tc.ok {
				t.Errorf("mounts_nodev OK=%v (got %q), want OK=%v", c.OK, c.Got, tc.ok)
			}
		})
	}
}
