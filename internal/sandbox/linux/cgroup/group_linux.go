package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Prefix is the directory under each hierarchy's mountpoint that holds every
// group this package creates: <mount>/cordon/<name>.
const Prefix = "cordon"

// Errors callers may test for with errors.Is.
var (
	ErrInvalidName       = errors.New("invalid cgroup name")
	ErrInvalidLimits     = errors.New("invalid limits")
	ErrMissingController = errors.New("cgroup controller not available")
	ErrNoUnified         = errors.New("no cgroup v2 group")
)

// Bounds on limits. Below minMemoryBytes a sandbox init cannot start; the
// kernel refuses a CFS quota below 1ms; the other ceilings only reject values
// that are certainly mistakes.
const (
	minMemoryBytes = 8 << 20
	maxMemoryBytes = 1 << 52 // 4 PiB
	minPids        = 8
	maxPids        = 1 << 22 // PID_MAX_LIMIT
	maxCPUs        = 1024
	cpuPeriodUs    = 100000
	minQuotaUs     = 1000
)

var nameRE = regexp.MustCompile(`^[a-z0-9-]{1,64}$`)

// Limits are the resource limits of one sandbox; a zero field is unset.
type Limits struct {
	// MemoryBytes caps memory and, where the host accounts swap, memory plus
	// swap at the same value, so the sandbox cannot escape into swap.
	MemoryBytes int64
	// Pids caps the number of tasks (processes and threads).
	Pids int64
	// CPUs is a CFS bandwidth quota in CPUs per 100ms period (0.5 = half a CPU).
	// It may exceed the host's CPU count, which then bounds it instead.
	CPUs float64
	// TCPBytes caps the socket buffers on v1 (memory.kmem.tcp, counted
	// apart from MemoryBytes); 0 means MemoryBytes. v2 has no such file:
	// socket memory counts against memory.max there.
	TCPBytes int64
}

func (lim Limits) validate() error {
	switch m := lim.MemoryBytes; {
	case m < 0:
		return fmt.Errorf("%w: memory limit %d is negative", ErrInvalidLimits, m)
	case m > 0 && m < minMemoryBytes:
		return fmt.Errorf("%w: memory limit %s is below the 8MiB minimum needed to start", ErrInvalidLimits, formatBytes(m))
	case m > maxMemoryBytes:
		return fmt.Errorf("%w: memory limit %s is above %s", ErrInvalidLimits, formatBytes(m), formatBytes(maxMemoryBytes))
	}
	if lim.TCPBytes < 0 {
		return fmt.Errorf("%w: TCP memory limit %d is negative", ErrInvalidLimits, lim.TCPBytes)
	}
	switch p := lim.Pids; {
	case p < 0:
		return fmt.Errorf("%w: pids limit %d is negative", ErrInvalidLimits, p)
	case p > 0 && p < minPids:
		return fmt.Errorf("%w: pids limit %d is below the minimum of %d", ErrInvalidLimits, p, minPids)
	case p > maxPids:
		return fmt.Errorf("%w: pids limit %d is above %d", ErrInvalidLimits, p, maxPids)
	}
	switch c := lim.CPUs; {
	case math.IsNaN(c) || math.IsInf(c, 0) || c < 0:
		return fmt.Errorf("%w: cpu limit %v is not a non-negative number", ErrInvalidLimits, c)
	case c > 0 && quotaUs(c) < minQuotaUs:
		return fmt.Errorf("%w: cpu limit %v is below the minimum of %v", ErrInvalidLimits, c, float64(minQuotaUs)/cpuPeriodUs)
	case c > maxCPUs:
		return fmt.Errorf("%w: cpu limit %v is above %d", ErrInvalidLimits, c, maxCPUs)
	}
	return nil
}

func quotaUs(cpus float64) int64 { return int64(math.Round(cpus * cpuPeriodUs)) }

func formatBytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// groupDir is one directory of a group: the group in one hierarchy.
type groupDir struct {
	mount       string
	version     int
	controllers []Controller // needed controllers this hierarchy enforces
}

