package e2e

// Positive controls for calls that fail inside the sandbox whatever the
// filter says (mount and bpf need capabilities the program never has;
// TIOCSTI needs a controlling terminal it never has): this test binary,
// re-executed as root on the host, attempts the call once without and
// once with the very seccomp filter the sandbox gets. Without the filter
// the call succeeds; with it, EPERM. So the filter alone denies it.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/sandbox/linux/filter"
	"github.com/cordon-project/cordon/internal/testkit"
)

const (
	childModeEnv   = "CORDON_E2E_ESCAPE_CHILD"  // mount, umount, bpf or tiocsti
	childFilterEnv = "CORDON_E2E_ESCAPE_FILTER" // "1": install the sandbox filter first
	childDirEnv    = "CORDON_E2E_ESCAPE_DIR"    // mount: the directory to mount on
)

// escapeFilterChild is the re-executed child (see children in
// harness_test.go): it does its one attempt and exits.
func escapeFilterChild() int {
	return filterChild(os.Getenv(childModeEnv), os.Getenv(childFilterEnv) == "1", os.Getenv(childDirEnv))
}

// filterChild prints one probe-style result line. Exit 2: setup failed.
func filterChild(mode string, withFilter bool, dir string) int {
	runtime.LockOSThread()
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "escape child:", err)
		return 2
	}
	if mode == "mount" || mode == "umount" {
		// A private mount namespace for this thread, so that the control's
		// successful mount is never seen by the host.
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			return fail(fmt.Errorf("unshare(CLONE_NEWNS): %w", err))
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			return fail(fmt.Errorf("make mounts private: %w", err))
		}
	}
	if mode == "umount" {
		// The mount to take off, made before the filter (as the init
		// makes the sandbox's /proc masks).
		if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=64k"); err != nil {
			return fail(fmt.Errorf("mount tmpfs: %w", err))
		}
	}
	if withFilter {
		p, err := filter.Build()
		if err == nil {
			err = filter.Install(p)
		}
		if err != nil {
			return fail(err)
		}
	}
	r := ProbeResult{Op: mode}
	var err error
	switch mode {
	case "mount":
		err = unix.Mount("tmpfs", dir, "tmpfs", 0, "size=64k")
		var st unix.Statfs_t
		if serr := unix.Statfs(dir, &st); serr == nil {
			r.Data = fmt.Sprintf("fstype=%#x", st.Type)
		}
	case "umount":
		err = unix.Unmount(dir, unix.MNT_DETACH)
		var st unix.Statfs_t
		if serr := unix.Statfs(dir, &st); serr == nil {
			r.Data = fmt.Sprintf("fstype=%#x", st.Type)
		}
	case "bpf":
		attr := [5]uint32{2 /* BPF_MAP_TYPE_ARRAY */, 4, 4, 1, 0}
		fd, _, e := unix.Syscall(unix.SYS_BPF, 0 /* BPF_MAP_CREATE */, uintptr(unsafe.Pointer(&attr[0])), unsafe.Sizeof(attr))
		if e != 0 {
			err = e
		} else {
			r.Data = fmt.Sprintf("fd=%d", fd)
			unix.Close(int(fd))
		}
	case "tiocsti":
		c := byte('X')
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, 0, unix.TIOCSTI, uintptr(unsafe.Pointer(&c))); e != 0 {
			err = e
		}
	default:
		return fail(fmt.Errorf("unknown mode %q", mode))
	}
	r.OK = err == nil
	if e, ok := err.(syscall.Errno); ok {
		r.Errno, r.Err = unix.ErrnoName(e), e.Error()
	}
	b, _ := json.Marshal(r)
	fmt.Println(string(b))
	return 0
}

// runFilterChild re-executes this test binary in mode. attr, when set,
// gives the child its stdin and session (the TIOCSTI control).
func runFilterChild(t *testing.T, mode string, withFilter bool, dir string, stdin *os.File, attr *syscall.SysProcAttr) ProbeResult {
	t.Helper()
	f := "0"
	if withFilter {
		f = "1"
	}
	cmd := testkit.Child(t, "escape-filter", childModeEnv+"="+mode, childFilterEnv+"="+f, childDirEnv+"="+dir)
	cmd.Stdin = stdin
	cmd.SysProcAttr = attr
	out, err := cmd.Output()
	p := parseProbe(string(out))
	if err != nil || p.Op == "" {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("filter child %s (filter %v): %v\nstdout: %s\nstderr: %s", mode, withFilter, err, out, stderr)
	}
	return p
}
