package safefile

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// WriteFile writes data to path (absolute) with mode perm, replacing a
// regular file already there, atomically: a reader sees the old content or
// the new, never a part. A symlink or a non-regular file at path is an
// error; so is a symlink in any component of the path.
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	return write(path, data, perm, false)
}

// WriteNew is WriteFile for a file that must not exist yet: anything at
// path (even a dangling symlink) is ErrExists, and nothing is replaced.
func WriteNew(path string, data []byte, perm fs.FileMode) error {
	return write(path, data, perm, true)
}

// OpenDir opens the directory dir (absolute) without following a symlink
// in any component, for reading (O_RDONLY|O_DIRECTORY|O_CLOEXEC). The
// caller closes the descriptor.
func OpenDir(dir string) (int, error) {
	if !filepath.IsAbs(dir) {
		return -1, &Error{Op: "open directory", Path: dir, Err: ErrNotAbsolute}
	}
	fd, err := unix.Openat2(unix.AT_FDCWD, dir, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err == nil {
		return fd, nil
	}
	if errors.Is(err, unix.ELOOP) {
		err = ErrSymlink
	}
	return -1, &Error{Op: "open directory " + dir, Path: dir, Err: err}
}

func write(path string, data []byte, perm fs.FileMode, noReplace bool) error {
	if !filepath.IsAbs(path) {
		return &Error{Op: "check path", Path: path, Err: ErrNotAbsolute}
	}
	path = filepath.Clean(path)
	dir, name := filepath.Split(path)
	if name == "" || name == "." || name == ".." {
		return &Error{Op: "check path", Path: path, Err: fmt.Errorf("no file name")}
	}
	dfd, err := OpenDir(dir)
	if err != nil {
		e := err.(*Error)
		e.Path = path
		return e
	}
	defer unix.Close(dfd)
	fail := func(op string, err error) error { return &Error{Op: op, Path: path, Err: err} }

	// What is at the target now, never following it. renameat would
	// replace a symlink or a FIFO without following it, but a caller who
	// finds one there was not given the file it asked for: refuse.
	var st unix.Stat_t
	switch err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case err == nil && noReplace:
		return fail("check target", ErrExists)
	case err == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return fail("check target", ErrSymlink)
	case err == nil && st.Mode&unix.S_IFMT != unix.S_IFREG:
		return fail("check target", fmt.Errorf("%w (%s)", ErrNotRegular, typeName(st.Mode)))
	case err != nil && !errors.Is(err, unix.ENOENT):
		return fail("check target", err)
	}

	tmp, fd, err := createTemp(dfd, name, perm)
	if err != nil {
		return fail("create temporary file", err)
	}
	committed := false
	defer func() {
		if !committed {
			_ = unix.Unlinkat(dfd, tmp, 0)
		}
	}()
	err = writeAll(fd, data)
	if err == nil {
		err = unix.Fchmod(fd, uint32(perm.Perm())) // whatever the umask
	}
	if err == nil {
		err = unix.Fsync(fd)
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		return fail("write temporary file", err)
	}
	if noReplace {
		err = unix.Renameat2(dfd, tmp, dfd, name, unix.RENAME_NOREPLACE)
		if errors.Is(err, unix.EEXIST) {
			err = ErrExists
		}
	} else {
		// Between the check above and here the target may have become a
		// symlink or a directory (the directory may be a sandbox's):
		// renameat replaces a symlink or FIFO itself, never following it,
		// and fails on a directory. Nothing outside dfd is touched.
		err = unix.Renameat(dfd, tmp, dfd, name)
	}
	if err != nil {
		return fail("rename into place", err)
	}
	committed = true
	if err := unix.Fsync(dfd); err != nil {
		return fail("sync directory", err)
	}
	return nil
}

// createTemp creates a new file in dfd with a random name derived from
// name, exclusively and without following a symlink.
func createTemp(dfd int, name string, perm fs.FileMode) (string, int, error) {
	base := name
	if len(base) > 200 {
		base = base[:200]
	}
	for range 16 {
		var r [8]byte
		if _, err := rand.Read(r[:]); err != nil {
			return "", -1, err
		}
		tmp := "." + base + ".tmp-" + hex.EncodeToString(r[:])
		fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(perm.Perm())&0o600)
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		return tmp, fd, err
	}
	return "", -1, fmt.Errorf("no free temporary name")
}

func writeAll(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

func typeName(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	case unix.S_IFDIR:
		return "a directory"
	}
	return fmt.Sprintf("file type %#o", mode&unix.S_IFMT)
}
