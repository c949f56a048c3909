package testkit

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// Tests re-execute their own binary when what they test is irreversible
// for the process (installing a seccomp filter, joining a cgroup that will
// be OOM-killed) or must be a process of its own (one that is SIGKILLed,
// several that race for one store). Two shapes, as in go-landlock's lltest:
//
//   - a named child: a plain function the binary runs instead of its
//     tests. Register the children with Dispatch at the top of TestMain
//     (or in an init, when TestMain does expensive work first) and start
//     one with Child;
//   - a helper test: a Test… function that only does something when this
//     binary was re-run for it. Start it with HelperTest; its body begins
//     with OnlyAsHelper.

// ChildVar names the child a re-executed test binary is to run.
const ChildVar = "CORDON_TESTKIT_CHILD"

// HelperVar names the helper test a re-run test binary is to run.
const HelperVar = "CORDON_TESTKIT_HELPER"

// Dispatch runs the child this process was re-executed as, if any, and
// exits with its status; a name not in children exits 2. Without a child
// to run it returns.
func Dispatch(children map[string]func() int) {
	name := os.Getenv(ChildVar)
	if name == "" {
		return
	}
	run, ok := children[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "testkit: this binary has no child %q\n", name)
		os.Exit(2)
	}
	os.Exit(run())
}

// ChildCommand returns a command that re-executes this binary as the
// child name, with env added to this process's environment. It is for
// children that start children; tests use Child.
func ChildCommand(name string, env ...string) (*exec.Cmd, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find this test binary: %w", err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(append(os.Environ(), ChildVar+"="+name), env...)
	return cmd, nil
}

// Child returns a command that re-executes this test binary as the child
// name (see Dispatch), with env added to the test's environment.
func Child(t testing.TB, name string, env ...string) *exec.Cmd {
	t.Helper()
	cmd, err := ChildCommand(name, env...)
	if err != nil {
		t.Fatal(err)
	}
	return cmd
}

// HelperTest returns a command that re-runs this test binary for the one
// test function name, with env added to the test's environment; that
// test's OnlyAsHelper lets it run.
func HelperTest(t testing.TB, name string, env ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("find this test binary: %v", err)
	}
	cmd := exec.Command(exe, "-test.run=^"+name+"$", "-test.count=1", "-test.v")
	cmd.Env = append(append(os.Environ(), HelperVar+"="+name), env...)
	return cmd
}

// OnlyAsHelper skips t unless this binary was re-run for it by
// HelperTest: a helper test does nothing in an ordinary test run.
func OnlyAsHelper(t testing.TB) {
	t.Helper()
	if os.Getenv(HelperVar) != t.Name() {
		t.Skip("helper process only (started by testkit.HelperTest)")
	}
}
