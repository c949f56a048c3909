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
	binDir    string // root-owned, 0755: the cordon binary and its cordon-oci name
	cordonBin string // the production build
	ociBin    string // cordonBin under the name cordon-oci (a symlink): what engines run
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
	// Traversable by the sandbox: the binary is bound into containers.
	if err := os.Chmod(dir, 0o755); err != nil {
		return 0, err
	}
	binDir = dir
	cordonBin = filepath.Join(dir, "cordon")
	ociBin = filepath.Join(dir, "cordon-oci")
	cmd := exec.Command("go", "build", "-o", cordonBin, "../../cmd/cordon")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("go build: %v\n%s", err, out)
	}
	if err := os.Symlink("cordon", ociBin); err != nil {
		return 0, err
	}
	code := m.Run()
	if err := closeEngine(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e/oci: stop the private containerd:", err)
		if code == 0 {
			code = 1
		}
	}
	return code, nil
}
