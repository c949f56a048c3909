package oci

import (
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// nsProcName is each namespace type's name under /proc/PID/ns.
var nsProcName = map[specs.LinuxNamespaceType]string{
	specs.PIDNamespace: "pid", specs.NetworkNamespace: "net", specs.MountNamespace: "mnt",
	specs.IPCNamespace: "ipc", specs.UTSNamespace: "uts", specs.UserNamespace: "user",
	specs.CgroupNamespace: "cgroup", specs.TimeNamespace: "time",
}

// isHostNamespace reports whether path is the host's own namespace of
// type typ: the namespace the runtime itself runs in (the engine's, on
// the host), or PID 1's where it can be read.
func isHostNamespace(typ specs.LinuxNamespaceType, path string) (bool, error) {
	name, ok := nsProcName[typ]
	if !ok {
		return false, fmt.Errorf("unknown namespace type %q", typ)
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return false, err
	}
	for _, ref := range []string{"/proc/self/ns/" + name, "/proc/1/ns/" + name} {
		var host unix.Stat_t
		if err := unix.Stat(ref, &host); err != nil {
			continue // PID 1 may be out of reach (a sandboxed host)
		}
		if st.Dev == host.Dev && st.Ino == host.Ino {
			return true, nil
		}
	}
	return false, nil
}
