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

// nsCloneFlag is each namespace type's CLONE_NEW* flag, which the
// kernel's NS_GET_NSTYPE answers for a namespace file.
var nsCloneFlag = map[specs.LinuxNamespaceType]int{
	specs.PIDNamespace: unix.CLONE_NEWPID, specs.NetworkNamespace: unix.CLONE_NEWNET, specs.MountNamespace: unix.CLONE_NEWNS,
	specs.IPCNamespace: unix.CLONE_NEWIPC, specs.UTSNamespace: unix.CLONE_NEWUTS, specs.UserNamespace: unix.CLONE_NEWUSER,
	specs.CgroupNamespace: unix.CLONE_NEWCGROUP, specs.TimeNamespace: unix.CLONE_NEWTIME,
}

// isHostNamespace reports whether path is the host's own namespace of
// type typ: the namespace the runtime itself runs in (the engine's, on
// the host), or PID 1's where it can be read. A path that is not a
// namespace file of type typ is an error (the runtime spec says a runtime
// MUST refuse it, even though cordon joins no namespace path).
func isHostNamespace(typ specs.LinuxNamespaceType, path string) (bool, error) {
	name, ok := nsProcName[typ]
	if !ok {
		return false, fmt.Errorf("unknown namespace type %q", typ)
	}
	if err := checkNSType(typ, path); err != nil {
		return false, err
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

// checkNSType fails unless path is a namespace file of type typ. It opens
// path as O_PATH first (no side effect of opening a FIFO or a device),
// checks the file system is nsfs, and only then opens it to ask its type.
func checkNSType(typ specs.LinuxNamespaceType, path string) error {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return err
	}
	if fs.Type != unix.NSFS_MAGIC {
		return fmt.Errorf("not a namespace file")
	}
	nfd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", fd), unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer unix.Close(nfd)
	got, err := unix.IoctlRetInt(nfd, unix.NS_GET_NSTYPE)
	if err != nil {
		return fmt.Errorf("namespace type: %w", err)
	}
	if got != nsCloneFlag[typ] {
		for t, f := range nsCloneFlag {
			if f == got {
				return fmt.Errorf("a %s namespace, not %s", t, typ)
			}
		}
		return fmt.Errorf("a namespace of another type than %s", typ)
	}
	return nil
}
