package sbinit

import (
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The in-situ set: after harden returned (seccomp installed, every layer
// in place) and before the init reports ready, it makes a few attempts
// the program could make, each leaving a trace only the trusted side can
// read, each beside a positive control that leaves the same kind of
// trace through a permitted route. The init judges nothing: the errors
// below are discarded; the trusted side reads the traces (package
// evidence, insitu_linux.go) and a succeeded attempt refuses admission.
//
// Every attempt is non-blocking and safe for the init to make: each
// system call here fails with ERRNO under the filter (its default action
// is EPERM, never KILL: see internal/sandbox/linux/filter), nothing is
// sent anywhere (a UDP connect only looks up a route; a TCP connect can
// reach only the sandbox's own loopback, or the host's when the network
// layer is missing, and then the host's own listener), and every
// descriptor it keeps is close-on-exec and closed at "go".

// insitu holds the traces the trusted side reads until it said "go".
type insitu struct {
	fds   []int
	files []string
}

// attemptInSitu makes the in-situ attempts of cfg.InSitu (nil: none).
func attemptInSitu(cfg *Config) *insitu {
	s := &insitu{}
	if cfg.InSitu == nil {
		return s
	}
	// (a) A write outside the writable paths: the probe tmpfs is owned by
	// the program's uid, so only Landlock denies it. Control: the same
	// write under /tmp, a writable scratch path.
	s.write(filepath.Join(ProbeDir, InSituWrite), false)
	s.write(InSituControl, true)
	// (b) The host's abstract socket and loopback port: the network
	// namespace (and Landlock's abstract-socket scope) must keep both out
	// of reach. The host counts its accepts.
	s.keep(connectUnix(cfg.InSitu.Abstract))
	s.keep(connectInet(unix.SOCK_STREAM, [4]byte{127, 0, 0, 1}, cfg.InSitu.Port))
	// (c) Kernel objects the filter denies, after it is installed; any
	// that is created stays open for the host to see in /proc/PID/fd.
	// Control: an eventfd, which the filter allows.
	s.keep(unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK))
	var params [120]byte // struct io_uring_params
	s.keep(sysFD(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params[0])), 0))
	const uffdUserModeOnly = 1
	s.keep(sysFD(unix.SYS_USERFAULTFD, unix.O_CLOEXEC|unix.O_NONBLOCK|uffdUserModeOnly, 0, 0))
	// (d) A route out: a UDP connect to a non-loopback address looks up a
	// route and sends nothing; in an empty namespace it fails at once
	// (ENETUNREACH). Control: the same connect to the sandbox's loopback.
	s.keep(connectInet(unix.SOCK_DGRAM, [4]byte{192, 0, 2, 1}, InSituPort))
	s.keep(connectInet(unix.SOCK_DGRAM, [4]byte{127, 0, 0, 1}, InSituPort))
	if cfg.InSitu.Full {
		s.full()
	}
	return s
}

// full is the longer set: more of the kernel's surface.
func (s *insitu) full() {
	// bpf(BPF_MAP_CREATE) of a one-entry array map.
	attr := [8]uint32{2 /* BPF_MAP_TYPE_ARRAY */, 4, 4, 1}
	s.keep(sysFD(unix.SYS_BPF, 0 /* BPF_MAP_CREATE */, uintptr(unsafe.Pointer(&attr[0])), unsafe.Sizeof(attr)))
	// perf_event_open of this task's software CPU clock.
	pa := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK, Bits: unix.PerfBitDisabled | unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv}
	pa.Size = uint32(unsafe.Sizeof(pa))
	s.keep(unix.PerfEventOpen(&pa, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC))
	// A mount over the probe dir: the host counts the mounts there.
	_ = unix.Mount("none", ProbeDir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k")
}

func (s *insitu) write(path string, control bool) {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return
	}
	_, _ = unix.Write(fd, []byte("insitu"))
	unix.Close(fd)
	if control {
		s.files = append(s.files, path)
	}
}

func (s *insitu) keep(fd int, err error) {
	if err == nil && fd >= 0 {
		s.fds = append(s.fds, fd)
	}
}

// release closes the kept descriptors and removes the control file: the
// program starts with none of the in-situ traces.
func (s *insitu) release() {
	for _, fd := range s.fds {
		unix.Close(fd)
	}
	for _, f := range s.files {
		_ = unix.Unlink(f)
	}
	s.fds, s.files = nil, nil
}

func sysFD(nr, a1, a2, a3 uintptr) (int, error) {
	r, _, e := unix.Syscall(nr, a1, a2, a3)
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

func connectUnix(name string) (int, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: "@" + name}); err != nil && err != unix.EINPROGRESS && err != unix.EAGAIN {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

func connectInet(typ int, addr [4]byte, port int) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, typ|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.Connect(fd, &unix.SockaddrInet4{Addr: addr, Port: port}); err != nil && err != unix.EINPROGRESS {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}
