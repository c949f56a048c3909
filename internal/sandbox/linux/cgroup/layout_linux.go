package cgroup

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Controller names a cgroup controller as the kernel spells it.
type Controller string

// The controllers a sandbox needs, in the order they are reported.
const (
	Memory Controller = "memory"
	Pids   Controller = "pids"
	CPU    Controller = "cpu"
)

// needed lists the controllers Detect looks for and Missing reports on.
var needed = []Controller{Memory, Pids, CPU}

// Mount says where one controller lives.
type Mount struct {
	Controller Controller
	Version    int    // 1 or 2
	Path       string // mountpoint of the hierarchy that has the controller
}

// Layout is where the controllers a sandbox needs live on this host.
type Layout struct {
	// Mounts has one entry per needed controller that is mounted and enabled.
	Mounts map[Controller]Mount
	// Unified is the cgroup2 mountpoint, or "" if there is none. It is used
	// for the tracking group (cgroup.kill, cgroup.events, CLONE_INTO_CGROUP)
	// even when it holds none of the needed controllers.
	Unified string
}

// Missing reports which of memory, pids and cpu are unavailable.
func (l Layout) Missing() []Controller {
	var out []Controller
	for _, c := range needed {
		if _, ok := l.Mounts[c]; !ok {
			out = append(out, c)
		}
	}
	return out
}

// Detect reads /proc/self/mountinfo and /proc/cgroups. Where /proc/cgroups is
// absent (kernels built without v1), the v2 mount's cgroup.controllers decides.
// A host with no cgroup mounts gives an empty Layout and no error: the caller
// decides from Missing whether it can run.
func Detect() (Layout, error) {
	mi, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return Layout{}, fmt.Errorf("detect cgroups: %w", err)
	}
	defer mi.Close()
	var pc io.Reader
	if f, err := os.Open("/proc/cgroups"); err == nil {
		defer f.Close()
		pc = f
	} else if !errors.Is(err, fs.ErrNotExist) {
		return Layout{}, fmt.Errorf("detect cgroups: %w", err)
	}
	return detect(mi, pc, readV2Controllers)
}

// DetectFrom is Detect on given contents of /proc/self/mountinfo and
// /proc/cgroups (which may be nil). Without access to the v2 mount's
// cgroup.controllers, a controller counts as v2 when /proc/cgroups puts it in
// hierarchy 0 and a cgroup2 mount exists.
func DetectFrom(mountinfo, procCgroups io.Reader) (Layout, error) {
	return detect(mountinfo, procCgroups, nil)
}

func readV2Controllers(mountpoint string) (map[string]bool, error) {
	b, err := readFile(filepath.Join(mountpoint, "cgroup.controllers"))
	if err != nil {
		return nil, err
	}
	set := map[string]bool{}
	for _, c := range strings.Fields(string(b)) {
		set[c] = true
	}
	return set, nil
}

type procCgroupsEntry struct {
	hierarchy int
	enabled   bool
}

type mountEntry struct {
	root, point string
	fstype      string
	superOpts   []string
}

