package oci

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/cordon-project/cordon/internal/sandbox"
)

// ownMounts are the destinations cordon always builds itself: the
// bundle's mount there is replaced by cordon's own (a fresh /proc, a
// minimal /dev with a private devpts and /dev/shm).
var ownMounts = map[string][]string{
	"/proc":          {"proc"},
	"/dev":           {"tmpfs"},
	"/dev/pts":       {"devpts"},
	"/dev/shm":       {"tmpfs", "bind", "none"},
	"/dev/mqueue":    {"mqueue"},
	"/sys":           {"sysfs"},
	"/sys/fs/cgroup": {"cgroup", "cgroup2"},
}

// engineFiles are files an engine binds from its own per-container
// directory; cordon binds them read-only (the sandbox writes no host
// file owned by root).
var engineFiles = []string{"/etc/hosts", "/etc/hostname", "/etc/resolv.conf"}

// skipped are destinations an orchestrator binds that cordon leaves out,
// recorded (kubelet's termination log would be a writable host file under
// /dev, which is cordon's own).
var skipped = []string{"/dev/termination-log"}

func mapMounts(ms []specs.Mount, m *Mapped, volumeRoots []string) error {
	for i, mt := range ms {
		field := fmt.Sprintf("mounts[%d] (%s)", i, clip(mt.Destination))
		dst := filepath.Clean(mt.Destination)
		if !filepath.IsAbs(mt.Destination) {
			return malformed(field, "destination is not an absolute path")
		}
		ro := readOnly(mt.Options)
		bind := mt.Type == "bind" || slices.Contains(mt.Options, "bind") || slices.Contains(mt.Options, "rbind")
		if types, ok := ownMounts[dst]; ok && (slices.Contains(types, mt.Type) || bind) {
			if (mt.Type == "sysfs" || strings.HasPrefix(mt.Type, "cgroup")) && !ro {
				return refuse(field, "a writable %s is refused", mt.Type)
			}
			if dst != "/proc" && dst != "/dev" && dst != "/dev/pts" && dst != "/dev/shm" {
				m.NotHonoured = append(m.NotHonoured, field+": not mounted (cordon gives no "+dst+")")
			}
			continue
		}
		if slices.Contains(mt.Options, "noexec") && (bind || mt.Type == "tmpfs") {
			m.NotHonoured = append(m.NotHonoured, field+": noexec not applied (cordon's own layers decide what runs)")
		}
		switch {
		case slices.Contains(skipped, dst):
			m.NotHonoured = append(m.NotHonoured, field+": not mounted")
		case bind:
			if err := mapBind(mt, dst, ro, field, m, volumeRoots); err != nil {
				return err
			}
		case mt.Type == "tmpfs":
			t, err := tmpfsOf(mt, dst, field)
			if err != nil {
				return err
			}
			if ro {
				m.NotHonoured = append(m.NotHonoured, field+": read-only not applied (a writable scratch tmpfs of the sandbox's own)")
			}
			m.Spec.Image.Tmpfs = append(m.Spec.Image.Tmpfs, t)
		case mt.Type == "sysfs" || mt.Type == "proc" || strings.HasPrefix(mt.Type, "cgroup") || mt.Type == "devpts" || mt.Type == "mqueue":
			return refuse(field, "a %s mount there is refused (cordon mounts its own at its own place only)", mt.Type)
		default:
			return refuse(field, "mount type %q is not supported (bind and tmpfs are)", clip(mt.Type))
		}
	}
	return nil
}

// readOnly reports whether mount options ask for read-only: "ro", or
// "rro" (recursive read-only: runc's, containerd's for Kubernetes'
// recursiveReadOnly). cordon's binds are never recursive, so both mean
// the one mount read-only; a later "rw" never widens it.
func readOnly(opts []string) bool {
	return slices.Contains(opts, "ro") || slices.Contains(opts, "rro")
}

func mapBind(mt specs.Mount, dst string, ro bool, field string, m *Mapped, volumeRoots []string) error {
	if !filepath.IsAbs(mt.Source) {
		return malformed(field, "bind source %q is not an absolute path", clip(mt.Source))
	}
	for _, bad := range []string{"/proc", "/sys", "/dev"} {
		if dst == bad || strings.HasPrefix(dst, bad+"/") {
			return refuse(field, "a bind under %s is refused", bad)
		}
	}
	if dst == "/" {
		return refuse(field, "a bind over the root is refused")
	}
	if slices.Contains(engineFiles, dst) && !ro {
		ro = true
		m.NotHonoured = append(m.NotHonoured, field+": bound read-only")
	}
	for _, o := range mt.Options {
		switch o {
		case "rshared", "shared", "rslave", "slave", "runbindable", "unbindable":
			m.NotHonoured = append(m.NotHonoured, field+": propagation "+o+" not applied (cordon's binds are private)")
		}
	}
	src := filepath.Clean(mt.Source)
	// An engine's volume (under a root the host operator declared) holds
	// the image's ids: the provider maps it as the image's root. The
	// provider opens the path without following a symlink, so what is
	// bound is below the root as written.
	// The longest root wins: it may be a mount of its own.
	root := ""
	for _, r := range volumeRoots {
		if strings.HasPrefix(src, r+"/") && len(r) > len(root) {
			root = r
		}
	}
	m.Spec.Binds = append(m.Spec.Binds, sandbox.Bind{Source: src, Target: dst, Writable: !ro, ImageIDs: root != "", VolumeRoot: root})
	return nil
}

func tmpfsOf(mt specs.Mount, dst, field string) (sandbox.Tmpfs, error) {
	t := sandbox.Tmpfs{Target: dst}
	for _, o := range mt.Options {
		k, v, _ := strings.Cut(o, "=")
		switch k {
		case "size":
			n, err := parseTmpfsSize(v)
			if err != nil {
				return t, malformed(field, "size %q: %v", clip(v), err)
			}
			t.Bytes = n
		case "mode":
			n, err := strconv.ParseUint(v, 8, 32)
			if err != nil || n > 0o7777 {
				return t, malformed(field, "mode %q is not an octal mode", clip(v))
			}
			t.Mode = uint32(n)
		}
	}
	return t, nil
}

// parseTmpfsSize reads tmpfs's size= (bytes, or with k, m, g).
func parseTmpfsSize(v string) (int64, error) {
	mul := int64(1)
	switch {
	case strings.HasSuffix(v, "k"), strings.HasSuffix(v, "K"):
		mul, v = 1<<10, v[:len(v)-1]
	case strings.HasSuffix(v, "m"), strings.HasSuffix(v, "M"):
		mul, v = 1<<20, v[:len(v)-1]
	case strings.HasSuffix(v, "g"), strings.HasSuffix(v, "G"):
		mul, v = 1<<30, v[:len(v)-1]
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > (1<<50)/mul {
		return 0, fmt.Errorf("not a size")
	}
	return n * mul, nil
}

func mapHooks(h *specs.Hooks, m *Mapped) error {
	if h == nil {
		return nil
	}
	n := len(h.Prestart) + len(h.CreateRuntime) + len(h.CreateContainer) + len(h.StartContainer) + len(h.Poststart) + len(h.Poststop)
	if n > 0 {
		// Docker's libnetwork-setkey prestart hook would configure the
		// engine's network in the container's namespace: engine
		// networking is not accepted, so no hook runs.
		m.NotHonoured = append(m.NotHonoured, fmt.Sprintf("hooks: %d hook(s) not run (engine networking and host-side hooks are not accepted)", n))
	}
	return nil
}
