package safefile

import (
	"errors"
	"fmt"
)

// Sentinels, inspected with errors.Is on the *Error this package returns.
var (
	// ErrSymlink: a symlink is somewhere in the path, or at the target.
	ErrSymlink = errors.New("a symlink is in the path (symlinks are never followed)")
	// ErrNotRegular: something other than a regular file is at the target
	// (a FIFO, socket, device or directory).
	ErrNotRegular = errors.New("not a regular file")
	// ErrExists: WriteNew found something at the target.
	ErrExists = errors.New("already exists")
	// ErrNotAbsolute: the path is relative.
	ErrNotAbsolute = errors.New("not an absolute path")
)

// Error is a failed write: Op is the step, Path the target, Err the cause
// (one of the sentinels above, or an errno).
type Error struct {
	Op   string
	Path string
	Err  error
}

func (e *Error) Error() string { return fmt.Sprintf("write %s: %s: %v", e.Path, e.Op, e.Err) }
func (e *Error) Unwrap() error { return e.Err }

// ErrUnsupported: this platform has no openat2 (Linux only).
var ErrUnsupported = errors.New("safe file writes need Linux (openat2)")
