package sbinit

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Mount flags every read-only bind gets.
const roFlags = unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV

// devNodes are the only host device nodes bound into the minimal /dev.
var devNodes = []string{"null", "zero", "full", "random", "urandom", "tty"}

// devLinks are the symlinks of a minimal /dev.
var devLinks = []Symlink{
	{Target: "/proc/self/fd", Path: "/dev/fd"},
	{Target: "/proc/self/fd/0", Path: "/dev/stdin"},
	{Target: "/proc/self/fd/1", Path: "/dev/stdout"},
	{Target: "/proc/self/fd/2", Path: "/dev/stderr"},
	{Target: "pts/ptmx", Path: "/dev/ptmx"},
}

// buildRoot builds the sandbox's root in the mount namespace and pivots
// into it. Order: private propagation first so nothing leaks back to the
// host; the root and every bind are complete before pivot_root; the old
// root is detached; the new root is remounted read-only last.
func buildRoot(cfg *Config) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	root := cfg.MountDir
	synth := cfg.RootfsFD == 0
	if !synth {
		if err := moveTree(cfg.RootfsFD, root); err != nil {
			return err
		}
		if cfg.Image {
			if err := imageRoot(cfg, root); err != nil {
				return err
			}
		}
		for _, d := range []string{"proc", "dev", "tmp"} {
			if fi, err := os.Stat(filepath.Join(root, d)); err != nil || !fi.IsDir() {
				return fmt.Errorf("the rootfs has no /%s directory", d)
			}
		}
	} else if err := synthRoot(cfg, root); err != nil {
		return err
	}
	for _, b := range cfg.Binds {
		if cfg.Image {
			break // mounted by imageRoot
		}
		dst := filepath.Join(root, b.Target)
		if b.Tmpfs {
			if err := mkdirAll(dst, synth); err != nil {
				return err
			}
			opts := fmt.Sprintf("mode=0700,size=%d,uid=%d,gid=%d", cfg.TmpBytes, cfg.UID, cfg.GID)
			if err := unix.Mount("tmpfs", dst, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
				return fmt.Errorf("mount %s: %w", b.Target, err)
			}
			continue
		}
		if b.FD != 0 {
			if err := mkMountpoint(fmt.Sprintf("/proc/self/fd/%d", b.FD), dst, synth); err != nil {
				return fmt.Errorf("bind %s: %w", b.Target, err)
			}
			if err := moveTree(b.FD, dst); err != nil {
				return err
			}
			continue
		}
		if _, err := os.Stat(b.Source); err != nil && b.Optional {
			continue
		}
		if err := mkMountpoint(b.Source, dst, synth); err != nil {
			return fmt.Errorf("bind %s: %w", b.Target, err)
		}
		if err := bindMount(b.Source, dst, b.Writable); err != nil {
			return err
		}
	}
	if err := unix.Mount("proc", filepath.Join(root, "proc"), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount proc: %w", err)
	}
	if err := buildDev(filepath.Join(root, "dev"), cfg.UID, cfg.GID); err != nil {
		return err
	}
	tmpOpts := fmt.Sprintf("mode=1777,size=%d", cfg.TmpBytes)
	if err := unix.Mount("tmpfs", filepath.Join(root, "tmp"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, tmpOpts); err != nil {
		return fmt.Errorf("mount /tmp: %w", err)
	}
	// The trees moved in were cloned from the host's mounts and keep their
	// propagation: one cloned from a shared mount (an engine's data root,
	// often shared) is a peer of the host's, so mounts would propagate
	// between them, and pivot_root refuses a shared new root (EINVAL).
	// Everything under the new root becomes private first.
	if err := unix.Mount("", root, "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make the new root private: %w", err)
	}
	// pivot_root(".", ".") stacks the old root under the new one; detaching
	// it leaves nothing of the host but the binds above.
	if err := unix.Chdir(root); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach old root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	if !cfg.RootWritable {
		flags := uintptr(roFlags)
		if skip(cfg, "root-nodev") {
			flags = unix.MS_RDONLY // test builds: the root's nodev,nosuid control
		}
		if err := remount("/", flags); err != nil {
			return err
		}
	}
	return remountRO("/dev")
}

