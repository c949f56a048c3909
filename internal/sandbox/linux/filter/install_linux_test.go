//go:build linux && (amd64 || arm64)

package filter

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/cordon-project/cordon/internal/testkit"
	"golang.org/x/sys/unix"
)

// The live test re-executes this test binary (go-landlock's lltest style):
// installing a filter is irreversible, so it happens in a child process.
const childFileEnv = "CORDON_FILTER_TEST_FILE" // file the child tries to make setuid

func TestMain(m *testing.M) {
	testkit.Dispatch(map[string]func() int{
		"filter":     func() int { return child("filter", os.Getenv(childFileEnv)) },
		"nofilter":   func() int { return child("nofilter", os.Getenv(childFileEnv)) },
		"exit":       func() int { return 0 },
		"broker":     func() int { return brokerChild(true, os.Getenv(childFileEnv)) },
		"nobroker":   func() int { return brokerChild(false, os.Getenv(childFileEnv)) },
		"source":     func() int { return sourceChild(os.Getenv(childFileEnv)) },
		"retarget":   func() int { return retargetChild(true) },
		"noretarget": func() int { return retargetChild(false) },
		"ipc":        func() int { return ipcChild(true) },
		"noipc":      func() int { return ipcChild(false) },
		"signal":     func() int { return signalChild(true) },
		"nosignal":   func() int { return signalChild(false) },
	})
	os.Exit(m.Run())
}

// child runs the probes and prints one "name errno" line per probe (0 for
// success). It returns 2 if it could not set itself up.
func child(mode, path string) int {
	runtime.LockOSThread()
	if mode == "filter" && !installChildFilter(Build) {
		return 2
	}
	report := reportErrno

	// A plain fork and exec of a Go program must still work under the filter.
	run, err := testkit.ChildCommand("exit")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	report("exec", run.Run())

	// The Go runtime is multithreaded, and the kernel refuses to move a
	// multithreaded process into a new user namespace (EINVAL) whatever the
	// filter says; so unshare in a forked, single-threaded child, as a
	// launcher would. The child's unshare error comes back from Run.
	userns, err := testkit.ChildCommand("exit")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	userns.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWUSER}
	report("unshare", userns.Run())

	report("chmod", unix.Chmod(path, 0o4755))
	return 0
}

// runChild runs the probes in a child of the given mode against path.
func runChild(t *testing.T, mode, path string) map[string]syscall.Errno {
	t.Helper()
	cmd := testkit.Child(t, mode, childFileEnv+"="+path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child %s: %v\nstderr: %s", mode, err, stderr.String())
	}
	got := make(map[string]syscall.Errno)
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		name, num, ok := strings.Cut(sc.Text(), " ")
		n, err := strconv.Atoi(num)
		if !ok || err != nil {
			t.Fatalf("child %s: bad line %q", mode, sc.Text())
		}
		got[name] = syscall.Errno(n)
	}
	return got
}

// TestInstallLive installs the filter in a child process and tries two
// escapes; a child without the filter is the positive control, showing that
// the filter is the layer that denies them here.
func TestInstallLive(t *testing.T) {
	// Root: the control run must be able to create a user namespace and a
	// setuid file.
	testkit.RequireRoot(t)
	for _, tc := range []struct {
		mode       string
		want       map[string]syscall.Errno
		wantSetuid bool
	}{
		{mode: "nofilter", want: map[string]syscall.Errno{"exec": 0, "unshare": 0, "chmod": 0}, wantSetuid: true},
		{mode: "filter", want: map[string]syscall.Errno{"exec": 0, "unshare": unix.EPERM, "chmod": unix.EPERM}, wantSetuid: false},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "tool")
			if err := os.WriteFile(path, []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			got := runChild(t, tc.mode, path)
			t.Logf("child %s reported errnos %v", tc.mode, got)
			for name, want := range tc.want {
				if g, ok := got[name]; !ok || g != want {
					t.Errorf("f(%q) = %v (reported %t), want %v", tc.mode+" "+name, g, ok, want)
				}
			}
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if setuid := fi.Mode()&os.ModeSetuid != 0; setuid != tc.wantSetuid {
				t.Errorf("f(%q) = %v (mode %v), want %v", tc.mode+" setuid on disk", setuid, fi.Mode(), tc.wantSetuid)
			}
		})
	}
}

// TestInstallRejects checks the validation that runs before anything is
// installed, so it is safe in the test process itself.
func TestInstallRejects(t *testing.T) {
	good, err := Build()
	if err != nil {
		t.Fatalf("Build() = %v", err)
	}
	other := "arm64"
	if runtime.GOARCH == "arm64" {
		other = "amd64"
	}
	for _, tc := range []struct {
		name string
		p    *Program
	}{
		{"nil", nil},
		{"other arch", &Program{Arch: other, Raw: good.Raw, SHA256: good.SHA256}},
		{"empty", &Program{Arch: good.Arch, Raw: nil, SHA256: good.SHA256}},
		{"torn", &Program{Arch: good.Arch, Raw: good.Raw[:len(good.Raw)-3], SHA256: good.SHA256}},
		{"digest mismatch", &Program{Arch: good.Arch, Raw: good.Raw, SHA256: strings.Repeat("0", 64)}},
		{"too long", &Program{Arch: good.Arch, Raw: make([]byte, (maxInstructions+1)*instructionSize), SHA256: good.SHA256}},
	} {
		if err := Install(tc.p); err == nil {
			t.Errorf("f(%q) = nil, want an error", "Install("+tc.name+")")
		}
	}
	if mode, _ := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0); mode != 0 {
		t.Fatalf("f(%q) = %d, want 0: a rejected Install installed a filter", "PR_GET_SECCOMP", mode)
	}
}

// installChildFilter compiles a filter with build and installs it in this
// (child) process; it prints why and reports false when it could not.
func installChildFilter(build func() (*Program, error)) bool {
	p, err := build()
	if err == nil {
		err = Install(p)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return false
	}
	return true
}

// reportErrno prints a child's "name errno" line for one probe: 0 when it
// succeeded, its errno, or -1 when err is not an errno (the parent fails
// on it).
func reportErrno(name string, err error) {
	var errno syscall.Errno
	if err != nil && !errors.As(err, &errno) {
		errno = ^syscall.Errno(0)
	}
	fmt.Printf("%s %d\n", name, int(errno))
}
