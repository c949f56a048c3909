package linux

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/sandbox/linux/sbinit"
)

// minUserUID: files of a uid below this belong to the system, not a user.
const minUserUID = 1000

// openNoFollow opens an absolute host path as O_PATH without following a
// symlink anywhere in it, so what is checked is what gets bound.
// dupFile takes a descriptor of its own (close-on-exec) of a file the
// caller opened, and the path the kernel has for it now (for refusals and
// messages only: nothing is opened by it).
func dupFile(f *os.File) (int, string, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1, "", fmt.Errorf("the descriptor: %w", err)
	}
	path, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil || !filepath.IsAbs(path) {
		unix.Close(fd)
		return -1, "", fmt.Errorf("the descriptor names no host path (%q): %v", path, err)
	}
	return fd, path, nil
}

func openNoFollow(p string) (int, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, p, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ELOOP) {
		return -1, fmt.Errorf("%s: a symlink is in the path (symlinks are not followed)", p)
	}
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", p, err)
	}
	return fd, nil
}

// openSource opens a bind's source path without following a symlink.
// An engine's volume (ImageIDs) is opened beneath its volume root, on the
// root's own mount: imageIDs says whether it is. A source on a mount of
// its own below the root (a volume driver's bind of a host directory such
// as /etc, a share) holds the host's files, not what the engine copied
// from the image: it is opened as any other bind, without image ids.
func openSource(b sandbox.Bind, src string) (fd int, imageIDs bool, err error) {
	if !b.ImageIDs {
		fd, err = openNoFollow(src)
		if err != nil {
			return -1, false, failure.Fail(failure.KindUsage, "bind", err)
		}
		return fd, false, nil
	}
	root := filepath.Clean(b.VolumeRoot)
	if !filepath.IsAbs(b.VolumeRoot) || root == "/" || !under(src, root) || src == root {
		return -1, false, failure.Failf(failure.KindUsage, "bind", "%s: image ids (an engine's volume) need a volume root the source is strictly below (volume root %q)", src, b.VolumeRoot)
	}
	rfd, err := openNoFollow(root)
	if err != nil {
		return -1, false, failure.Fail(failure.KindUsage, "bind: the volume root", err)
	}
	defer unix.Close(rfd)
	fd, err = unix.Openat2(rfd, src[len(root)+1:], &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	})
	switch {
	case err == nil:
		return fd, true, nil
	case errors.Is(err, unix.EXDEV):
		if fd, err = openNoFollow(src); err != nil {
			return -1, false, failure.Fail(failure.KindUsage, "bind", err)
		}
		return fd, false, nil
	case errors.Is(err, unix.ELOOP):
		return -1, false, failure.Failf(failure.KindUsage, "bind", "%s: a symlink is in the path (symlinks are not followed)", src)
	}
	return -1, false, failure.Failf(failure.KindUsage, "bind", "open %s beneath the volume root %s: %v", src, root, err)
}

// hostPath is a validated, opened host path to bind.
type hostPath struct {
	fd       int
	path     string
	st       unix.Stat_t
	writable bool
	target   string
	imageIDs bool // idmapped onto the lease's range (Bind.ImageIDs)
}

func (h *hostPath) close() {
	if h.fd >= 0 {
		unix.Close(h.fd)
		h.fd = -1
	}
}

