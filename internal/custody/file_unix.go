//go:build unix

package custody

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// readFile reads a secret file: opened without following a final symbolic
// link (O_NOFOLLOW) and without blocking on a FIFO (O_NONBLOCK), then
// checked on the open descriptor, so the file checked is the file read.
func readFile(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("%w: a symbolic link; name the file itself", ErrUnsafeFile)
		}
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: no such file", ErrMissing)
		}
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	switch m := st.Mode(); {
	case !m.IsRegular():
		return nil, fmt.Errorf("%w: not a regular file (%s)", ErrUnsafeFile, m.Type())
	case m.Perm()&0o022 != 0:
		return nil, fmt.Errorf("%w: writable by group or others (mode %#o); chmod go-w", ErrUnsafeFile, m.Perm())
	case st.Size() > MaxFileBytes:
		return nil, fmt.Errorf("%w: %d bytes; want at most %d", ErrTooLarge, st.Size(), MaxFileBytes)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxFileBytes {
		return nil, fmt.Errorf("%w: grew past %d bytes while read", ErrTooLarge, MaxFileBytes)
	}
	return trimNewlines(b), nil
}
