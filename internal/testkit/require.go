package testkit

import (
	"fmt"
	"os"
	"os/exec"
	"testing"

	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
)

// InCI reports whether the tests run under CI=true, where a requirement
// that is not met is a failure, never a skip.
func InCI() bool { return os.Getenv("CI") == "true" }

// Unavailable ends t because something it needs is missing: a skip with
// the reason, or under CI=true a failure. It does not return.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	why := fmt.Sprintf(format, args...)
	if InCI() {
		t.Fatalf("%s; under CI=true this test may not skip", why)
	}
	t.Skip(why)
}

// RequireRoot ends t (see Unavailable) unless it runs as root: cordon
// builds sandboxes, cgroups and namespaces as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Unavailable(t, "needs root (euid %d)", os.Geteuid())
	}
}

// RequireStaticBuild ends t (see Unavailable) in a cgo build. A test
// binary that imports the Linux provider is a sandbox init too (package
// sbinit dispatches on argv[0]), and the init refuses a cgo build.
func RequireStaticBuild(t testing.TB) {
	t.Helper()
	if cgoEnabled {
		Unavailable(t, "this test binary is a sandbox init, which refuses a cgo build: run the tests with CGO_ENABLED=0")
	}
}

// RequireLandlock ends t (see Unavailable) unless the kernel offers
// Landlock with at least ABI version min.
func RequireLandlock(t testing.TB, min int) {
	t.Helper()
	abi, err := llsys.LandlockGetABIVersion()
	if err != nil || abi < min {
		Unavailable(t, "needs Landlock ABI %d or later (kernel says %d, %v)", min, abi, err)
	}
}

// RequireCommand returns the path of the first of names found on PATH, or
// ends t (see Unavailable) with why.
func RequireCommand(t testing.TB, why string, names ...string) string {
	t.Helper()
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	Unavailable(t, "%v not found on PATH: %s", names, why)
	return ""
}

// RequireFile ends t (see Unavailable) unless path exists; why says what
// its absence means (a kernel feature, an installed fixture).
func RequireFile(t testing.TB, path, why string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		Unavailable(t, "%s: %v", why, err)
	}
}
