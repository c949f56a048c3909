package setns

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// The reasons CheckEngineNet refuses a network namespace.
var (
	ErrNotNetNS     = errors.New("not a network namespace file")
	ErrHostNetNS    = errors.New("the host's own network namespace")
	ErrForeignOwner = errors.New("owned by another user namespace than the host's (another tenant's, e.g. another sandbox's)")
	ErrHostUnknown  = errors.New("the host's network namespace cannot be read (neither PID 1's nor kthreadd's): cannot tell whether this is it")
)

// initPidNSIno is the initial PID namespace's inode (PROC_PID_INIT_INO):
// there PID 2 is kthreadd.
const initPidNSIno = 0xEFFFFFFC

// hostNetRefs are the files of the host's network namespace this process
// can read: PID 1's, and in the initial PID namespace kthreadd's (PID 2,
// a kernel thread, which is always in the initial network namespace and
// can be read where PID 1's cannot, as on a host whose PID 1 is guarded).
func hostNetRefs() []unix.Stat_t {
	var refs []unix.Stat_t
	var st unix.Stat_t
	if unix.Stat("/proc/1/ns/net", &st) == nil {
		refs = append(refs, st)
	}
	var pidns unix.Stat_t
	comm, err := os.ReadFile("/proc/2/comm")
	if err == nil && string(comm) == "kthreadd\n" && unix.Stat("/proc/self/ns/pid", &pidns) == nil && pidns.Ino == initPidNSIno &&
		unix.Stat("/proc/2/ns/net", &st) == nil {
		refs = append(refs, st)
	}
	return refs
}

// OpenEngineNet opens the network namespace file at path — one an engine
// made for a container (a CRI pod's /var/run/netns/cni-…) — without side
// effects on anything else (an O_PATH open first, so a FIFO or a device
// is never opened for reading) and checks it with CheckEngineNet. The
// caller owns the file: joining it later joins this very namespace,
// whatever the path names by then.
func OpenEngineNet(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return nil, err
	}
	if fs.Type != unix.NSFS_MAGIC {
		return nil, ErrNotNetNS
	}
	nfd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", fd), unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(nfd), path)
	if err := CheckEngineNet(f); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// CheckEngineNet fails unless f is a network namespace that a sandbox
// may join in place of its own: an nsfs file of type net, neither the
// host's (PID 1's or kthreadd's; refused when neither can be read) nor
// the calling thread's own, and owned by this process's user namespace
// (the host's): a namespace owned by another user namespace belongs to
// someone else's sandbox, and its owner could reconfigure it at will.
func CheckEngineNet(f *os.File) error {
	fd := int(f.Fd())
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return err
	}
	if fs.Type != unix.NSFS_MAGIC {
		return ErrNotNetNS
	}
	typ, err := unix.IoctlRetInt(fd, unix.NS_GET_NSTYPE)
	if err != nil {
		return fmt.Errorf("namespace type: %w", err)
	}
	if typ != unix.CLONE_NEWNET {
		return ErrNotNetNS
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	// The host's, even when the runtime runs in another namespace; and
	// the runtime's own.
	refs := hostNetRefs()
	if len(refs) == 0 {
		return ErrHostUnknown
	}
	for _, r := range refs {
		if r.Dev == st.Dev && r.Ino == st.Ino {
			return ErrHostNetNS
		}
	}
	if same("/proc/thread-self/ns/net", st) {
		return ErrHostNetNS
	}
	ufd, err := unix.IoctlRetInt(fd, unix.NS_GET_USERNS)
	if err != nil {
		// EPERM: the owner is outside this process's user namespace.
		return fmt.Errorf("%w: %v", ErrForeignOwner, err)
	}
	defer unix.Close(ufd)
	var owner unix.Stat_t
	if err := unix.Fstat(ufd, &owner); err != nil {
		return err
	}
	if !same("/proc/self/ns/user", owner) {
		return ErrForeignOwner
	}
	return nil
}

// same reports whether the namespace file ref is st's namespace. An
// unreadable ref is not st.
func same(ref string, st unix.Stat_t) bool {
	var r unix.Stat_t
	return unix.Stat(ref, &r) == nil && r.Dev == st.Dev && r.Ino == st.Ino
}