// synthRoot builds the synthesized root: a small tmpfs with the
// directories the init mounts on, the synthesized /etc and the base
// layout's symlinks.
func synthRoot(cfg *Config, root string) error {
	if err := unix.Mount("tmpfs", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=1m,nr_inodes=4096"); err != nil {
		return fmt.Errorf("mount root tmpfs: %w", err)
	}
	for _, d := range []string{"proc", "dev", "tmp", "etc", "home"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	for name, content := range cfg.EtcFiles {
		if strings.Contains(name, "/") || strings.HasPrefix(name, ".") {
			return fmt.Errorf("bad /etc file name %q", name)
		}
		if err := os.WriteFile(filepath.Join(root, "etc", name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	for _, l := range cfg.Symlinks {
		if err := os.Symlink(l.Target, filepath.Join(root, l.Path)); err != nil {
			return fmt.Errorf("symlink %s: %w", l.Path, err)
		}
	}
	return nil
}

// imageRoot mounts image mode's binds and tmpfs on the root moved to
// root (see image_linux.go).
func imageRoot(cfg *Config, root string) error {
	rootFD, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the root: %w", err)
	}
	defer unix.Close(rootFD)
	if err := imageRootDirs(cfg, rootFD); err != nil {
		return err
	}
	return imageBinds(cfg, rootFD)
}

// mkMountpoint creates the mount point for src at dst: a directory or an
// empty file. Outside the synthesized tmpfs root it must already exist.
func mkMountpoint(src, dst string, create bool) error {
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	if _, err := os.Lstat(dst); err == nil {
		return nil
	}
	if !create {
		return fmt.Errorf("mount point %s does not exist in the rootfs", dst)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	if fi.IsDir() {
		return os.Mkdir(dst, 0o755)
	}
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

func mkdirAll(p string, create bool) error {
	if fi, err := os.Stat(p); err == nil && fi.IsDir() {
		return nil
	}
	if !create {
		return fmt.Errorf("mount point %s does not exist in the rootfs", p)
	}
	return os.MkdirAll(p, 0o755)
}

// moveTree moves a detached mount tree prepared by the trusted side onto dst.
func moveTree(fd int, dst string) error {
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("move mount tree onto %s: %w", dst, err)
	}
	return unix.Close(fd)
}

// bindMount binds src on dst (not recursively: submounts of the source stay
// out) and remounts it nosuid,nodev and read-only unless writable.
func bindMount(src, dst string, writable bool) error {
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s on %s: %w", src, dst, err)
	}
	flags := uintptr(unix.MS_NOSUID | unix.MS_NODEV)
	if !writable {
		flags |= unix.MS_RDONLY
	}
	return remount(dst, flags)
}

func remountRO(p string) error { return remount(p, roFlags) }

// remount applies flags to the bind at p, keeping the flags the kernel
// locked on it (in a user namespace a remount may not clear them).
func remount(p string, flags uintptr) error {
	var st unix.Statfs_t
	if err := unix.Statfs(p, &st); err != nil {
		return fmt.Errorf("statfs %s: %w", p, err)
	}
	keep := uintptr(st.Flags) & (unix.MS_NOEXEC | unix.MS_NOATIME | unix.MS_NODIRATIME | unix.MS_RELATIME | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV)
	if flags&unix.MS_RDONLY == 0 {
		keep &^= unix.MS_RDONLY
	}
	if err := unix.Mount("", p, "", unix.MS_REMOUNT|unix.MS_BIND|flags|keep, ""); err != nil {
		return fmt.Errorf("remount %s: %w", p, err)
	}
	return nil
}

// buildDev makes a minimal /dev: a few host device nodes bound in, a
// private devpts instance and a private /dev/shm (its source "shm", as
// engines and runc name it: an OCI bundle's /dev/shm mount then matches
// what a program reads in mountinfo).
func buildDev(dev string, uid, gid int) error {
	if err := unix.Mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=64k,nr_inodes=64"); err != nil {
		return fmt.Errorf("mount /dev: %w", err)
	}
	for _, n := range devNodes {
		dst := filepath.Join(dev, n)
		f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o666)
		if err != nil {
			return err
		}
		f.Close()
		if err := unix.Mount("/dev/"+n, dst, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind /dev/%s: %w", n, err)
		}
		if err := remount(dst, unix.MS_NOSUID|unix.MS_NOEXEC); err != nil {
			return err
		}
	}
	for _, d := range []string{"pts", "shm"} {
		if err := os.Mkdir(filepath.Join(dev, d), 0o755); err != nil {
			return err
		}
	}
	if err := unix.Mount("devpts", filepath.Join(dev, "pts"), "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620,max="+strconv.Itoa(MaxPtys)); err != nil {
		return fmt.Errorf("mount devpts: %w", err)
	}
	if err := unix.Mount("shm", filepath.Join(dev, "shm"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=1777,size=64m"); err != nil {
		return fmt.Errorf("mount /dev/shm: %w", err)
	}
	// The Landlock probe: a tiny tmpfs the program's uid could write to but
	// that no Landlock rule allows.
	probe := filepath.Join(dev, filepath.Base(ProbeDir))
	if err := os.Mkdir(probe, 0o700); err != nil {
		return err
	}
	opts := fmt.Sprintf("mode=0700,size=4k,nr_inodes=8,uid=%d,gid=%d", uid, gid)
	if err := unix.Mount("tmpfs", probe, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts); err != nil {
		return fmt.Errorf("mount probe dir: %w", err)
	}
	for _, l := range devLinks {
		if err := os.Symlink(l.Target, filepath.Join(dev, filepath.Base(l.Path))); err != nil {
			return err
		}
	}
	return nil
}