// openBind validates one declared bind and opens its source by fd;
// targets are the refused targets (refusedTargets, or image mode's).
func openBind(b sandbox.Bind, stateDir string, unsafeRoot bool, targets []string) (*hostPath, error) {
	src, dst := filepath.Clean(b.Source), filepath.Clean(b.Target)
	if (b.File == nil && !filepath.IsAbs(b.Source)) || !filepath.IsAbs(b.Target) {
		return nil, failure.Failf(failure.KindUsage, "bind", "%s:%s: both paths must be absolute", b.Source, b.Target)
	}
	var fd int
	if b.File != nil {
		// The caller opened it: hold our own descriptor of the very same
		// file and judge the path it has now, resolving nothing.
		var err error
		if fd, src, err = dupFile(b.File); err != nil {
			return nil, failure.Fail(failure.KindUsage, "bind", err)
		}
	}
	closeFD := func() {
		if b.File != nil {
			unix.Close(fd)
		}
	}
	for _, r := range refusedSources {
		if src == r || (r != "/" && under(src, r)) {
			closeFD()
			return nil, failure.Failf(failure.KindPolicyRejected, "bind", "%s may not be bound into a sandbox", src)
		}
	}
	if under(src, stateDir) || under(stateDir, src) {
		closeFD()
		return nil, failure.Failf(failure.KindPolicyRejected, "bind", "%s holds or is inside cordon's state directory %s", src, stateDir)
	}
	for _, r := range targets {
		if dst == r || (r != "/" && under(dst, r)) {
			closeFD()
			return nil, failure.Failf(failure.KindPolicyRejected, "bind", "target %s is reserved by cordon", dst)
		}
	}
	if under(dst, "/dev") || under(dst, "/proc") || under(dst, "/sys") {
		closeFD()
		return nil, failure.Failf(failure.KindPolicyRejected, "bind", "target %s is reserved by cordon", dst)
	}
	imageIDs, ownMount := b.ImageIDs, false
	if b.File == nil {
		var err error
		if fd, imageIDs, err = openSource(b, src); err != nil {
			return nil, err
		}
		ownMount = b.ImageIDs && !imageIDs
	} else if b.ImageIDs {
		closeFD()
		return nil, failure.Failf(failure.KindUsage, "bind", "%s: image ids (an engine's volume) need a source path below the volume root, not a descriptor", src)
	}
	h := &hostPath{fd: fd, path: src, writable: b.Writable, target: dst, imageIDs: imageIDs}
	if err := unix.Fstat(fd, &h.st); err != nil {
		h.close()
		return nil, failure.Fail(failure.KindUsage, "bind", err)
	}
	mode := h.st.Mode & unix.S_IFMT
	if mode != unix.S_IFDIR && mode != unix.S_IFREG {
		h.close()
		return nil, failure.Failf(failure.KindPolicyRejected, "bind", "%s is neither a directory nor a regular file", src)
	}
	// An engine keeps its volumes as directories; a regular file below
	// the volume root is the engine's own (Docker's volumes/metadata.db,
	// kubelet's vol_data.json): bound as any other file.
	engineFile := h.imageIDs && mode != unix.S_IFDIR
	if engineFile {
		h.imageIDs = false
	}
	// A writable bind maps the directory's owner AND group to the program:
	// a system group (e.g. a "chown alice" directory left as alice:root)
	// would hand the program that group's files and let it create files in
	// it on the host.
	// An engine's volume (ImageIDs) holds the image's ids and is mapped
	// as the image's root is: what the sandbox's uid k writes is the
	// image's uid k's, as in the image's own layer.
	if b.Writable && !h.imageIDs && (h.st.Uid < minUserUID || h.st.Gid < minUserUID) && !unsafeRoot {
		h.close()
		return nil, rootOwnedRefusal(b, src, h.st, engineFile, ownMount)
	}
	if mode == unix.S_IFDIR {
		if sock, err := findSocketFD(h.fd, 200000); err != nil {
			h.close()
			return nil, failure.Fail(failure.KindPolicyRejected, "bind", err)
		} else if sock != "" {
			h.close()
			return nil, socketRefusal("bind", src, sock)
		}
	}
	return h, nil
}

// rootOwnedRefusal is the refusal of a writable bind of a directory or
// file a system account owns; below a volume root it says why the bind
// got no image ids (engineFile: a file, not a volume directory; ownMount:
// on a mount of its own).
func rootOwnedRefusal(b sandbox.Bind, src string, st unix.Stat_t, engineFile, ownMount bool) error {
	switch {
	case engineFile:
		return failure.Failf(failure.KindPolicyRejected, "bind", "%s is owned by %d:%d and is a file below the volume root %s, not a volume directory (the engine's own file): bound as any other bind, and a writable bind of a root-owned file is refused", src, st.Uid, st.Gid, b.VolumeRoot)
	case ownMount:
		return failure.Failf(failure.KindPolicyRejected, "bind", "%s is owned by %d:%d and is on a mount of its own below the volume root %s (e.g. a volume driver's bind of a host directory): not known to hold the image's ids, so bound as any other bind, and a writable bind of a root-owned directory is refused", src, st.Uid, st.Gid, b.VolumeRoot)
	}
	return failure.Failf(failure.KindPolicyRejected, "bind", "%s is owned by %d:%d (root or a system account or group); a writable bind needs a user's uid and gid >= %d (chown USER:GROUP %s) or --unsafe-root-workspace", src, st.Uid, st.Gid, minUserUID, src)
}

