package oci

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/testkit"
)

// TestNamespacePathType: a namespace path must be a namespace file of
// the type it is given as (runtime-tools' linux_ns_path_type); the host's
// own is recognised, and a namespace of the right type that is not the
// host's (a child's new IPC namespace, the control) is accepted.
func TestNamespacePathType(t *testing.T) {
	testkit.RequireRoot(t)
	dir := t.TempDir()
	fifo, regular := filepath.Join(dir, "fifo"), filepath.Join(dir, "file")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(regular, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	child := exec.Command("sleep", "30")
	child.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWIPC}
	if err := child.Start(); err != nil {
		t.Fatalf("start a child in a new IPC namespace: %v", err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	childIPC := "/proc/" + strconv.Itoa(child.Process.Pid) + "/ns/ipc"

	for _, c := range []struct {
		typ      specs.LinuxNamespaceType
		path     string
		wantHost bool
		wantErr  string
	}{
		{specs.IPCNamespace, "/proc/self/ns/ipc", true, ""},
		{specs.IPCNamespace, childIPC, false, ""},
		{specs.CgroupNamespace, childIPC, false, "a ipc namespace, not cgroup"},
		{specs.UTSNamespace, "/proc/self/ns/net", false, "a network namespace, not uts"},
		{specs.IPCNamespace, regular, false, "not a namespace file"},
		{specs.IPCNamespace, fifo, false, "not a namespace file"},
		{specs.IPCNamespace, filepath.Join(dir, "absent"), false, "no such file"},
	} {
		host, err := isHostNamespace(c.typ, c.path)
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("%s %s: %v, want no error", c.typ, c.path, err)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("%s %s: err = %v, want %q", c.typ, c.path, err, c.wantErr)
		case host != c.wantHost:
			t.Errorf("%s %s: host = %v, want %v", c.typ, c.path, host, c.wantHost)
		}
	}
}
