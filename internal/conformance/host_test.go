package conformance

import (
	"os"
	"strings"
	"testing"

	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/evidence"
	"github.com/cordon-project/cordon/internal/sandbox"
)

// TestHostFactsNotFromProvider: the kernel and boot id the record binds
// (and the environment-evidenced label quotes) are the runner's own
// reading of this host, not what the provider under test put in its
// evidence record: a provider that lies about the host is recorded as
// having said so, beside the host's own facts. The control: an honest
// provider's baseline leaves no such fact.
func TestHostFactsNotFromProvider(t *testing.T) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	kernel := unix.ByteSliceToString(u.Release[:])
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Fatal(err)
	}
	boot := strings.TrimSpace(string(b))
	lie := &Report{Baseline: &evidence.Record{Host: evidence.Host{Kernel: "9.9.9-lie", BootID: "00000000-lie", Cgroups: map[string]string{"memory": "v2"}}}}
	h := HostFacts(lie, sandbox.Capability{})
	if h.Kernel != kernel || h.BootID != boot {
		t.Fatalf("host kernel %q boot %q, want this host's %q %q", h.Kernel, h.BootID, kernel, boot)
	}
	if h.Facts["provider_reported_kernel"] != "9.9.9-lie" || h.Facts["provider_reported_boot_id"] != "00000000-lie" {
		t.Errorf("the provider's claim is not recorded: %v", h.Facts)
	}
	if h.CgroupMode != "v2" {
		t.Errorf("cgroup mode %q: the baseline's controllers are kept", h.CgroupMode)
	}
	abi, _ := llsys.LandlockGetABIVersion()
	honest := &Report{Baseline: &evidence.Record{Host: evidence.Host{Kernel: kernel, BootID: boot, LandlockABI: abi}}}
	if h := HostFacts(honest, sandbox.Capability{}); len(h.Facts) != 0 || h.Kernel != kernel {
		t.Errorf("control: honest baseline gives facts %v kernel %q", h.Facts, h.Kernel)
	}
}
