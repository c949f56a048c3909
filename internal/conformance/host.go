package conformance

import (
	"os"
	"strconv"
	"strings"

	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/conformance/record"
	"github.com/cordon-project/cordon/internal/evidence"
	"github.com/cordon-project/cordon/internal/sandbox"
)

// HostFacts are the facts of the host the suite ran on. The kernel, boot
// id and Landlock ABI are always the runner's own reading of this host
// (the record binds them and the environment-evidenced label quotes
// them): the baseline run's evidence record is what the provider under
// test reported, and a provider that says another kernel or boot is
// recorded as having said so (host.facts provider_reported_*), never
// taken for the host. The baseline's cgroup controllers and seccomp are
// kept when it has them (a provider that built no sandbox said nothing
// about them); the provider's probed features are kept as further facts
// (record.HostFrom).
func HostFacts(rep *Report, c sandbox.Capability) record.Host {
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
	said := map[string]string{}
	if rep != nil && rep.Baseline != nil && rep.Baseline.Host.Kernel != "" {
		b := rep.Baseline.Host
		h.Cgroups, h.Seccomp = b.Cgroups, b.Seccomp
		if b.Kernel != h.Kernel {
			said["provider_reported_kernel"] = b.Kernel
		}
		if b.BootID != h.BootID {
			said["provider_reported_boot_id"] = b.BootID
		}
		if b.LandlockABI != h.LandlockABI {
			said["provider_reported_landlock_abi"] = strconv.Itoa(b.LandlockABI)
		}
	}
	out := record.HostFrom(h, c)
	for k, v := range said {
		out.Facts[k] = v
	}
	return out
}
