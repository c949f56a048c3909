package hostmgr

import (
	"io"
)

// maxTailScan bounds how far back from the end of a log tailOffset looks
// for line starts: a log of a few long lines (or none) costs the daemon
// at most this much reading, and --tail then starts this far back.
const maxTailScan = 8 << 20

// tailOffset is where the last n lines of the first size bytes of r
// begin (a final line without its newline counts as a line; the log is
// the program's output, untrusted: any bytes). n <= 0 is the end.
func tailOffset(r io.ReaderAt, size int64, n int) (int64, error) {
	if n <= 0 || size <= 0 {
		return max(size, 0), nil
	}
	floor := max(size-maxTailScan, 0)
	buf := make([]byte, 32<<10)
	end := size
	// The log's last byte ends the last line when it is a newline: it
	// does not begin another.
	skip := true
	for end > floor {
		start := max(end-int64(len(buf)), floor)
		b := buf[:end-start]
		if _, err := r.ReadAt(b, start); err != nil && err != io.EOF {
			return 0, err
		}
		for i := len(b) - 1; i >= 0; i-- {
			if skip {
				skip = false
				if start+int64(i) == size-1 && b[i] == '\n' {
					continue
				}
			}
			if b[i] != '\n' {
				continue
			}
			if n--; n == 0 {
				return start + int64(i) + 1, nil
			}
		}
		end = start
	}
	return floor, nil
}