// Group is one sandbox's cgroup: a directory in each hierarchy it spans.
type Group struct {
	name       string
	dirs       []groupDir
	hooks      *hooks
	noSwapAcct bool  // memory limited but the host has no swap accounting
	err        error // from Open with an invalid name
}

// plan lists the group's directories: the v2 group first (when a v2 mount
// exists it is always created, with or without controllers, for tracking and
// kill), then one per distinct v1 hierarchy in memory, pids, cpu order.
func plan(l Layout) []groupDir {
	var out []groupDir
	add := func(mount string, version int, c Controller) {
		for i := range out {
			if out[i].mount == mount {
				if c != "" {
					out[i].controllers = append(out[i].controllers, c)
				}
				return
			}
		}
		d := groupDir{mount: mount, version: version}
		if c != "" {
			d.controllers = []Controller{c}
		}
		out = append(out, d)
	}
	if l.Unified != "" {
		add(l.Unified, 2, "")
	}
	for _, c := range needed {
		if m, ok := l.Mounts[c]; ok && m.Version == 2 {
			add(m.Path, 2, c)
		}
	}
	for _, c := range needed {
		if m, ok := l.Mounts[c]; ok && m.Version != 2 {
			add(m.Path, 1, c)
		}
	}
	return out
}

func (d groupDir) path(name string) string { return filepath.Join(d.mount, Prefix, name) }

func validName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%w %q: want [a-z0-9-]{1,64}", ErrInvalidName, name)
	}
	return nil
}

// PlannedDirs lists the directories Create(l, name, …) would make, without
// touching the filesystem, so a caller can log them before creating them. It
// returns nil for an invalid name.
func PlannedDirs(l Layout, name string) []string {
	if validName(name) != nil {
		return nil
	}
	var out []string
	for _, d := range plan(l) {
		out = append(out, d.path(name))
	}
	return out
}

// Create makes the group name in every hierarchy of l and writes lim. A limit
// whose controller is missing from l is an error. On any error everything
// Create made is removed again. An existing group of the same name is an
// error: reclaim residue with Open(l, name).Remove() first.
func Create(l Layout, name string, lim Limits) (*Group, error) {
	return create(l, name, lim, nil)
}

func create(l Layout, name string, lim Limits, h *hooks) (*Group, error) {
	if err := validName(name); err != nil {
		return nil, err
	}
	if err := lim.validate(); err != nil {
		return nil, err
	}
	for _, need := range []struct {
		set bool
		c   Controller
	}{{lim.MemoryBytes > 0, Memory}, {lim.Pids > 0, Pids}, {lim.CPUs > 0, CPU}} {
		if _, ok := l.Mounts[need.c]; need.set && !ok {
			return nil, fmt.Errorf("create cgroup %s: %s limit set: %w: %s", name, need.c, ErrMissingController, need.c)
		}
	}
	g := &Group{name: name, hooks: h}
	for _, d := range plan(l) {
		if d.version == 2 && len(d.controllers) > 0 {
			if err := enableV2(d.mount, d.controllers, h); err != nil {
				g.Remove()
				return nil, fmt.Errorf("create cgroup %s: %w", name, err)
			}
		}
		if err := mkdirGroup(d.mount, name, h); err != nil {
			g.Remove()
			return nil, fmt.Errorf("create cgroup %s: %w", name, err)
		}
		g.dirs = append(g.dirs, d)
	}
	if err := g.writeLimits(l, lim); err != nil {
		g.Remove()
		return nil, fmt.Errorf("create cgroup %s: %w", name, err)
	}
	return g, nil
}

