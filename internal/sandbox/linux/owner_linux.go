package linux

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// secbitNoSetuidFixup keeps a thread's capabilities when its uids change
// (SECBIT_NO_SETUID_FIXUP, linux/securebits.h).
const secbitNoSetuidFixup = 1 << 2

// errThreadTainted: the spawning thread could not be given back its own
// credentials. It must never run another goroutine: keep it locked.
var errThreadTainted = errors.New("the spawning thread kept the lease's credentials")

// asLeaseOwner runs fn — the clone of the init — with the calling thread's
// effective uid and gid set to the lease's base, so that the kernel makes
// the lease, not host root, the owner of the user namespace the clone
// creates. A user namespace's per-user counters (inotify instances and
// watches, the namespace counts, and the RLIMIT_MSGQUEUE, SIGPENDING,
// MEMLOCK and NPROC charges) are charged up the namespace chain to its
// owner in the parent namespace: owned by root, one sandbox could use all
// of host root's 128 inotify instances, for every root process and every
// other sandbox. Owned by the lease, it uses its lease's own share.
//
// The change is made with raw syscalls, so it applies to this thread only
// (Go's syscall.Setresuid changes every thread); the caller must hold the
// thread locked (runtime.LockOSThread). The real and saved uids stay 0 and
// SECBIT_NO_SETUID_FIXUP keeps the thread's capabilities: after the clone
// the same thread writes the child's uid/gid maps (os/exec does it from
// the parent), which needs CAP_SETUID and CAP_SETGID over the host's user
// namespace, and places it in its v2 cgroup (CLONE_INTO_CGROUP). The
// thread's credentials are restored before asLeaseOwner returns; if that
// fails the result wraps errThreadTainted and the thread must stay locked
// until it exits.
func asLeaseOwner(uid, gid uint32, fn func() error) error {
	bits, _, e := unix.RawSyscall(unix.SYS_PRCTL, unix.PR_GET_SECUREBITS, 0, 0)
	if e != 0 {
		return fmt.Errorf("read securebits: %w", e)
	}
	// The kernel clears a thread's parent-death signal when its euid
	// changes; if this is cordon's main thread, one its own parent armed
	// must survive.
	var pdeath int32
	if _, _, e := unix.RawSyscall(unix.SYS_PRCTL, unix.PR_GET_PDEATHSIG, uintptr(unsafe.Pointer(&pdeath)), 0); e != 0 {
		return fmt.Errorf("read parent-death signal: %w", e)
	}
	// This thread's own effective ids (root's, in practice), read per thread.
	euid, _, _ := unix.RawSyscall(unix.SYS_GETEUID, 0, 0, 0)
	egid, _, _ := unix.RawSyscall(unix.SYS_GETEGID, 0, 0, 0)
	if _, _, e := unix.RawSyscall6(unix.SYS_PRCTL, unix.PR_SET_SECUREBITS, bits|secbitNoSetuidFixup, 0, 0, 0, 0); e != 0 {
		return fmt.Errorf("keep capabilities across the uid change: %w", e)
	}
	restore := func() error {
		var errs []error
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), euid, ^uintptr(0)); e != 0 {
			errs = append(errs, fmt.Errorf("restore euid: %w", e))
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, ^uintptr(0), egid, ^uintptr(0)); e != 0 {
			errs = append(errs, fmt.Errorf("restore egid: %w", e))
		}
		if _, _, e := unix.RawSyscall6(unix.SYS_PRCTL, unix.PR_SET_SECUREBITS, bits, 0, 0, 0, 0); e != 0 {
			errs = append(errs, fmt.Errorf("restore securebits: %w", e))
		}
		if pdeath != 0 {
			if _, _, e := unix.RawSyscall(unix.SYS_PRCTL, unix.PR_SET_PDEATHSIG, uintptr(pdeath), 0); e != 0 {
				errs = append(errs, fmt.Errorf("restore parent-death signal: %w", e))
			}
		}
		if len(errs) > 0 {
			return fmt.Errorf("%w: %w", errThreadTainted, errors.Join(errs...))
		}
		return nil
	}
	var err error
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, ^uintptr(0), uintptr(gid), ^uintptr(0)); e != 0 {
		err = fmt.Errorf("set the thread's egid to the lease: %w", e)
	} else if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), uintptr(uid), ^uintptr(0)); e != 0 {
		err = fmt.Errorf("set the thread's euid to the lease: %w", e)
	} else {
		err = fn()
	}
	return errors.Join(err, restore())
}
