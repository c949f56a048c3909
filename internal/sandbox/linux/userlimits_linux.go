package linux

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// userNSLimits are the per-uid bounds written to /proc/sys/user/* inside
// each sandbox's user namespace (see docs/host-pools.md). The kernel
// checks a charge against every namespace up the chain: the program's uid
// against these, and the sandbox's total against the host's per-user
// limits for the lease, which owns the namespace (asLeaseOwner). Below the
// host's defaults, so that the bound a sandbox meets is its own.
var userNSLimits = map[string]uint64{
	// inotify: libuv and file watchers use a few instances and one watch
	// per watched directory. The host default is 128 instances per user.
	"max_inotify_instances": 64,
	"max_inotify_watches":   65536,
	// fanotify_init is refused by seccomp; none either way.
	"max_fanotify_groups": 0,
	"max_fanotify_marks":  0,
	// New namespaces are refused by seccomp (unshare, setns, clone flags)
	// and the program holds no capability; none either way.
	"max_cgroup_namespaces": 0,
	"max_ipc_namespaces":    0,
	"max_mnt_namespaces":    0,
	"max_net_namespaces":    0,
	"max_pid_namespaces":    0,
	"max_time_namespaces":   0,
	"max_user_namespaces":   0,
	"max_uts_namespaces":    0,
}

// presentUserLimits returns the limits whose file this kernel has (the
// sandbox runs on the same kernel, so it has the same files).
func presentUserLimits() map[string]uint64 {
	out := map[string]uint64{}
	for n, v := range userNSLimits {
		if _, err := os.Stat(filepath.Join("/proc/sys/user", n)); err == nil {
			out[n] = v
		}
	}
	return out
}

// tcpShareOfPressure: one sandbox's socket buffers may take at most this
// fraction of the host's TCP memory-pressure threshold (net.ipv4.tcp_mem,
// second value). Past the third value every TCP allocation on the host
// fails; one sandbox alone never brings the host into pressure.
const tcpShareOfPressure = 4

// tcpLimit is the v1 TCP socket-buffer limit of a sandbox with the given
// memory limit: the memory limit, or a quarter of the host's TCP
// pressure threshold if that is lower. readTCPMem returns the host's
// tcp_mem (pages); an unreadable value leaves the memory limit.
func tcpLimit(memory int64, readTCPMem func() ([]byte, error)) int64 {
	b, err := readTCPMem()
	if err != nil {
		return memory
	}
	f := strings.Fields(string(b))
	if len(f) != 3 {
		return memory
	}
	pressure, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil || pressure <= 0 {
		return memory
	}
	// Whole pages: the kernel rounds the limit down to a page.
	share := pressure / tcpShareOfPressure * int64(os.Getpagesize())
	if memory <= 0 || share < memory {
		return share
	}
	return memory
}

func readHostTCPMem() ([]byte, error) { return os.ReadFile("/proc/sys/net/ipv4/tcp_mem") }
