package safefile

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// ReadBounded reads an input file a caller named (a configuration, a
// policy file, the daemon's settings) as root without being made to hang
// or act: opening never blocks (O_NONBLOCK: a FIFO nobody writes reads as
// empty), and only a regular file — or a pipe, when pipes is set (`cordon
// config check <(…)`) — is read. A device or a directory is refused by
// its type before it is opened (opening some devices acts: a watchdog, a
// tape) and again by the type of what was opened. At most max+1 bytes are
// read: a longer file returns max+1 bytes, for the caller to refuse with
// its own words.
func ReadBounded(path string, max int64, pipes bool) ([]byte, error) {
	ok := func(m fs.FileMode) error {
		if m.IsRegular() || (pipes && m&fs.ModeNamedPipe != 0) {
			return nil
		}
		return fmt.Errorf("%s is not a regular file (%s)", path, m.Type())
	}
	if fi, err := os.Stat(path); err == nil {
		if err := ok(fi.Mode()); err != nil {
			return nil, err
		}
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if err := ok(fi.Mode()); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return b, nil
}