func detect(mountinfo, procCgroups io.Reader, v2Controllers func(string) (map[string]bool, error)) (Layout, error) {
	var subsys map[string]procCgroupsEntry
	if procCgroups != nil {
		var err error
		if subsys, err = parseProcCgroups(procCgroups); err != nil {
			return Layout{}, err
		}
		if len(subsys) == 0 {
			subsys = nil // an empty list tells nothing
		}
	}
	mounts, err := parseMountinfo(mountinfo)
	if err != nil {
		return Layout{}, err
	}

	l := Layout{Mounts: map[Controller]Mount{}}
	var unifiedRootSlash bool
	v1 := map[Controller]mountEntry{}
	for _, m := range mounts {
		switch m.fstype {
		case "cgroup2":
			// Prefer a mount of the whole hierarchy over a bind of a subtree.
			if l.Unified == "" || (!unifiedRootSlash && m.root == "/") {
				l.Unified, unifiedRootSlash = m.point, m.root == "/"
			}
		case "cgroup":
			for _, o := range m.superOpts {
				c := Controller(o)
				if prev, ok := v1[c]; !ok || (prev.root != "/" && m.root == "/") {
					v1[c] = m
				}
			}
		}
	}

	var v2set map[string]bool
	if l.Unified != "" && v2Controllers != nil {
		if v2set, err = v2Controllers(l.Unified); err != nil {
			return Layout{}, fmt.Errorf("detect cgroups: %w", err)
		}
	}
	for _, c := range needed {
		e, listed := subsys[string(c)]
		if listed && !e.enabled {
			continue // disabled on the kernel command line (cgroup_disable=)
		}
		if m, ok := v1[c]; ok {
			l.Mounts[c] = Mount{Controller: c, Version: 1, Path: m.point}
			continue
		}
		if l.Unified == "" || (listed && e.hierarchy != 0) {
			continue // bound to a v1 hierarchy that is not mounted here
		}
		switch {
		case v2set != nil:
			if !v2set[string(c)] {
				continue
			}
		case subsys != nil:
			if !listed {
				continue
			}
		}
		l.Mounts[c] = Mount{Controller: c, Version: 2, Path: l.Unified}
	}
	return l, nil
}

// parseProcCgroups reads "#subsys_name hierarchy num_cgroups enabled" lines.
func parseProcCgroups(r io.Reader) (map[string]procCgroupsEntry, error) {
	out := map[string]procCgroupsEntry{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 4 {
			continue
		}
		h, err1 := strconv.Atoi(f[1])
		en, err2 := strconv.Atoi(f[3])
		if err1 != nil || err2 != nil {
			continue
		}
		out[f[0]] = procCgroupsEntry{hierarchy: h, enabled: en != 0}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read /proc/cgroups: %w", err)
	}
	return out, nil
}

// parseMountinfo returns the cgroup and cgroup2 mounts in mountinfo(5) format:
// id parent maj:min root mountpoint options [optional...] - fstype source superoptions
// Lines that do not parse, and mountpoints that are not absolute, are skipped.
func parseMountinfo(r io.Reader) ([]mountEntry, error) {
	var out []mountEntry
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		sep := -1
		for i := 6; i < len(f); i++ {
			if f[i] == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+1 >= len(f) {
			continue
		}
		fstype := f[sep+1]
		if fstype != "cgroup" && fstype != "cgroup2" {
			continue
		}
		point := UnescapeMountinfo(f[4])
		if !filepath.IsAbs(point) {
			continue
		}
		m := mountEntry{root: UnescapeMountinfo(f[3]), point: filepath.Clean(point), fstype: fstype}
		if sep+3 < len(f) {
			m.superOpts = strings.Split(f[sep+3], ",")
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	return out, nil
}

// UnescapeMountinfo undoes the kernel's octal escaping of space, tab, newline
// and backslash (\040, \011, \012, \134).
func UnescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ProcCgroups parses /proc/PID/cgroup into controller -> path. v1 lines give
// one key per controller ("cpu" and "cpuacct" for "cpu,cpuacct") or the named
// hierarchy ("name=systemd"); the v2 line has the key "". Paths are relative
// to the hierarchy root as seen from the reader's cgroup namespace.
func ProcCgroups(pid int) (map[string]string, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return nil, fmt.Errorf("read cgroups of pid %d: %w", pid, err)
	}
	defer f.Close()
	m, err := parseProcCgroup(f)
	if err != nil {
		return nil, fmt.Errorf("read cgroups of pid %d: %w", pid, err)
	}
	return m, nil
}

func parseProcCgroup(r io.Reader) (map[string]string, error) {
	out := map[string]string{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			return nil, fmt.Errorf("malformed line %q", line)
		}
		if f[1] == "" {
			out[""] = f[2]
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			out[c] = f[2]
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}
