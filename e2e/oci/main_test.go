package oci

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Built once by TestMain.
var (
	cordonBin string // the production build, world-readable (bound into containers as the probe)
	cordonOCI string // the cordon-oci symlink next to it: the path engines get
)

func TestMain(m *testing.M) {
	code, err := setup(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e/oci setup:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func setup(m *testing.M) (int, error) {
	dir, err := os.MkdirTemp("", "cordon-e2e-oci-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		return 0, err
	}
	cordonBin, cordonOCI = filepath.Join(dir, "cordon"), filepath.Join(dir, "cordon-oci")
	cmd := exec.Command("go", "build", "-o", cordonBin, "../../cmd/cordon")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("go build ../../cmd/cordon: %v\n%s", err, b)
	}
	if err := os.Symlink("cordon", cordonOCI); err != nil {
		return 0, err
	}
	return m.Run(), nil
}
