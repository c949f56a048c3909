package sbinit

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Image mode (Config.Image): the root is an OCI image's, whose author
// chose every name in it, symlinks included. A mount point in it is
// therefore never reached by a path: it is opened under the root's own
// descriptor with RESOLVE_IN_ROOT|RESOLVE_NO_SYMLINKS (a symlink anywhere
// on the way is refused, so nothing can point a mount at the init's view
// of the host), created component by component with mkdirat/openat
// (O_EXCL, O_NOFOLLOW) when missing and the root is writable, and the
// mount is made on the opened descriptor. A read-only root with a missing
// mount point is refused with the target's name.

// inRoot opens target (absolute, as the sandbox sees it) under the root
// open at rootFD as an O_PATH descriptor, creating it (a directory when
// dir, else an empty file) and its missing parents when create is set.
// What exists must be of the kind asked for.
func inRoot(rootFD int, target string, dir, create bool) (int, error) {
	rel := strings.TrimPrefix(filepath.Clean("/"+target), "/")
	if rel == "" {
		return -1, fmt.Errorf("the root itself is not a mount point")
	}
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	fd, err := unix.Openat2(rootFD, rel, how)
	if errors.Is(err, unix.ENOENT) && create {
		if err = createInRoot(rootFD, rel, dir); err == nil {
			fd, err = unix.Openat2(rootFD, rel, how)
		}
	}
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) {
		return -1, fmt.Errorf("mount point %s: a symlink is on its path in the image (not followed)", target)
	}
	if errors.Is(err, unix.ENOENT) {
		return -1, fmt.Errorf("mount point %s does not exist in the read-only root", target)
	}
	if err != nil {
		return -1, fmt.Errorf("mount point %s: %w", target, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("mount point %s: %w", target, err)
	}
	if isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR; isDir != dir {
		unix.Close(fd)
		return -1, fmt.Errorf("mount point %s: a directory and a file do not match (directory: %v in the image)", target, isDir)
	}
	return fd, nil
}

// createInRoot creates rel under rootFD one component at a time, each
// relative to its parent's descriptor, following no symlink.
func createInRoot(rootFD int, rel string, dir bool) error {
	parts := strings.Split(rel, "/")
	parent, err := unix.Dup(rootFD)
	if err != nil {
		return err
	}
	defer func() { unix.Close(parent) }()
	for i, name := range parts {
		last := i == len(parts)-1
		if last && !dir {
			fd, err := unix.Openat(parent, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
			if err != nil {
				return fmt.Errorf("create %s: %w", rel, err)
			}
			return unix.Close(fd)
		}
		if err := unix.Mkdirat(parent, name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("create %s: %w", rel, err)
		}
		next, err := unix.Openat2(parent, name, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS})
		if err != nil {
			return fmt.Errorf("create %s: %w", rel, err)
		}
		unix.Close(parent)
		parent = next
	}
	return nil
}

// fdPath names an open descriptor for mount(2), which takes a path.
func fdPath(fd int) string { return fmt.Sprintf("/proc/self/fd/%d", fd) }

// imageBinds mounts the binds and tmpfs of image mode on mount points
// opened under the root (see inRoot).
func imageBinds(cfg *Config, rootFD int) error {
	for _, b := range cfg.Binds {
		dir := true
		if b.FD != 0 {
			var st unix.Stat_t
			if err := unix.Fstat(b.FD, &st); err != nil {
				return fmt.Errorf("bind %s: %w", b.Target, err)
			}
			dir = st.Mode&unix.S_IFMT == unix.S_IFDIR
		} else if !b.Tmpfs {
			return fmt.Errorf("bind %s: image mode binds only prepared trees", b.Target)
		}
		dst, err := inRoot(rootFD, b.Target, dir, cfg.RootWritable)
		if err != nil {
			return err
		}
		if b.Tmpfs {
			err = mountTmpfs(cfg, b, fdPath(dst))
		} else if err = unix.MoveMount(b.FD, "", dst, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err == nil {
			err = unix.Close(b.FD)
		} else {
			err = fmt.Errorf("move mount tree onto %s: %w", b.Target, err)
		}
		unix.Close(dst)
		if err != nil {
			return err
		}
	}
	return nil
}

// mountTmpfs mounts a bounded scratch tmpfs owned by the program's uid.
func mountTmpfs(cfg *Config, b Bind, dst string) error {
	size, mode := b.Bytes, b.Mode
	if size <= 0 {
		size = cfg.TmpBytes
	}
	if mode == 0 {
		mode = 0o700
	}
	opts := fmt.Sprintf("mode=%o,size=%d,uid=%d,gid=%d", mode&0o1777, size, cfg.UID, cfg.GID)
	if err := unix.Mount("tmpfs", dst, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount %s: %w", b.Target, err)
	}
	return nil
}

// imageRootDirs checks (or, in a writable root, creates) the directories
// the init mounts on in every root: /proc, /dev and /tmp.
func imageRootDirs(cfg *Config, rootFD int) error {
	for _, d := range []string{"/proc", "/dev", "/tmp"} {
		fd, err := inRoot(rootFD, d, true, cfg.RootWritable)
		if err != nil {
			return fmt.Errorf("the rootfs's %s: %w", d, err)
		}
		unix.Close(fd)
	}
	return nil
}
