package linux

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/store"
)

// LeaseLockDir holds one lock file per leased UID/GID range, host-wide. A
// store only knows its own state directory's leases; two state
// directories on one host would otherwise hand out the same range. The
// owner of a lease holds an exclusive flock on its file for the sandbox's
// lifetime; the kernel releases it when the owner dies, and by then the
// sandbox's processes are gone too (their init dies with its parent). It
// lives on /run (a tmpfs: nothing stale survives a reboot).
var LeaseLockDir = "/run/cordon/leases"

// leaseLock is a held host-wide claim on one range.
type leaseLock struct{ fd int }

// leaseLockPath is the lock file of the range of l.
func leaseLockPath(l store.Lease) string {
	return filepath.Join(LeaseLockDir, fmt.Sprintf("%d-%d.lock", l.UID, l.Size))
}

// tryLockLease claims the range of l without blocking; ok is false when
// another process holds it.
//
// A daemon-mode sandbox's init holds a duplicate of the locked descriptor
// (close-on-exec, never passed on) for its whole life, so the range stays
// claimed while the daemon that leased it is down; Attach takes the same
// lock back from the init (see daemon_linux.go). The file is opened
// read-only: flock needs no more.
func tryLockLease(l store.Lease) (*leaseLock, bool, error) {
	if err := os.MkdirAll(LeaseLockDir, 0o700); err != nil {
		return nil, false, fmt.Errorf("lease lock dir: %w", err)
	}
	return tryLockFile(leaseLockPath(l))
}

// tryLockFile takes an exclusive flock on the file at p (created 0600 if
// missing, never through a symlink) without blocking; ok is false when
// another open file description holds it.
func tryLockFile(p string) (*leaseLock, bool, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CREAT|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, false, fmt.Errorf("lock %s: %w", p, err)
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		unix.Close(fd)
		if err == unix.EWOULDBLOCK {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("lock %s: %w", p, err)
	}
	return &leaseLock{fd: fd}, true, nil
}

func (l *leaseLock) release() {
	if l != nil && l.fd >= 0 {
		unix.Close(l.fd)
		l.fd = -1
	}
}
