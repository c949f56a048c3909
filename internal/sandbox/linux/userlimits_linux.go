package linux

import (
	"os"
	"path/filepath"
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
