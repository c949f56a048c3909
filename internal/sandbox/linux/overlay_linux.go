package linux

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/failure"
)

// An image whose root is an engine's overlayfs mount (Docker's overlay2,
// containerd's overlayfs snapshotter). The kernel cannot idmap an overlay
// mount, but overlayfs takes idmapped layers: cordon reads the engine
// overlay's layers from the host's mount table, clones each as a detached
// mount idmapped onto the lease (lower layers read-only), and makes an
// overlay of its own over them — in the initial user namespace, by the
// trusted side. Its upper layer is the engine's: what the program writes
// is stored with the image's ids, as the engine expects. Before the
// sandbox gets it, the new overlay is compared with the engine's (root
// inode, filesystem id, the first two levels of the tree): a layer misread
// would give the program another tree, and is refused.

// isOverlay reports whether the directory open at fd is on an overlayfs.
func isOverlay(fd int) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil {
		return false, fmt.Errorf("statfs: %w", err)
	}
	return st.Type == unix.OVERLAYFS_SUPER_MAGIC, nil
}

// engineOverlay reads the layers of the overlay whose root is h.
func engineOverlay(h *hostPath) (overlayOpts, error) {
	var stx unix.Statx_t
	if err := unix.Statx(h.fd, "", unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &stx); err != nil {
		return overlayOpts{}, fmt.Errorf("statx %s: %w", h.path, err)
	}
	if stx.Mask&unix.STATX_MNT_ID == 0 {
		return overlayOpts{}, fmt.Errorf("statx %s: no mount id from this kernel", h.path)
	}
	if stx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT == 0 || stx.Attributes&unix.STATX_ATTR_MOUNT_ROOT == 0 {
		return overlayOpts{}, overlayRefusal("%s is a directory inside an overlayfs mount, not its root", h.path)
	}
	root, fstype, super, err := mountinfoLine("/proc/self/mountinfo", stx.Mnt_id)
	if err != nil {
		return overlayOpts{}, err
	}
	if root != "/" {
		// A bind mount of a directory inside an overlay: the root of a
		// mount of its own, on the same superblock, whose line lists the
		// whole overlay's layers.
		return overlayOpts{}, overlayRefusal("%s is a directory inside an overlayfs mount (a bind of its %s), not its root", h.path, root)
	}
	if fstype != "overlay" {
		return overlayOpts{}, overlayRefusal("%s: mount %d is %q, not overlay", h.path, stx.Mnt_id, fstype)
	}
	return parseOverlayOptions(super)
}

// mountinfoLine returns the root (the directory of its filesystem the
// mount shows, still escaped), the filesystem type and the raw super
// options of the mount with this id.
func mountinfoLine(path string, id uint64) (root, fstype, super string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", "", "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	want := strconv.FormatUint(id, 10)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 || fields[0] != want {
			continue
		}
		// Fields 3 and 4 (root, mount point) are escaped paths; the
		// optional fields end at the first "-".
		for i := 5; i < len(fields); i++ {
			if fields[i] == "-" && i+3 < len(fields) {
				return fields[3], fields[i+1], fields[i+3], nil
			}
		}
		return "", "", "", fmt.Errorf("%s: malformed line for mount %d", path, id)
	}
	if err := sc.Err(); err != nil {
		return "", "", "", fmt.Errorf("%s: %w", path, err)
	}
	return "", "", "", fmt.Errorf("%s: no mount %d", path, id)
}

// openLayer opens a layer directory named by the engine's mount. Symlinks
// are followed (Docker's overlay2 names layers by links under its data
// root, as the kernel did at the engine's mount); magic links are not.
// The directory reached is held to a bind source's rules.
func openLayer(p, stateDir string) (*hostPath, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, p, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, fmt.Errorf("layer %s: %w", p, err)
	}
	real, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil || !filepath.IsAbs(real) {
		unix.Close(fd)
		return nil, fmt.Errorf("layer %s: the descriptor names no host path (%q): %v", p, real, err)
	}
	h := &hostPath{fd: fd, path: real}
	for _, r := range refusedSources {
		if real == r || (r != "/" && under(real, r)) {
			h.close()
			return nil, failure.Failf(failure.KindPolicyRejected, "overlay root", "layer %s (%s) is under %s, which may not be given to a sandbox", p, real, r)
		}
	}
	if under(real, stateDir) || under(stateDir, real) {
		h.close()
		return nil, failure.Failf(failure.KindPolicyRejected, "overlay root", "layer %s holds or is inside cordon's state directory", real)
	}
	if err := unix.Fstat(fd, &h.st); err != nil {
		h.close()
		return nil, fmt.Errorf("layer %s: %w", real, err)
	}
	return h, nil
}

