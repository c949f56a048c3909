package linux

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/evidence"
	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/sandbox/linux/sbinit"
)

// Image mode (Spec.Image, cordon oci): the program runs as an OCI bundle
// describes it, inside the same boundary as every sandbox. What changes is
// only what the program sees: its identity inside the sandbox's own user
// namespace (uid 0 included, which holds no capability there either: the
// init's drop is the same, asserted, and judged from outside), the
// image's own root (read-write when asked, idmapped so the image's uid N
// is the sandbox's uid N), its environment and directory as given, its
// hostname, lowered rlimits and scratch tmpfs mounts.

// imageRefusedTargets are the targets a bind may never have in image
// mode: the image's own /etc, /run, /usr are its own to cover (the
// engine's /etc/hosts, /etc/resolv.conf), but cordon's /proc, /dev, /sys
// are not, and /tmp is cordon's scratch tmpfs (mounted over the binds).
var imageRefusedTargets = []string{"/", "/proc", "/sys", "/dev", "/tmp"}

// defaultPath is the PATH an image gets when its environment has none
// (runc does the same).
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// maxHostname is the kernel's limit on a UTS nodename (__NEW_UTS_LEN).
const maxHostname = 64

// validateImage checks what can be checked before a lease exists.
func validateImage(spec sandbox.Spec) error {
	img := spec.Image
	if spec.Rootfs == "" && spec.RootfsFile == nil {
		return failure.Failf(failure.KindUsage, "image", "an image needs an explicit root (Spec.Rootfs or RootfsFile): cordon synthesizes none in image mode")
	}
	if img.Hostname != "" && !validHostname(img.Hostname) {
		return failure.Failf(failure.KindUsage, "image", "hostname %q: not a valid hostname of at most %d bytes", img.Hostname, maxHostname)
	}
	if img.Dir != "" && !filepath.IsAbs(img.Dir) {
		return failure.Failf(failure.KindUsage, "image", "working directory %q: must be absolute", img.Dir)
	}
	for _, t := range img.Tmpfs {
		dst := filepath.Clean(t.Target)
		if !filepath.IsAbs(t.Target) || t.Bytes < 0 {
			return failure.Failf(failure.KindUsage, "image", "tmpfs %q: the target must be absolute and the size not negative", t.Target)
		}
		for _, r := range []string{"/", "/proc", "/dev", "/sys"} {
			if under(dst, r) && (r != "/" || dst == "/") {
				return failure.Failf(failure.KindPolicyRejected, "image", "tmpfs %s: %s and what is under it are cordon's", dst, r)
			}
		}
		if strings.HasPrefix(dst, "/tmp/") {
			return failure.Failf(failure.KindPolicyRejected, "image", "tmpfs %s: /tmp is cordon's own scratch tmpfs, mounted over what is under it", dst)
		}
	}
	for _, r := range img.Rlimits {
		if r.Type < 0 || r.Type >= len(rlimitNames) || r.Soft > r.Hard {
			return failure.Failf(failure.KindUsage, "image", "rlimit %d (%d/%d): unknown resource or soft above hard", r.Type, r.Soft, r.Hard)
		}
	}
	return nil
}

// checkImageIDs holds the image's identity to the lease: every id must be
// one the sandbox's user namespace maps.
func checkImageIDs(img *sandbox.Image, size uint32) error {
	ids := append([]uint32{img.UID, img.GID}, img.AdditionalGIDs...)
	names := append([]string{"uid", "gid"}, slices.Repeat([]string{"additional gid"}, len(img.AdditionalGIDs))...)
	for i, id := range ids {
		if id >= size {
			return failure.Failf(failure.KindUsage, "image", "%s %d is outside the sandbox's user namespace (ids 0..%d)", names[i], id, size-1)
		}
	}
	return nil
}