// enableV2 makes the controllers available to <mount>/cordon/* by enabling
// them in cgroup.subtree_control of <mount> and of <mount>/cordon, writing
// only those not yet enabled.
func enableV2(mount string, cs []Controller, h *hooks) error {
	pfd, err := openParent(mount, true, h)
	if err != nil {
		return err
	}
	unix.Close(pfd)
	for _, dir := range []string{mount, filepath.Join(mount, Prefix)} {
		file := filepath.Join(dir, "cgroup.subtree_control")
		b, err := readFile(file)
		if err != nil {
			return fmt.Errorf("enable controllers: %w", err)
		}
		have := map[string]bool{}
		for _, f := range strings.Fields(string(b)) {
			have[strings.TrimPrefix(f, "+")] = true
		}
		var add []string
		for _, c := range cs {
			if !have[string(c)] {
				add = append(add, "+"+string(c))
			}
		}
		if len(add) == 0 {
			continue
		}
		slices.Sort(add)
		if err := writeFile(file, strings.Join(add, " ")); err != nil {
			return fmt.Errorf("enable controllers: %w", err)
		}
	}
	return nil
}

// tcpLimitV1 bounds the TCP socket buffers of a v1 memory group.
const tcpLimitV1 = "memory.kmem.tcp.limit_in_bytes"

// TCPUsageFile is the v1 memory group's memory.kmem.tcp.usage_in_bytes,
// or false when the memory controller is on v2 (which charges socket
// memory to memory.max) or this kernel has no such file.
func (g *Group) TCPUsageFile() (string, bool) {
	d, ok := g.groupDirOf(Memory)
	if !ok || d.version != 1 {
		return "", false
	}
	f := filepath.Join(d.path(g.name), "memory.kmem.tcp.usage_in_bytes")
	if _, err := os.Stat(f); err != nil {
		return "", false
	}
	return f, true
}

