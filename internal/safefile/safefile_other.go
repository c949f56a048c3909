//go:build !linux

package safefile

import "io/fs"

// WriteFile is unsupported off Linux.
func WriteFile(path string, _ []byte, _ fs.FileMode) error {
	return &Error{Op: "write", Path: path, Err: ErrUnsupported}
}

// WriteNew is unsupported off Linux.
func WriteNew(path string, _ []byte, _ fs.FileMode) error {
	return &Error{Op: "write", Path: path, Err: ErrUnsupported}
}

// OpenDir is unsupported off Linux.
func OpenDir(dir string) (int, error) {
	return -1, &Error{Op: "open directory", Path: dir, Err: ErrUnsupported}
}