// validHostname: RFC 1123 labels (letters, digits, hyphens; no hyphen at
// either end), dot separated, at most 64 bytes.
func validHostname(h string) bool {
	if len(h) > maxHostname {
		return false
	}
	for _, l := range strings.Split(h, ".") {
		if l == "" || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// imageEnv is Spec.Env exactly, with the default PATH when it has none.
func imageEnv(env []string) []string {
	out := slices.Clone(env)
	if !slices.ContainsFunc(out, func(kv string) bool { return strings.HasPrefix(kv, "PATH=") }) {
		out = append(out, defaultPath)
	}
	return out
}

// rootfsUnderRun decides a rootfs under /run or /var/run in image mode.
// Those are refused as sources (they hold the host's runtime sockets), but
// an engine mounts each container's root there (containerd:
// /run/containerd/io.containerd.runtime.v2.task/NS/ID/rootfs, an overlay
// of the image's layers). Such a root is accepted only when the directory
// is the root of a mount of its own — its mount id differs from its
// parent's and the kernel flags it STATX_ATTR_MOUNT_ROOT — so it is the
// engine's mount, not a directory of the host's /run (which shares /run's
// mount); the socket scan still runs over it.
func rootfsUnderRun(h *hostPath) (bool, error) {
	inRun := false
	for _, r := range []string{"/run", "/var/run"} {
		if h.path != r && under(h.path, r) {
			inRun = true
		}
	}
	if !inRun {
		return false, nil
	}
	var self, parent unix.Statx_t
	if err := unix.Statx(h.fd, "", unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &self); err != nil {
		return false, fmt.Errorf("statx %s: %w", h.path, err)
	}
	if err := unix.Statx(h.fd, "..", unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &parent); err != nil {
		return false, fmt.Errorf("statx %s/..: %w", h.path, err)
	}
	if self.Mask&parent.Mask&unix.STATX_MNT_ID == 0 {
		return false, fmt.Errorf("statx %s: no mount id from this kernel", h.path)
	}
	root := self.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 && self.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0
	return root && self.Mnt_id != parent.Mnt_id, nil
}

// imageRootDirs lists the rootfs's own top-level directories, read from
// its descriptor (never by path), for Landlock: a writable root is
// writable under these, never at / itself, and never under /proc, /dev or
// /sys (cordon's mounts; the Landlock probe under /dev stays denied).
func imageRootDirs(fd int) ([]string, error) {
	dir, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dir), "rootfs")
	defer f.Close()
	var out []string
	for {
		names, err := f.Readdirnames(256)
		for _, n := range names {
			if n == "proc" || n == "dev" || n == "sys" {
				continue
			}
			var st unix.Stat_t
			if unix.Fstatat(dir, n, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
				out = append(out, "/"+n)
			}
		}
		if errors.Is(err, io.EOF) {
			sort.Strings(out)
			return out, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// rlimitNames are the resources of /proc/PID/limits, by RLIMIT_* number.
var rlimitNames = []string{"Max cpu time", "Max file size", "Max data size", "Max stack size", "Max core file size",
	"Max resident set", "Max processes", "Max open files", "Max locked memory", "Max address space",
	"Max file locks", "Max pending signals", "Max msgqueue size", "Max nice priority", "Max realtime priority",
	"Max realtime timeout"}

// clampRlimits lowers only: each limit is held to the provider's own
// (core 0, NOFILE, FSIZE) and to this process's hard limit, which the
// init inherits (it cannot raise one: no capability in the host's user
// namespace). The last entry for a resource wins.
func clampRlimits(req []sandbox.Rlimit, nofile, fsize uint64) []sbinit.Rlimit {
	byType := map[int]sbinit.Rlimit{}
	for _, r := range req {
		ceiling := uint64(unix.RLIM_INFINITY)
		var cur unix.Rlimit
		if unix.Getrlimit(r.Type, &cur) == nil {
			ceiling = cur.Max
		}
		switch r.Type {
		case unix.RLIMIT_CORE:
			ceiling = 0
		case unix.RLIMIT_NOFILE:
			ceiling = min(ceiling, nofile)
		case unix.RLIMIT_FSIZE:
			ceiling = min(ceiling, fsize)
		}
		hard := min(r.Hard, ceiling)
		byType[r.Type] = sbinit.Rlimit{Type: r.Type, Soft: min(r.Soft, hard), Hard: hard}
	}
	out := make([]sbinit.Rlimit, 0, len(byType))
	for _, r := range byType {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Type < out[j].Type })
	return out
}

// imageConfig adds image mode to the init's configuration and to what
// the evidence expects: identity, hostname, environment, directory, the
// root's mode and Landlock paths, tmpfs mounts and rlimits.
func (sb *linuxSandbox) imageConfig(cfg *sbinit.Config, in *evidence.Inputs) error {
	img := sb.spec.Image
	cfg.Image, cfg.RootWritable = true, img.Writable
	cfg.UID, cfg.GID = int(img.UID), int(img.GID)
	cfg.Groups = []int{}
	for _, g := range img.AdditionalGIDs {
		cfg.Groups = append(cfg.Groups, int(g))
	}
	if img.Hostname != "" {
		cfg.Hostname = img.Hostname
	}
	cfg.Env, cfg.Dir = imageEnv(sb.spec.Env), img.Dir
	if cfg.Dir == "" {
		cfg.Dir = "/"
	}
	if img.Writable {
		dirs, err := imageRootDirs(sb.rootfs.fd)
		if err != nil {
			return failure.Fail(failure.KindProvision, "rootfs directories", err)
		}
		cfg.WritablePaths = append(cfg.WritablePaths, dirs...)
		in.WritableTargets = append(in.WritableTargets, "/")
	}
	for _, t := range img.Tmpfs {
		dst := filepath.Clean(t.Target)
		if dst == "/tmp" {
			if t.Bytes > 0 {
				cfg.TmpBytes = t.Bytes // cordon's own /tmp, sized as asked
			}
			continue
		}
		cfg.Binds = append(cfg.Binds, sbinit.Bind{Target: dst, Tmpfs: true, Bytes: t.Bytes, Mode: t.Mode})
		cfg.WritablePaths = append(cfg.WritablePaths, dst)
		in.MountTargets = append(in.MountTargets, dst)
		in.WritableTargets = append(in.WritableTargets, dst)
	}
	// Parents before children: a bind under a tmpfs (or under another
	// bind) is mounted after it.
	sort.SliceStable(cfg.Binds, func(i, j int) bool {
		return strings.Count(cfg.Binds[i].Target, "/") < strings.Count(cfg.Binds[j].Target, "/")
	})
	cfg.Rlimits = clampRlimits(img.Rlimits, cfg.NoFile, cfg.FSize)
	in.UID, in.GID, in.Groups, in.Hostname = cfg.UID, cfg.GID, cfg.Groups, cfg.Hostname
	in.RootWritable, in.RootIdmapped = img.Writable, true
	in.RootOverlay = sb.rootOverlay != nil
	if cfg.UID == 0 {
		// The init's non-dumpable /proc files belong to the namespace's
		// root, which is the program's uid whatever its gid: the owner
		// cannot tell, so judge the probe instead (sbinit's
		// memprobe_linux.go; its children carry the program's ids).
		cfg.MemProbe, in.MemProbe = true, [2]string{sbinit.MemProbeControl, sbinit.MemProbeAttempt}
	}
	in.Rlimits = map[string][2]uint64{}
	for _, r := range cfg.Rlimits {
		in.Rlimits[rlimitNames[r.Type]] = [2]uint64{r.Soft, r.Hard}
	}
	return nil
}

// imageUserns makes (once) the user namespace of an image's root: host ids
// 0..size-1 are the lease's range, so a file the image's uid N owns is
// uid N inside and what uid N inside writes is stored as N.
func imageUserns(m *idmapper, leaseUID, leaseGID, size uint32) (int, error) {
	if m.rangeNS > 0 {
		return m.rangeNS, nil
	}
	fd, err := holdUserns(
		[]syscall.SysProcIDMap{{ContainerID: 0, HostID: int(leaseUID), Size: int(size)}},
		[]syscall.SysProcIDMap{{ContainerID: 0, HostID: int(leaseGID), Size: int(size)}})
	if err != nil {
		return -1, err
	}
	m.rangeNS = fd
	return fd, nil
}

// providerRlimits are the NOFILE and FSIZE limits the init sets. Lowering
// a hard limit is allowed; raising it is not (the init holds no
// capability in the host's user namespace).
func providerRlimits() (nofile, fsize uint64) {
	nofile, fsize = uint64(DefaultNoFile), uint64(DefaultFSize)
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) == nil && rl.Max < nofile {
		nofile = rl.Max
	}
	if unix.Getrlimit(unix.RLIMIT_FSIZE, &rl) == nil && rl.Max < fsize {
		fsize = rl.Max
	}
	return nofile, fsize
}
