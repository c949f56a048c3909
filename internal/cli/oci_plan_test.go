package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/oci"
	"github.com/cordon-project/cordon/internal/testkit"
)

const minimalOCIConfig = "version: cordon/v1\nworkload: demo\ntenant: acme\npurpose: coding\n"

// TestOCIPlanRefusesUnsafeConfigDir: the gateway configuration a bundle
// names (dev.cordon.config) is the host operator's file, read by the
// keeper as root. Found in review: only the configuration directory and
// the file were checked, so a directory above them that another local
// user owns let that user swap the directory (or the file under it)
// between the check and the read. Every directory up to / must be root's
// and writable by no one else (or sticky). The control: the same file
// under root's own directories loads.
func TestOCIPlanRefusesUnsafeConfigDir(t *testing.T) {
	testkit.RequireRoot(t)
	base := t.TempDir()
	mk := func(parent string) string {
		dir := filepath.Join(parent, "oci")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "demo.yaml"), []byte(minimalOCIConfig), 0o644); err != nil {
			t.Fatal(err)
		}
		return filepath.Join(dir, "demo.yaml")
	}
	var out bytes.Buffer
	k := &keeper{o: &ociFlags{g: &globals{stdout: &out, stderr: &out}}}
	k.m = &oci.Mapped{Config: mk(filepath.Join(base, "root-owned")), Workload: "demo"}
	if p, err := k.plan(); err != nil || p == nil {
		t.Fatalf("control: the operator's configuration under root's directories: %v", err)
	}
	user := filepath.Join(base, "user")
	if err := os.Mkdir(user, 0o755); err != nil {
		t.Fatal(err)
	}
	k.m = &oci.Mapped{Config: mk(user), Workload: "demo"}
	if err := os.Chown(user, 54321, 54321); err != nil {
		t.Fatal(err)
	}
	_, err := k.plan()
	if err == nil {
		t.Fatalf("a configuration under a directory another user owns was loaded")
	}
	if failure.KindOf(err) != failure.KindPolicyRejected {
		t.Errorf("refusal of kind %s, want %s: %v", failure.KindOf(err), failure.KindPolicyRejected, err)
	}
}

// TestOCIVolumeRoots: --volume-root must be an absolute directory below /
// that is root's and writable by no one else; the control: the same
// directory at 0755 is accepted.
func TestOCIVolumeRoots(t *testing.T) {
	for _, bad := range []string{"/", "relative/vols", ""} {
		o := &ociFlags{g: &globals{}, level: "DEDICATED_CONTAINER", configDir: "/etc/cordon/oci", volumeRoots: []string{bad}}
		if _, err := o.options(); err == nil {
			t.Errorf("--volume-root %q accepted", bad)
		}
	}
	dir := filepath.Join(t.TempDir(), "volumes")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := checkVolumeRoots([]string{dir}); err != nil {
		t.Fatalf("control: a root-owned 0755 volume root refused: %v", err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := checkVolumeRoots([]string{dir}); failure.KindOf(err) != failure.KindPolicyRejected {
		t.Errorf("a world-writable volume root: %v, want %s", err, failure.KindPolicyRejected)
	}
}