// findSocketFD walks the directory open at fd — the very tree that will
// be bound, not a path that could be swapped meanwhile — for a Unix
// socket, descending with openat(O_NOFOLLOW) one component at a time, so
// no path length limit hides a subtree. A socket bound in would be a path
// to a host service outside the network namespace. Any error refuses: a
// subtree cordon cannot read as root is not known to be free of sockets.
// It returns the socket's path relative to the root, or "".
func findSocketFD(fd int, limit int) (string, error) {
	return findSocketSkip(fd, limit, nil)
}

// findSocketSkip is findSocketFD passing over the sockets skip accepts
// (their path relative to the root, "./a/b"); nil skips none.
func findSocketSkip(fd int, limit int, skip func(rel string) bool) (string, error) {
	dir, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("open for the socket check: %w", err)
	}
	w := socketWalk{limit: limit, skip: skip}
	return w.walk(dir, ".", 0)
}

type socketWalk struct {
	n, limit int
	skip     func(rel string) bool
}

// maxSocketWalkDepth bounds the directory nesting the socket check
// descends: each level holds a descriptor and a path, and a hostile tree
// (a caller's workspace) could otherwise make the check cost memory
// quadratic in its depth. Deeper trees are refused.
const maxSocketWalkDepth = 256

func (w *socketWalk) walk(dir int, rel string, depth int) (string, error) {
	f := os.NewFile(uintptr(dir), rel)
	defer f.Close()
	for {
		// Names only: the type of each entry comes from fstatat on this
		// directory fd, never from a path.
		names, err := f.Readdirnames(512)
		for _, name := range names {
			w.n++
			if w.n > w.limit {
				return "", fmt.Errorf("more than %d entries; too large to check for Unix sockets", w.limit)
			}
			var st unix.Stat_t
			if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return "", fmt.Errorf("stat %s/%s: %w", rel, name, err)
			}
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFSOCK:
				if w.skip == nil || !w.skip(rel+"/"+name) {
					return rel + "/" + name, nil
				}
			case unix.S_IFDIR:
				if depth+1 > maxSocketWalkDepth {
					return "", fmt.Errorf("directories nested more than %d deep; too deep to check for Unix sockets", maxSocketWalkDepth)
				}
				sub, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
				if err != nil {
					return "", fmt.Errorf("open %s/%s: %w", rel, name, err)
				}
				if found, err := w.walk(sub, rel+"/"+name, depth+1); found != "" || err != nil {
					return found, err
				}
			}
		}
		if errors.Is(err, io.EOF) {
			return "", nil
		}
		if err != nil {
			return "", fmt.Errorf("read %s: %w", rel, err)
		}
	}
}

// idmapper makes user namespaces that map a host file owner onto the
// sandbox's program uid, one per distinct owner, for idmapped mounts.
type idmapper struct {
	hostUID, hostGID uint32 // the program's uid/gid as seen on the host
	byOwner          map[[2]uint32]int
	rangeNS          int // image mode: the lease's whole range (imageUserns), 0 for none
}

func (m *idmapper) close() {
	for _, fd := range m.byOwner {
		unix.Close(fd)
	}
	if m.rangeNS > 0 {
		unix.Close(m.rangeNS)
		m.rangeNS = 0
	}
}

// usernsFor returns a user namespace fd mapping owner uid/gid to the
// program's host uid/gid. A short-lived helper holds the namespace while
// it is opened.
func (m *idmapper) usernsFor(uid, gid uint32) (int, error) {
	if fd, ok := m.byOwner[[2]uint32{uid, gid}]; ok {
		return fd, nil
	}
	fd, err := holdUserns(
		[]syscall.SysProcIDMap{{ContainerID: int(uid), HostID: int(m.hostUID), Size: 1}},
		[]syscall.SysProcIDMap{{ContainerID: int(gid), HostID: int(m.hostGID), Size: 1}})
	if err != nil {
		return -1, err
	}
	if m.byOwner == nil {
		m.byOwner = map[[2]uint32]int{}
	}
	m.byOwner[[2]uint32{uid, gid}] = fd
	return fd, nil
}

