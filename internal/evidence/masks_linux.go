package evidence

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// MaskedPath is a path of the sandbox's /proc that must not show the
// host's content. Kind is how: "null" (the sandbox's /dev/null bound
// read-only over a file), "empty" (an empty read-only tmpfs over a
// directory) or "ro" (the path bound read-only over itself).
type MaskedPath struct {
	Path string
	Kind string
}

// Mask kinds (the values of sbinit.MaskKind).
const (
	MaskNull     = "null"
	MaskEmpty    = "empty"
	MaskReadOnly = "ro"
)

// statFunc stats a path inside the sandbox's root without following any
// symlink, as the program would reach it.
type statFunc func(path string) (unix.Stat_t, error)

// sandboxStat resolves paths in the live sandbox's root (through
// /proc/PID/root, so in its mount namespace, with its masks), never
// following a symlink.
func sandboxStat(proc string) statFunc {
	return func(p string) (unix.Stat_t, error) {
		var st unix.Stat_t
		root, err := unix.Open(proc+"/root", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return st, err
		}
		defer unix.Close(root)
		fd, err := unix.Openat2(root, strings.TrimPrefix(p, "/"), &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC | unix.O_NOFOLLOW,
			Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
		if err != nil {
			return st, err
		}
		defer unix.Close(fd)
		err = unix.Fstat(fd, &st)
		return st, err
	}
}

// maskChecks judges each masked path by the mount the program reaches at
// it: the topmost mount along the path, computed from the sandbox's
// mountinfo (a mask that a later mount covers does not count). A path
// with no mask of its own passes only if the program cannot reach it at
// all (absent from this kernel's /proc).
func maskChecks(source string, ms []mountEntry, masks []MaskedPath, stat statFunc) []Check {
	// runc masks /sys/firmware and /sys/devices/virtual/powercap; the
	// sandbox mounts no sysfs at all.
	var sysfs []string
	for _, m := range ms {
		if m.fstype == "sysfs" {
			sysfs = append(sysfs, m.target)
		}
	}
	out := []Check{{Name: "no_sysfs", Want: "no sysfs mounted", Got: fmt.Sprintf("sysfs at %v", sysfs), OK: len(sysfs) == 0, Source: source}}
	for _, mp := range masks {
		c := Check{Name: "mask:" + mp.Path, Source: source}
		c.Want, c.Got, c.OK = judgeMask(ms, mp, stat)
		out = append(out, c)
	}
	return out
}

func judgeMask(ms []mountEntry, mp MaskedPath, stat statFunc) (want, got string, ok bool) {
	switch mp.Kind {
	case MaskNull:
		want = "the sandbox's /dev/null bound read-only over it, or absent"
	case MaskEmpty:
		want = "an empty read-only tmpfs over it, or absent"
	case MaskReadOnly:
		want = "itself bound read-only from the sandbox's /proc, or absent"
	default:
		return "a known mask kind", fmt.Sprintf("unknown kind %q", mp.Kind), false
	}
	m, found := visibleMount(ms, mp.Path)
	if !found {
		return want, "no mount tree to resolve the path in", false
	}
	if m.target != mp.Path {
		// No mask of its own: acceptable only if the program cannot
		// reach the path.
		_, err := stat(mp.Path)
		switch {
		case errors.Is(err, unix.ENOENT):
			return want, "absent", true
		case err != nil:
			return want, fmt.Sprintf("not masked (under %s %s); stat: %v", m.target, m.fstype, err), false
		}
		return want, fmt.Sprintf("not masked: reachable under the %s mount at %s", m.fstype, m.target), false
	}
	got = fmt.Sprintf("%s %s %s %s", m.fstype, m.dev, m.root, m.opts)
	if m.fstype == "tmpfs" {
		got += " (superblock " + m.superOpts + ")"
	}
	if !hasOpt(m.opts, "ro") {
		return want, got + ": not read-only", false
	}
	switch mp.Kind {
	case MaskNull:
		null, ok := visibleMount(ms, "/dev/null")
		if !ok || null.target != "/dev/null" {
			return want, got + ": the sandbox has no /dev/null mount to compare with", false
		}
		if m.dev != null.dev || m.root != null.root {
			return want, got + fmt.Sprintf(": not the sandbox's /dev/null (%s %s)", null.dev, null.root), false
		}
		// Observed through the sandbox's root as well: the character
		// device 1:3.
		st, err := stat(mp.Path)
		if err != nil {
			return want, got + fmt.Sprintf(": stat: %v", err), false
		}
		if st.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(st.Rdev) != 1 || unix.Minor(st.Rdev) != 3 {
			return want, got + fmt.Sprintf(": stat shows mode %#o rdev %d:%d, not /dev/null", st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev)), false
		}
		return want, got, true
	case MaskEmpty:
		// A tmpfs whose superblock is read-only was never writable:
		// the init mounts it read-only, empty.
		if m.fstype != "tmpfs" || !hasOpt(m.superOpts, "ro") {
			return want, got + ": not a read-only tmpfs", false
		}
		return want, got, true
	default: // MaskReadOnly
		proc, ok := visibleMount(ms, "/proc")
		rel, under := strings.CutPrefix(mp.Path, "/proc/")
		if !ok || proc.target != "/proc" || proc.fstype != "proc" || !under {
			return want, got + ": not under the sandbox's own /proc", false
		}
		if m.fstype != "proc" || m.dev != proc.dev || m.root != "/"+rel {
			return want, got + fmt.Sprintf(": not %s of the sandbox's /proc (%s)", "/"+rel, proc.dev), false
		}
		return want, got, true
	}
}

// visibleMount returns the mount a path walk from the root reaches at
// path: starting at the root mount, it follows mounts stacked on the
// current mount's root first (they hide it), else the shallowest mount
// point along the path, until no mount of the current one lies on the
// path. Mount points are compared as strings (mountinfo's view of the
// sandbox root); path must be clean and absolute. It fails when mountinfo
// has no root mount, or its parent links loop.
func visibleMount(ms []mountEntry, path string) (mountEntry, bool) {
	ids := make(map[int]bool, len(ms))
	for _, m := range ms {
		ids[m.id] = true
	}
	cur := -1
	for i, m := range ms {
		if m.target == "/" && (!ids[m.parent] || m.parent == m.id) {
			cur = i
			break
		}
	}
	if cur < 0 {
		return mountEntry{}, false
	}
	for range len(ms) + 1 {
		next := -1
		for i, m := range ms {
			if i != cur && m.parent == ms[cur].id && m.id != ms[cur].id && m.target == ms[cur].target {
				next = i // stacked on the current mount's root; the latest is on top
			}
		}
		if next < 0 {
			for i, m := range ms {
				if i == cur || m.parent != ms[cur].id || m.id == ms[cur].id || m.target == ms[cur].target ||
					!onPath(m.target, ms[cur].target) || !onPath(path, m.target) {
					continue
				}
				if next < 0 || len(m.target) <= len(ms[next].target) {
					next = i
				}
			}
		}
		if next < 0 {
			return ms[cur], true
		}
		cur = next
	}
	return mountEntry{}, false
}

// onPath reports whether mount point t is path or one of its ancestors.
func onPath(path, t string) bool {
	return t == "/" || path == t || strings.HasPrefix(path, t+"/")
}
