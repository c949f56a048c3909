package sbinit

import (
	"fmt"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The /proc/1/mem probe. A non-dumpable init keeps a same-uid program
// from opening /proc/1/mem; the trusted side judges that by the owner of
// the init's /proc/PID/mem (its namespace's root, not the program's uid).
// When the program IS the namespace's root (an image's uid 0, any gid)
// the owners coincide and cannot tell, so the init makes the attempt the
// program could make and leaves the kernel's answer for the host to read:
// after hardening (every layer in place), it forks two children with its
// own credentials; each names itself (MemProbeControl, MemProbeAttempt),
// opens /proc/1/mem and stops itself. No child decides anything: the
// trace is the descriptor table the host reads in /proc/<child>/fd. The first (control) runs while the init is briefly
// dumpable and must hold the descriptor; the second runs after the init is
// non-dumpable again and must not. Both are killed at "go".
const (
	MemProbeControl = "cordon-memctl"
	MemProbeAttempt = "cordon-memtry"
)

// memProbes starts the two probe children and returns their pids, which
// the caller kills and reaps before the program starts.
func memProbes() ([]int, error) {
	path, err := unix.BytePtrFromString("/proc/1/mem")
	if err != nil {
		return nil, err
	}
	ctlName, _ := unix.BytePtrFromString(MemProbeControl)
	tryName, _ := unix.BytePtrFromString(MemProbeAttempt)
	var pids []int
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 1, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("mem probe: set dumpable: %w", err)
	}
	pid, err := stoppedProbe(path, ctlName)
	// Non-dumpable again whatever happened: failing that is fatal.
	if derr := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); derr != nil {
		return pids, fmt.Errorf("set non-dumpable again: %w", derr)
	}
	if err != nil {
		return pids, err
	}
	pids = append(pids, pid)
	if pid, err = stoppedProbe(path, tryName); err != nil {
		return pids, err
	}
	return append(pids, pid), nil
}

// stoppedProbe forks a probe child and waits until it has stopped.
func stoppedProbe(path, name *byte) (int, error) {
	pid, errno := forkProbe(path, name)
	if errno != 0 {
		return 0, fmt.Errorf("mem probe: fork: %w", errno)
	}
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WSTOPPED|unix.WEXITED|unix.WNOWAIT, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return pid, fmt.Errorf("mem probe: wait: %w", err)
		}
		return pid, nil
	}
}

// forkProbe is a raw fork whose child runs only raw system calls (no Go
// runtime: it is a copy of one thread of a multithreaded process), so it
// is nosplit and allocates nothing.
//
//go:nosplit
//go:norace
func forkProbe(path, name *byte) (int, syscall.Errno) {
	pid, _, e := syscall.RawSyscall6(unix.SYS_CLONE, uintptr(unix.SIGCHLD), 0, 0, 0, 0, 0)
	if e != 0 || pid != 0 {
		return int(pid), e
	}
	syscall.RawSyscall6(unix.SYS_PRCTL, unix.PR_SET_NAME, uintptr(unsafe.Pointer(name)), 0, 0, 0, 0)
	cwd := unix.AT_FDCWD
	syscall.RawSyscall6(unix.SYS_OPENAT, uintptr(cwd), uintptr(unsafe.Pointer(path)), unix.O_RDONLY|unix.O_CLOEXEC, 0, 0, 0)
	self, _, _ := syscall.RawSyscall6(unix.SYS_GETPID, 0, 0, 0, 0, 0, 0)
	for {
		syscall.RawSyscall6(unix.SYS_KILL, self, uintptr(unix.SIGSTOP), 0, 0, 0, 0)
	}
}

// endProbes kills and reaps the probe children.
func endProbes(pids []int) {
	for _, pid := range pids {
		_ = unix.Kill(pid, unix.SIGKILL)
		var ws unix.WaitStatus
		for {
			if _, err := unix.Wait4(pid, &ws, 0, nil); err != unix.EINTR {
				break
			}
		}
	}
}