// holdUserns returns a descriptor of a new user namespace with these
// maps. A short-lived child holds the namespace while it is opened: it
// asks to be traced and so stops at its exec, before the first
// instruction of the program runs — nothing of cordon runs in the
// namespace, and no Go runtime starts (that cost ~20-30 ms a helper).
// Where tracing is refused (a Yama policy, a filter), the child runs
// the helper that waits on its stdin instead.
func holdUserns(uids, gids []syscall.SysProcIDMap) (int, error) {
	if fd, err := holdStopped(uids, gids); err == nil {
		return fd, nil
	}
	return holdRunning(uids, gids)
}

// holdStopped is holdUserns's child stopped at its exec (PTRACE_TRACEME):
// the namespace is opened, the child killed and reaped.
func holdStopped(uids, gids []syscall.SysProcIDMap) (int, error) {
	// The tracer is the forking thread; it stays this goroutine's until
	// the child is reaped.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cmd := holdCmd(uids, gids)
	cmd.SysProcAttr.Ptrace = true
	if err := cmd.Start(); err != nil {
		return -1, fmt.Errorf("start idmap helper: %w", err)
	}
	fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if err != nil {
		return -1, fmt.Errorf("open idmap user namespace: %w", err)
	}
	return fd, nil
}

// holdCmd is the holder child: cordon's helper in a new user namespace
// with these maps.
func holdCmd(uids, gids []syscall.SysProcIDMap) *exec.Cmd {
	return &exec.Cmd{
		Path: "/proc/self/exe",
		Args: []string{sbinit.HoldArgv0},
		Env:  []string{},
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWUSER,
			UidMappings: uids,
			GidMappings: gids,
			Pdeathsig:   syscall.SIGKILL,
		},
	}
}

// holdRunning is holdUserns's child running the helper that waits on
// its stdin.
func holdRunning(uids, gids []syscall.SysProcIDMap) (int, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return -1, err
	}
	defer r.Close()
	cmd := holdCmd(uids, gids)
	cmd.Stdin = r
	if err := cmd.Start(); err != nil {
		w.Close()
		return -1, fmt.Errorf("start idmap helper: %w", err)
	}
	fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	w.Close()
	_ = cmd.Wait()
	if err != nil {
		return -1, fmt.Errorf("open idmap user namespace: %w", err)
	}
	return fd, nil
}

// detachedTree clones the mount at h into a detached tree, applies
// nosuid, nodev, read-only unless writable, and, when idmap is set, an
// idmap from the source's owner and group to the program's uid and gid.
func detachedTree(h *hostPath, m *idmapper, idmap bool) (int, error) {
	ns := -1
	if idmap {
		var err error
		if ns, err = m.usernsFor(h.st.Uid, h.st.Gid); err != nil {
			return -1, err
		}
	}
	return detachedTreeNS(h, ns)
}

// detachedTreeNS is detachedTree with the idmap's user namespace given
// (-1: no idmap).
func detachedTreeNS(h *hostPath, ns int) (int, error) {
	idmap := ns >= 0
	tree, err := unix.OpenTree(h.fd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return -1, fmt.Errorf("open_tree %s: %w", h.path, err)
	}
	// Private: a clone of a shared mount (a host's / under systemd, an
	// engine's data root) is otherwise a peer of the host's mount, and
	// every mount the init makes on it (/proc, /dev, binds) would
	// propagate into the host's mount table, and the host's into the
	// sandbox.
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV, Propagation: unix.MS_PRIVATE}
	if !h.writable {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if idmap {
		attr.Attr_set |= unix.MOUNT_ATTR_IDMAP
		attr.Userns_fd = uint64(ns)
	}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		unix.Close(tree)
		if idmap && (errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP)) {
			return -1, failure.Failf(failure.KindUnsupported, "idmapped mount", "the filesystem of %s does not support idmapped mounts (%v)", h.path, err)
		}
		return -1, fmt.Errorf("mount_setattr %s: %w", h.path, err)
	}
	return tree, nil
}