// mountID is the mount id of the file open at fd.
func mountID(fd int) (uint64, error) {
	var stx unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &stx); err != nil {
		return 0, err
	}
	if stx.Mask&unix.STATX_MNT_ID == 0 {
		return 0, errors.New("no mount id from this kernel")
	}
	return stx.Mnt_id, nil
}

// commonDir is the deepest directory holding both a and b (clean,
// absolute paths).
func commonDir(a, b string) string {
	as, bs := strings.Split(a, "/"), strings.Split(b, "/")
	n := 0
	for n < len(as) && n < len(bs) && as[n] == bs[n] {
		n++
	}
	if c := strings.Join(as[:n], "/"); c != "" {
		return c
	}
	return "/"
}

// inTree opens rel beneath the detached tree and checks it is the very
// directory want (device and inode).
func inTree(tree int, rel string, want *hostPath) (int, error) {
	fd, err := unix.Openat2(tree, rel, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	})
	if err != nil {
		return -1, fmt.Errorf("%s in its detached tree: %w", want.path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Dev != want.st.Dev || st.Ino != want.st.Ino {
		unix.Close(fd)
		return -1, fmt.Errorf("%s changed while cordon cloned it (%v)", want.path, err)
	}
	return fd, nil
}

// upperTree clones the directory holding the upper and work layers as
// one detached, writable mount (overlayfs wants both on one mount) and
// returns descriptors of the two inside it.
func upperTree(upper, work *hostPath, ns int) (tree, up, wk int, err error) {
	um, err1 := mountID(upper.fd)
	wm, err2 := mountID(work.fd)
	if err := errors.Join(err1, err2); err != nil {
		return -1, -1, -1, fmt.Errorf("upper and work layers: %w", err)
	}
	if um != wm {
		return -1, -1, -1, overlayRefusal("upperdir %s and workdir %s are on different mounts", upper.path, work.path)
	}
	dir := commonDir(upper.path, work.path)
	if dir == upper.path || dir == work.path {
		return -1, -1, -1, overlayRefusal("upperdir %s and workdir %s nest", upper.path, work.path)
	}
	dfd, err := openNoFollow(dir)
	if err != nil {
		return -1, -1, -1, err
	}
	parent := &hostPath{fd: dfd, path: dir, writable: true}
	defer parent.close()
	if dm, err := mountID(dfd); err != nil || dm != um {
		return -1, -1, -1, overlayRefusal("upperdir %s and workdir %s: their common directory %s is on another mount", upper.path, work.path, dir)
	}
	if tree, err = detachedTreeNS(parent, ns); err != nil {
		return -1, -1, -1, err
	}
	if up, err = inTree(tree, strings.TrimPrefix(upper.path, dir+"/"), upper); err != nil {
		unix.Close(tree)
		return -1, -1, -1, err
	}
	if wk, err = inTree(tree, strings.TrimPrefix(work.path, dir+"/"), work); err != nil {
		unix.Close(tree)
		unix.Close(up)
		return -1, -1, -1, err
	}
	return tree, up, wk, nil
}

// overlayLayers are the open layers of cordon's overlay.
type overlayLayers struct {
	lowers            []int // detached, idmapped, read-only trees
	upperTree, up, wk int   // -1 without an upper layer
}

func (l *overlayLayers) close() {
	for _, fd := range append(l.lowers, l.upperTree, l.up, l.wk) {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// openOverlayLayers opens and clones every layer of o, idmapped through
// ns (-1: none, the test build's control).
func openOverlayLayers(o overlayOpts, stateDir string, ns int) (*overlayLayers, error) {
	l := &overlayLayers{upperTree: -1, up: -1, wk: -1}
	for _, p := range o.Lower {
		h, err := openLayer(p, stateDir)
		if err != nil {
			l.close()
			return nil, err
		}
		tree, err := detachedTreeNS(h, ns)
		h.close()
		if err != nil {
			l.close()
			return nil, err
		}
		l.lowers = append(l.lowers, tree)
	}
	if o.Upper == "" {
		return l, nil
	}
	upper, err := openLayer(o.Upper, stateDir)
	if err != nil {
		l.close()
		return nil, err
	}
	defer upper.close()
	work, err := openLayer(o.Work, stateDir)
	if err != nil {
		l.close()
		return nil, err
	}
	defer work.close()
	if l.upperTree, l.up, l.wk, err = upperTree(upper, work, ns); err != nil {
		l.close()
		return nil, err
	}
	return l, nil
}

// fsError adds the messages the kernel left on a filesystem context.
func fsError(fs int, what string, err error) error {
	var msgs []string
	buf := make([]byte, 1024)
	for range 8 {
		n, rerr := unix.Read(fs, buf)
		if rerr != nil || n <= 0 {
			break
		}
		msgs = append(msgs, strings.TrimSpace(string(buf[:n])))
	}
	if len(msgs) == 0 {
		return fmt.Errorf("%s: %w", what, err)
	}
	return fmt.Errorf("%s: %w (%s)", what, err, strings.Join(msgs, "; "))
}

// mountOverlay makes the overlay over l with o's options and returns it
// as a detached mount: nosuid, nodev, read-only unless writable.
func mountOverlay(o overlayOpts, l *overlayLayers, creatorUID, creatorGID uint32, writable bool) (int, error) {
	fs, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("fsopen overlay: %w", err)
	}
	defer unix.Close(fs)
	for _, fd := range l.lowers {
		if err := unix.FsconfigSetFd(fs, "lowerdir+", fd); err != nil {
			return -1, fsError(fs, "overlay lowerdir+", err)
		}
	}
	if l.up >= 0 {
		if err := unix.FsconfigSetFd(fs, "upperdir", l.up); err != nil {
			return -1, fsError(fs, "overlay upperdir", err)
		}
		if err := unix.FsconfigSetFd(fs, "workdir", l.wk); err != nil {
			return -1, fsError(fs, "overlay workdir", err)
		}
	}
	values, flags := o.fsconfigOptions()
	for _, v := range values {
		if err := unix.FsconfigSetString(fs, v[0], v[1]); err != nil {
			return -1, fsError(fs, "overlay "+v[0]+"="+v[1], err)
		}
	}
	for _, f := range flags {
		if err := unix.FsconfigSetFlag(fs, f); err != nil {
			return -1, fsError(fs, "overlay "+f, err)
		}
	}
	if err := createAs(fs, creatorUID, creatorGID); err != nil {
		return -1, fsError(fs, "overlay create", err)
	}
	attr := unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV
	if !writable {
		attr |= unix.MOUNT_ATTR_RDONLY
	}
	m, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, attr)
	if err != nil {
		return -1, fsError(fs, "fsmount overlay", err)
	}
	return m, nil
}

// createAs creates the superblock with the filesystem ids uid and gid and
// every permitted capability. overlayfs keeps its creator's credentials
// for its own work in the layers (the work directory, copy-up); through
// the idmapped upper layer host uid 0 maps to nothing, and the lease's
// first ids are the image's 0. It runs on a locked thread whose own
// credentials are given back before it reports: a goroutine that exits
// locked does not end the process's main thread (Go parks it for good),
// which would keep the lease's ids. If they cannot be given back the
// thread stays locked (it never runs another goroutine) and the creation
// fails.
func createAs(fs int, uid, gid uint32) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		err := createLocked(fs, uid, gid)
		if !errors.Is(err, errThreadTainted) {
			runtime.UnlockOSThread()
		}
		done <- err
	}()
	return <-done
}

