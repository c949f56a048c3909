package conformance

import (
	"os"
	"strings"

	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/conformance/record"
	"github.com/cordon-project/cordon/internal/evidence"
	"github.com/cordon-project/cordon/internal/sandbox"
)

// HostFacts are the facts of the host the suite ran on: those of the
// baseline run's evidence record (what the trusted side read off the live
// sandbox) when it has them, else the runner's own reading (kernel, boot
// id, Landlock ABI, seccomp; no cgroup controllers: a provider that built
// no sandbox said nothing about them); the provider's probed features are
// kept as further facts (record.HostFrom).
func HostFacts(rep *Report, c sandbox.Capability) record.Host {
	if rep != nil && rep.Baseline != nil && rep.Baseline.Host.Kernel != "" {
		return record.HostFrom(rep.Baseline.Host, c)
	}
	var h evidence.Host
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		h.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	if b, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
		h.BootID = strings.TrimSpace(string(b))
	}
	h.LandlockABI, _ = llsys.LandlockGetABIVersion()
	_, _, errno := unix.RawSyscall(unix.SYS_PRCTL, unix.PR_GET_SECCOMP, 0, 0)
	h.Seccomp = errno == 0
	return record.HostFrom(h, c)
}
