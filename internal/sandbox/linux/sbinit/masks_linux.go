package sbinit

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// maskProc applies Masks in the sandbox's mount namespace. It runs after
// pivot_root and after configureNamespaces, so that every write the init
// makes under /proc/sys (user namespace and ucount limits) is done before
// /proc/sys becomes read-only, and before harden: the mounts belong to
// the init's mount namespace, owned by the sandbox's user namespace, and
// once the program's capabilities are gone (and seccomp refuses mount,
// umount2 and the new mount API) nothing inside can take them off.
func maskProc(cfg *Config) error {
	if skip(cfg, "masks") {
		// Test builds only: the positive control of the mask tests.
		return nil
	}
	for _, m := range Masks {
		if err := applyMask(m); err != nil {
			return err
		}
	}
	return nil
}

// applyMask hides one path. A path the kernel does not have is skipped: the
// program cannot read it either (the trusted side checks that too). The
// target is never followed if it is a symlink: the kind must match.
func applyMask(m Mask) error {
	var st unix.Stat_t
	if err := unix.Lstat(m.Path, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("mask %s: %w", m.Path, err)
	}
	isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
	isReg := st.Mode&unix.S_IFMT == unix.S_IFREG
	switch m.Kind {
	case MaskNull:
		if !isReg {
			return fmt.Errorf("mask %s: not a regular file (mode %#o)", m.Path, st.Mode)
		}
		if err := unix.Mount("/dev/null", m.Path, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("mask %s: bind /dev/null: %w", m.Path, err)
		}
		// Keep the device usable (no nodev): reads return EOF, as under
		// runc, rather than an error a program might not expect.
		return remount(m.Path, unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NOEXEC)
	case MaskEmpty:
		if !isDir {
			return fmt.Errorf("mask %s: not a directory (mode %#o)", m.Path, st.Mode)
		}
		// Read-only from the start: nothing is ever written to it.
		if err := unix.Mount("tmpfs", m.Path, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0555,size=4k,nr_inodes=1"); err != nil {
			return fmt.Errorf("mask %s: empty tmpfs: %w", m.Path, err)
		}
		return nil
	case MaskReadOnly:
		if !isDir && !isReg {
			return fmt.Errorf("mask %s: neither a file nor a directory (mode %#o)", m.Path, st.Mode)
		}
		if err := unix.Mount(m.Path, m.Path, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("mask %s: bind read-only: %w", m.Path, err)
		}
		return remountRO(m.Path)
	}
	return fmt.Errorf("mask %s: unknown kind %q", m.Path, m.Kind)
}
