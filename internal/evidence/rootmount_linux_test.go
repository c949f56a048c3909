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