// threadCreds are the calling thread's filesystem ids and capabilities.
type threadCreds struct {
	fsuid, fsgid int
	caps         [2]unix.CapUserData
}

func readThreadCreds() (threadCreds, error) {
	var c threadCreds
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	if err := unix.Capget(&hdr, &c.caps[0]); err != nil {
		return c, fmt.Errorf("capget: %w", err)
	}
	// setfsuid(-1) changes nothing and says what the id is.
	c.fsuid, _ = unix.SetfsuidRetUid(-1)
	c.fsgid, _ = unix.SetfsgidRetGid(-1)
	return c, nil
}

// setThreadCreds sets the calling thread's filesystem ids and then its
// capabilities, and reads both back: setfsuid says nothing when it did
// not change the id, and a change of fsuid moves the filesystem
// capabilities in and out of the effective set.
func setThreadCreds(want threadCreds) error {
	_ = unix.Setfsgid(want.fsgid)
	_ = unix.Setfsuid(want.fsuid)
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	if err := unix.Capset(&hdr, &want.caps[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	got, err := readThreadCreds()
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("thread credentials %d:%d %+v, want %d:%d %+v", got.fsuid, got.fsgid, got.caps, want.fsuid, want.fsgid, want.caps)
	}
	return nil
}

// createLocked is createAs on its locked thread. The kernel clears a
// thread's parent-death signal whenever its filesystem ids change; on the
// main thread it is the one cordon's own parent armed, set again after.
func createLocked(fs int, uid, gid uint32) error {
	own, err := readThreadCreds()
	if err != nil {
		return err
	}
	var pdeath int32
	if err := unix.Prctl(unix.PR_GET_PDEATHSIG, uintptr(unsafe.Pointer(&pdeath)), 0, 0, 0); err != nil {
		return fmt.Errorf("read parent-death signal: %w", err)
	}
	creator := own
	creator.fsuid, creator.fsgid = int(uid), int(gid)
	// A fsuid other than 0 clears the filesystem capabilities from the
	// effective set; raise what is permitted again.
	creator.caps[0].Effective, creator.caps[1].Effective = own.caps[0].Permitted, own.caps[1].Permitted
	err = setThreadCreds(creator)
	if err == nil {
		err = unix.FsconfigCreate(fs)
	}
	rerr := setThreadCreds(own)
	if rerr == nil && pdeath != 0 {
		rerr = unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(pdeath), 0, 0, 0)
	}
	if rerr != nil {
		return fmt.Errorf("%w: %w (creating the overlay: %v)", errThreadTainted, rerr, err)
	}
	return err
}

