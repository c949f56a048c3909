package cgroup

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// Bounds on waiting for the kernel to let go of a group.
const (
	rmdirTries    = 100                   // EBUSY retries per directory
	rmdirBackoff  = 10 * time.Millisecond // between them
	maxChildDepth = 8                     // nested groups removed below a sandbox group
)

// hooks lets tests stand a fake cgroupfs of plain files in for the kernel:
// afterMkdir fills a new directory with interface files and beforeRmdir
// empties it, as the kernel does. Production code passes nil.
type hooks struct {
	afterMkdir  func(dir string) error
	beforeRmdir func(dir string) error
}

// writeFile writes data to an existing cgroup interface file in one write(2).
// It never creates the file: on cgroupfs a missing file means a missing
// feature, which callers test for with errors.Is(err, fs.ErrNotExist).
func writeFile(path, data string) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_TRUNC|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	for {
		_, err = unix.Write(fd, []byte(data))
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("write %q to %s: %w", data, path, err)
	}
	return nil
}

// readFile reads a cgroup interface file without following a symlink.
func readFile(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// openParent opens <mount>/cordon as a directory, refusing a symlink there.
// With create it first makes the directory (an existing one is fine).
func openParent(mount string, create bool, h *hooks) (int, error) {
	p := filepath.Join(mount, Prefix)
	if create {
		err := unix.Mkdir(p, 0o755)
		switch {
		case err == nil:
			if h != nil && h.afterMkdir != nil {
				if err := h.afterMkdir(p); err != nil {
					return -1, err
				}
			}
		case err != unix.EEXIST:
			return -1, &os.PathError{Op: "mkdir", Path: p, Err: err}
		}
	}
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: p, Err: err}
	}
	return fd, nil
}

// mkdirGroup creates <mount>/cordon/<name>; it fails if the group exists.
func mkdirGroup(mount, name string, h *hooks) error {
	pfd, err := openParent(mount, true, h)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	p := filepath.Join(mount, Prefix, name)
	if err := unix.Mkdirat(pfd, name, 0o755); err != nil {
		return &os.PathError{Op: "mkdir", Path: p, Err: err}
	}
	if h != nil && h.afterMkdir != nil {
		return h.afterMkdir(p)
	}
	return nil
}

// rmdirGroup removes <mount>/cordon/<name> and any groups nested in it. A
// group that is already gone is not an error.
func rmdirGroup(mount, name string, h *hooks) error {
	pfd, err := openParent(mount, false, h)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	return rmdirAt(pfd, filepath.Join(mount, Prefix), name, 0, h)
}

// rmdirAt removes the directory name under dirfd with rmdir(2) only: a
// symlink is never followed (unlinkat fails with ENOTDIR on one) and a
// directory holding regular files is never emptied. Nested directories are
// removed first; EBUSY (processes still leaving) is retried for about a second.
func rmdirAt(dirfd int, dirPath, name string, depth int, h *hooks) error {
	p := filepath.Join(dirPath, name)
	if h != nil && h.beforeRmdir != nil {
		if err := h.beforeRmdir(p); err != nil {
			return err
		}
	}
	err := unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
	if err == nil || err == unix.ENOENT {
		return nil
	}
	if (err == unix.EBUSY || err == unix.ENOTEMPTY) && depth < maxChildDepth {
		if cerr := rmdirChildren(dirfd, p, name, depth, h); cerr != nil {
			return cerr
		}
	}
	for i := 0; i < rmdirTries; i++ {
		err = unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
		if err == nil || err == unix.ENOENT {
			return nil
		}
		if err != unix.EBUSY {
			break
		}
		time.Sleep(rmdirBackoff)
	}
	return &os.PathError{Op: "rmdir", Path: p, Err: err}
}

func rmdirChildren(dirfd int, p, name string, depth int, h *hooks) error {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if err == unix.ENOENT {
			return nil
		}
		return &os.PathError{Op: "open", Path: p, Err: err}
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	ents, err := f.ReadDir(-1)
	if err != nil {
		return fmt.Errorf("list %s: %w", p, err)
	}
	for _, e := range ents {
		if !e.IsDir() { // interface files, and symlinks, are left alone
			continue
		}
		if err := rmdirAt(int(f.Fd()), p, e.Name(), depth+1, h); err != nil {
			return err
		}
	}
	return nil
}