// writeLimits writes the set limits into the hierarchy of each controller.
func (g *Group) writeLimits(l Layout, lim Limits) error {
	if lim.MemoryBytes > 0 {
		m := l.Mounts[Memory]
		dir := g.dirOf(Memory)
		v := strconv.FormatInt(lim.MemoryBytes, 10)
		// v1 refuses memsw.limit_in_bytes above limit_in_bytes, so the memory
		// limit goes first. Where swap is not accounted the file is absent
		// and only the memory limit holds: that is recorded, not fatal.
		limFile, swapFile, swapVal := "memory.limit_in_bytes", "memory.memsw.limit_in_bytes", v
		if m.Version == 2 {
			limFile, swapFile, swapVal = "memory.max", "memory.swap.max", "0"
		}
		if err := writeFile(filepath.Join(dir, limFile), v); err != nil {
			return err
		}
		err := writeFile(filepath.Join(dir, swapFile), swapVal)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			g.noSwapAcct = true
		case err != nil:
			return err
		}
		// v1 charges TCP socket buffers to a memory group only once its
		// TCP limit is set (v2 charges them to memory.max by default):
		// without it a sandbox limited to 64 MiB pinned 1 GiB of the
		// host's TCP memory. Bounded by TCPBytes (default the memory
		// limit), on top of the memory limit (v1 counts them apart). A
		// kernel without the file is recorded by ReadBack, not fatal here.
		if m.Version == 1 {
			tcp := v
			if lim.TCPBytes > 0 {
				tcp = strconv.FormatInt(lim.TCPBytes, 10)
			}
			if err := writeFile(filepath.Join(dir, tcpLimitV1), tcp); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	if lim.Pids > 0 {
		if err := writeFile(filepath.Join(g.dirOf(Pids), "pids.max"), strconv.FormatInt(lim.Pids, 10)); err != nil {
			return err
		}
	}
	if lim.CPUs > 0 {
		dir, q := g.dirOf(CPU), strconv.FormatInt(quotaUs(lim.CPUs), 10)
		if l.Mounts[CPU].Version == 2 {
			return writeFile(filepath.Join(dir, "cpu.max"), q+" "+strconv.Itoa(cpuPeriodUs))
		}
		if err := writeFile(filepath.Join(dir, "cpu.cfs_period_us"), strconv.Itoa(cpuPeriodUs)); err != nil {
			return err
		}
		return writeFile(filepath.Join(dir, "cpu.cfs_quota_us"), q)
	}
	return nil
}

// dirOf is the group's directory in the hierarchy that enforces c, or "".
func (g *Group) dirOf(c Controller) string {
	if d, ok := g.groupDirOf(c); ok {
		return d.path(g.name)
	}
	return ""
}

func (g *Group) groupDirOf(c Controller) (groupDir, bool) {
	for _, d := range g.dirs {
		if slices.Contains(d.controllers, c) {
			return d, true
		}
	}
	return groupDir{}, false
}

// Open returns a handle to an existing group, e.g. residue of a cordon that
// was killed, so that it can be killed and removed. Nothing is checked: a
// directory that does not exist is skipped by Kill and Remove. With an
// invalid name every method returns ErrInvalidName.
func Open(l Layout, name string) *Group {
	return open(l, name, nil)
}

func open(l Layout, name string, h *hooks) *Group {
	if err := validName(name); err != nil {
		return &Group{name: name, err: err}
	}
	return &Group{name: name, dirs: plan(l), hooks: h}
}

// Name is the group's name under <mount>/cordon/.
func (g *Group) Name() string { return g.name }

// Dirs lists every directory of the group (for Open: every one it may have).
func (g *Group) Dirs() []string {
	var out []string
	for _, d := range g.dirs {
		out = append(out, d.path(g.name))
	}
	return out
}

// UnifiedFD opens the group's v2 directory (the tracking group, which holds
// the v2 limits too on a pure v2 host) for clone3 CLONE_INTO_CGROUP, i.e.
// syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}. The caller closes fd.
// It returns -1 and ErrNoUnified when the host has no v2 mount.
func (g *Group) UnifiedFD() (int, error) {
	if g.err != nil {
		return -1, g.err
	}
	for _, d := range g.dirs {
		if d.version == 2 {
			p := d.path(g.name)
			fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
			if err != nil {
				return -1, &os.PathError{Op: "open", Path: p, Err: err}
			}
			return fd, nil
		}
	}
	return -1, fmt.Errorf("cgroup %s: %w", g.name, ErrNoUnified)
}

// AddProc moves pid (all its threads) into the group in every hierarchy, v2
// first so it is at once in the group that can kill its whole tree. A process
// already placed with UnifiedFD is simply written again: moving a process to
// the cgroup it is in is a no-op, so AddProc is idempotent.
func (g *Group) AddProc(pid int) error {
	if g.err != nil {
		return g.err
	}
	if pid <= 0 {
		return fmt.Errorf("add pid %d to cgroup %s: invalid pid", pid, g.name)
	}
	for _, d := range g.dirs {
		if err := writeFile(filepath.Join(d.path(g.name), "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			return fmt.Errorf("add pid %d to cgroup %s: %w", pid, g.name, err)
		}
	}
	return nil
}

// Remove kills everything in the group, then removes its directories with
// rmdir (retrying while the kernel reports EBUSY). Directories already gone
// are fine, so Remove is idempotent and works on residue from Open.
func (g *Group) Remove() error {
	if g.err != nil {
		return g.err
	}
	var errs []error
	if err := g.Kill(); err != nil {
		errs = append(errs, err)
	}
	for i := len(g.dirs) - 1; i >= 0; i-- {
		if err := rmdirGroup(g.dirs[i].mount, g.name, g.hooks); err != nil {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", g.name, err))
		}
	}
	return errors.Join(errs...)
}

// Residue lists, sorted, the names of groups under <mount>/cordon/ in every
// hierarchy of l. Entries that are not directories or not valid names (so not
// ours) are ignored.
func Residue(l Layout) ([]string, error) {
	seen := map[string]bool{}
	for _, d := range plan(l) {
		p := filepath.Join(d.mount, Prefix)
		ents, err := os.ReadDir(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list cgroup residue: %w", err)
		}
		for _, e := range ents {
			if e.IsDir() && validName(e.Name()) == nil {
				seen[e.Name()] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	slices.Sort(out)
	return out, nil
}
