package conformance

import (
	"maps"
	"os"
	"runtime"
	"strings"

	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/conformance/record"
	"github.com/cordon-project/cordon/internal/sandbox"
)

// HostFacts are the facts of the host the suite ran on, read by the
// runner itself (kernel, boot id, Landlock ABI, seccomp), with the cgroup
// controllers of the baseline run's evidence record when there is one,
// and the provider's probed features as further facts (a provider's
// claim: labelled as such).
func HostFacts(base *Report, c sandbox.Capability) record.Host {
	h := record.Host{Arch: runtime.GOARCH, Facts: map[string]string{}}
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
	if base != nil && base.Baseline != nil {
		h.Cgroups = maps.Clone(base.Baseline.Host.Cgroups)
		h.CgroupMode = cgroupMode(h.Cgroups)
	}
	for k, v := range c.Features {
		h.Facts["provider."+k] = v
	}
	return h
}

// cgroupMode sums controller versions up: "v2", "v1", or "v1 hybrid"
// (v1 controllers with a v2 hierarchy beside them).
func cgroupMode(cs map[string]string) string {
	var v1, v2 bool
	for _, v := range cs {
		v1 = v1 || v == "v1"
		v2 = v2 || v == "v2"
	}
	switch {
	case v1 && v2:
		return "v1 hybrid"
	case v2:
		return "v2"
	case v1:
		if _, err := os.Stat("/sys/fs/cgroup/unified/cgroup.controllers"); err == nil {
			return "v1 hybrid"
		}
		return "v1"
	}
	return ""
}