// engineWritable refuses a writable root over an engine overlay that is
// read-only, by its mount or its superblock: a plain root's clone keeps
// its mount's read-only flag, but cordon's own overlay is a new mount of
// a new superblock, and would write in an upper layer the engine mounted
// read-only.
func engineWritable(engine *hostPath, o overlayOpts) error {
	if !engine.writable {
		return nil
	}
	var st unix.Statfs_t
	if err := unix.Fstatfs(engine.fd, &st); err != nil {
		return fmt.Errorf("statfs %s: %w", engine.path, err)
	}
	if o.ReadOnly || st.Flags&unix.ST_RDONLY != 0 {
		return overlayRefusal("%s: the engine's overlay is mounted read-only, and the root is to be writable", engine.path)
	}
	return nil
}

// engineNoexec makes cordon's overlay noexec when the engine's mount is,
// as a plain root's clone keeps its mount's flags.
func engineNoexec(engine *hostPath, m int) error {
	var st unix.Statfs_t
	if err := unix.Fstatfs(engine.fd, &st); err != nil {
		return fmt.Errorf("statfs %s: %w", engine.path, err)
	}
	if st.Flags&unix.ST_NOEXEC == 0 {
		return nil
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOEXEC}
	if err := unix.MountSetattr(m, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		return fmt.Errorf("make cordon's overlay noexec as %s is: %w", engine.path, err)
	}
	return nil
}

// engineUpper checks, before any overlay is made over it, that the upper
// layer cordon opened is the engine's: the root of an overlay with an
// upper layer has the upper directory's inode number (when its layers
// share one filesystem; otherwise overlayfs numbers directories itself,
// and sameView would refuse the root anyway). Making a writable overlay
// writes in its layers — overlayfs empties its work directory's work/ —
// so a path that names another directory by now must be refused first.
func engineUpper(engine *hostPath, l *overlayLayers, o overlayOpts) error {
	if l.up < 0 {
		return nil
	}
	var e, u unix.Stat_t
	if err := errors.Join(unix.Fstat(engine.fd, &e), unix.Fstat(l.up, &u)); err != nil {
		return fmt.Errorf("stat the upper layers: %w", err)
	}
	if e.Ino != u.Ino {
		return overlayRefusal("upperdir %s is not the engine's upper layer: inode %d, the engine's root %d (a path on the way names another directory now, or the layers are on more than one filesystem)", o.Upper, u.Ino, e.Ino)
	}
	return nil
}

