package cli

import "golang.org/x/sys/unix"

// closeRangeCloexec is CLOSE_RANGE_CLOEXEC (linux/close_range.h).
const closeRangeCloexec = 1 << 2

// CloseInherited marks every descriptor above stdio close-on-exec, so that
// nothing cordon's parent left open reaches the sandbox init.
func CloseInherited() error {
	return unix.CloseRange(3, ^uint(0), closeRangeCloexec)
}
