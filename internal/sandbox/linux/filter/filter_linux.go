//go:build linux

package filter

// This file imports only the standard library and golang.org/x/sys/unix, so
// that the sandbox init's install path does not depend on the compiler.

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Install sets no_new_privs and installs p on every thread of the calling
// process (seccomp with SECCOMP_FILTER_FLAG_TSYNC). It is irreversible. On
// error the caller must not go on to run the agent: the filter may be
// missing on every thread.
//
// p must be a Program for runtime.GOARCH whose SHA256 matches its Raw bytes.
// After installing, Install asserts that the calling thread reports seccomp
// filter mode and no_new_privs.
func Install(p *Program) error {
	filters, err := sockFilters(p)
	if err != nil {
		return fmt.Errorf("install seccomp filter: %w", err)
	}

	// no_new_privs is a per-thread flag, and seccomp checks it on the calling
	// thread: both calls must run on the same thread. TSYNC then copies the
	// filter and no_new_privs to every other thread of the process, so the
	// lock can be released afterwards.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	// no_new_privs comes first: without it (or CAP_SYS_ADMIN) the kernel
	// refuses the filter, and with it no later execve can gain privileges
	// (setuid binaries, file capabilities) that would let the agent shed the
	// filter's assumptions.
	if _, _, errno := unix.RawSyscall6(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0, 0); errno != 0 {
		return fmt.Errorf("install seccomp filter: prctl(PR_SET_NO_NEW_PRIVS): %w", errno)
	}

	fprog := unix.SockFprog{Len: uint16(len(filters)), Filter: &filters[0]}
	tid, _, errno := unix.RawSyscall(unix.SYS_SECCOMP,
		unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC,
		uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(filters)
	if errno != 0 {
		return fmt.Errorf("install seccomp filter: seccomp(SECCOMP_SET_MODE_FILTER, TSYNC): %w", errno)
	}
	if tid != 0 {
		// With TSYNC, a positive return is the id of a thread that could not
		// be synchronized; the filter was installed on no thread.
		return fmt.Errorf("install seccomp filter: thread %d could not be synchronized", tid)
	}

	mode, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0)
	if err != nil {
		return fmt.Errorf("install seccomp filter: prctl(PR_GET_SECCOMP): %w", err)
	}
	if mode != unix.SECCOMP_MODE_FILTER {
		return fmt.Errorf("install seccomp filter: seccomp mode is %d after install, want %d", mode, unix.SECCOMP_MODE_FILTER)
	}
	nnp, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
	if err != nil {
		return fmt.Errorf("install seccomp filter: prctl(PR_GET_NO_NEW_PRIVS): %w", err)
	}
	if nnp != 1 {
		return fmt.Errorf("install seccomp filter: no_new_privs is %d after install, want 1", nnp)
	}
	return nil
}

// sockFilters checks p and decodes its Raw bytes into struct sock_filter
// values, copied so that their alignment is Go's and not the byte slice's.
func sockFilters(p *Program) ([]unix.SockFilter, error) {
	if p == nil {
		return nil, fmt.Errorf("nil program")
	}
	if p.Arch != runtime.GOARCH {
		return nil, fmt.Errorf("program is for %q, this process is %q", p.Arch, runtime.GOARCH)
	}
	n := len(p.Raw) / instructionSize
	if len(p.Raw)%instructionSize != 0 || n == 0 || n > maxInstructions {
		return nil, fmt.Errorf("program of %d bytes is not 1 to %d instructions of %d bytes", len(p.Raw), maxInstructions, instructionSize)
	}
	sum := sha256.Sum256(p.Raw)
	if got := hex.EncodeToString(sum[:]); got != p.SHA256 {
		return nil, fmt.Errorf("program digest is %s, want %s", got, p.SHA256)
	}
	filters := make([]unix.SockFilter, n)
	for i := range filters {
		b := p.Raw[i*instructionSize:]
		filters[i] = unix.SockFilter{
			Code: binary.NativeEndian.Uint16(b[0:2]),
			Jt:   b[2],
			Jf:   b[3],
			K:    binary.NativeEndian.Uint32(b[4:8]),
		}
	}
	return filters, nil
}