// readEngineOverlay reads, for an image's root, the engine overlay it is
// the root of: nil when the root is not on an overlayfs.
func readEngineOverlay(h *hostPath) (*overlayOpts, error) {
	overlay, err := isOverlay(h.fd)
	if err != nil {
		return nil, failure.Fail(failure.KindProvision, "rootfs", fmt.Errorf("%s: %w", h.path, err))
	}
	if !overlay {
		return nil, nil
	}
	o, err := engineOverlay(h)
	if err != nil && !slices.Contains([]failure.Kind{failure.KindUnsupported, failure.KindPolicyRejected}, failure.KindOf(err)) {
		return nil, failure.Fail(failure.KindProvision, "rootfs", err)
	}
	if err != nil {
		return nil, err
	}
	return &o, nil
}

// rootTreeFD is the detached mount of the sandbox's root: the root
// cloned (idmapped through ns in image mode), or, for an image whose root
// is an engine's overlayfs mount, cordon's own overlay of its layers.
func (sb *linuxSandbox) rootTreeFD(ns int) (int, error) {
	if sb.spec.Image == nil {
		return detachedTreeNS(sb.rootfs, ns)
	}
	if sb.rootOverlay == nil {
		return detachedTreeNS(sb.rootfs, ns)
	}
	o := *sb.rootOverlay
	if o.Upper == "" && sb.rootfs.writable {
		return -1, overlayRefusal("%s: the engine's overlay has no upper layer, and the root is to be writable", sb.rootfs.path)
	}
	if err := engineWritable(sb.rootfs, o); err != nil {
		return -1, err
	}
	if sb.skip("root-overlay-idmap") {
		ns = -1 // test builds: the layers as they are, the control of root_owner_leased
	}
	l, err := openOverlayLayers(o, filepath.Clean(sb.p.opts.StateDir), ns)
	if err != nil {
		return -1, err
	}
	defer l.close()
	if err := engineUpper(sb.rootfs, l, o); err != nil {
		return -1, err
	}
	lease := sb.rec.Lease
	m, err := mountOverlay(o, l, lease.UID, lease.GID, sb.rootfs.writable)
	if err != nil {
		return -1, err
	}
	if err := sameView(sb.rootfs, m); err != nil {
		unix.Close(m)
		return -1, err
	}
	if err := engineNoexec(sb.rootfs, m); err != nil {
		unix.Close(m)
		return -1, err
	}
	return m, nil
}

// upperSockets tells the sockets an engine overlay's upper layer holds:
// the container's own, left by an earlier run of it (a database's, after
// an unclean stop). No process binds them any more — the sandbox that did
// is gone with its processes, and the layer's directories are the
// engine's, under its data root, which only root can reach — so they are
// inert files, and a restart must not be refused for them. Sockets from
// anywhere else in the root still refuse it.
type upperSockets struct{ fd int }

// openUpperSockets opens an engine overlay's upper layer (followed as
// openLayer does); one that does not open skips nothing.
func openUpperSockets(upper string) *upperSockets {
	u := &upperSockets{fd: -1}
	fd, err := unix.Openat2(unix.AT_FDCWD, upper, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_MAGICLINKS,
	})
	if err == nil {
		u.fd = fd
	}
	return u
}

// own reports whether the socket at rel (relative to the merged root,
// "./a/b") is the upper layer's own socket: resolved beneath the upper
// layer, never through a symlink the container made.
func (u *upperSockets) own(rel string) bool {
	if u.fd < 0 {
		return false
	}
	fd, err := unix.Openat2(u.fd, strings.TrimPrefix(rel, "./"), &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	})
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFSOCK
}

func (u *upperSockets) close() {
	if u.fd >= 0 {
		unix.Close(u.fd)
		u.fd = -1
	}
}
