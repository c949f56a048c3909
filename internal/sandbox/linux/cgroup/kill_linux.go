package cgroup

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// killRounds bounds Kill's sweeps; the pause between sweeps grows from 1ms
// to 10ms, so a group that will not empty is given up on after about a second.
const killRounds = 100

// Kill kills every process in the group. Where the group has a v2 directory
// it writes cgroup.kill, which kills the whole tree at once (kernel ≥ 5.14).
// Either way it then sweeps: SIGSTOP and then SIGKILL to every pid listed in
// any of the group's cgroup.procs files, repeated until they are all empty.
// A pid is only signalled through a pidfd opened before the pid was seen
// again in the group, so a pid reused by an unrelated process is never hit.
func (g *Group) Kill() error {
	if g.err != nil {
		return g.err
	}
	for _, d := range g.dirs {
		if d.version != 2 {
			continue
		}
		err := writeFile(filepath.Join(d.path(g.name), "cgroup.kill"), "1")
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("kill cgroup %s: %w", g.name, err)
		}
	}
	pause := time.Millisecond
	for round := 0; round < killRounds; round++ {
		pids, err := g.members()
		if err != nil {
			return fmt.Errorf("kill cgroup %s: %w", g.name, err)
		}
		if len(pids) == 0 {
			return nil
		}
		if err := g.signalMembers(pids, unix.SIGSTOP, unix.SIGKILL); err != nil {
			return fmt.Errorf("kill cgroup %s: %w", g.name, err)
		}
		time.Sleep(pause)
		pause = min(2*pause, 10*time.Millisecond)
	}
	pids, _ := g.members()
	return fmt.Errorf("kill cgroup %s: pids %v still present after %d rounds", g.name, pids, killRounds)
}

// Signal sends sig once to every process in the group except the pids in
// except, each only while it is still in the group after a pidfd for it
// was opened (signalMembers). Unlike Kill it makes one sweep: a process
// forked while the signals go out may miss it.
func (g *Group) Signal(sig unix.Signal, except ...int) error {
	if g.err != nil {
		return g.err
	}
	pids, err := g.members()
	if err != nil {
		return fmt.Errorf("signal cgroup %s: %w", g.name, err)
	}
	pids = slices.DeleteFunc(pids, func(p int) bool { return slices.Contains(except, p) })
	if err := g.signalMembers(pids, sig); err != nil {
		return fmt.Errorf("signal cgroup %s: %w", g.name, err)
	}
	return nil
}

// signalMembers sends sigs, in order (Kill: SIGSTOP, then SIGKILL), to each
// of pids that is still in the group after a pidfd for it was opened: a pid
// reused meanwhile by a process outside the group is not signalled.
// Stopping them all first means none can react to another's death (a shell
// exiting 0 when its child dies) or fork while the kills go out.
func (g *Group) signalMembers(pids []int, sigs ...unix.Signal) error {
	type target struct{ pid, fd int }
	var ts []target
	for _, pid := range pids {
		fd, err := unix.PidfdOpen(pid, 0)
		switch {
		case err == nil:
			ts = append(ts, target{pid, fd})
		case err == unix.ENOSYS:
			ts = append(ts, target{pid, -1}) // kernel < 5.3: kill(2) after the recheck
		}
	}
	defer func() {
		for _, t := range ts {
			if t.fd >= 0 {
				unix.Close(t.fd)
			}
		}
	}()
	again, err := g.members()
	if err != nil {
		return err
	}
	for _, sig := range sigs {
		for _, t := range ts {
			switch {
			case !slices.Contains(again, t.pid):
			case t.fd >= 0:
				unix.PidfdSendSignal(t.fd, sig, nil, 0)
			default:
				unix.Kill(t.pid, sig)
			}
		}
	}
	return nil
}

// members is the union of the pids in the group's cgroup.procs files.
// Directories that do not exist are skipped. The calling process is never
// a member here: the trusted side's spawning thread may sit in a v1 group
// (see linux.spawn), which lists the whole process in cgroup.procs, and
// Kill must not stop or kill its own caller.
func (g *Group) members() ([]int, error) {
	self := os.Getpid()
	var out []int
	for _, d := range g.dirs {
		b, err := readFile(filepath.Join(d.path(g.name), "cgroup.procs"))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, f := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(f)
			if err != nil || pid <= 0 || pid == self {
				continue // 0: a process outside our pid namespace
			}
			if !slices.Contains(out, pid) {
				out = append(out, pid)
			}
		}
	}
	return out, nil
}

// OOMKills is how many processes the kernel's OOM killer has killed in the
// group: "oom_kill N" in memory.oom_control (v1) or memory.events (v2).
func (g *Group) OOMKills() (int64, error) {
	if g.err != nil {
		return 0, g.err
	}
	d, ok := g.groupDirOf(Memory)
	if !ok {
		return 0, fmt.Errorf("oom kills of cgroup %s: %w: %s", g.name, ErrMissingController, Memory)
	}
	file := "memory.oom_control"
	if d.version == 2 {
		file = "memory.events"
	}
	p := filepath.Join(d.path(g.name), file)
	b, err := readFile(p)
	if err != nil {
		return 0, fmt.Errorf("oom kills of cgroup %s: %w", g.name, err)
	}
	n, ok := keyedValue(b, "oom_kill")
	if !ok {
		return 0, fmt.Errorf("oom kills of cgroup %s: no oom_kill in %s", g.name, p)
	}
	return n, nil
}

// keyedValue finds "key N" in a flat-keyed cgroup file.
func keyedValue(b []byte, key string) (int64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == key {
			n, err := strconv.ParseInt(f[1], 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// Facts are the limits in force as read back from the group's files. A
// limit that is not in force reads -1 (unlimited); a controller the group
// does not have reads 0.
type Facts struct {
	MemoryBytes int64 // memory.limit_in_bytes (v1) or memory.max (v2)
	// MemswBytes is the memory+swap limit: memory.memsw.limit_in_bytes (v1)
	// or memory.max + memory.swap.max (v2). Equal to MemoryBytes means the
	// sandbox cannot use swap; 0 with NoSwapAccounting means the host does
	// not account swap, so nothing but the host's own swap size bounds it.
	MemswBytes       int64
	NoSwapAccounting bool
	// TCPMemBytes bounds the group's TCP socket buffers: v1's
	// memory.kmem.tcp.limit_in_bytes (0 when this kernel lacks it), or
	// on v2 memory.max, which charges socket memory by default.
	TCPMemBytes int64
	Pids        int64 // pids.max
	CPUQuotaUs  int64 // cpu.cfs_quota_us (v1) or cpu.max (v2)
	CPUPeriodUs int64 // cpu.cfs_period_us (v1) or cpu.max (v2)
	// Versions is the cgroup version each controller's limit came from.
	Versions map[Controller]int
	// Files names the file each fact above was read from, by field name.
	Files map[string]string
	// Dirs are the group's directories.
	Dirs []string
}

// unlimitedFloor: v1 reports "no limit" as PAGE_COUNTER_MAX pages in bytes
// (9223372036854771712 with 4KiB pages); anything this large is unlimited.
const unlimitedFloor = 1 << 62

func parseLimit(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "max" || s == "-1" {
		return -1, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse limit %q: %w", s, err)
	}
	if n >= unlimitedFloor {
		return -1, nil
	}
	return n, nil
}

// ReadBack reads the group's limits back from its files.
func (g *Group) ReadBack() (Facts, error) {
	if g.err != nil {
		return Facts{}, g.err
	}
	f := Facts{Versions: map[Controller]int{}, Files: map[string]string{}, Dirs: g.Dirs()}
	read := func(field, dir, file string) (string, error) {
		p := filepath.Join(dir, file)
		b, err := readFile(p)
		if err != nil {
			return "", fmt.Errorf("read back cgroup %s: %w", g.name, err)
		}
		f.Files[field] = p
		return strings.TrimSpace(string(b)), nil
	}
	limit := func(field, dir, file string, dst *int64) error {
		s, err := read(field, dir, file)
		if err == nil {
			*dst, err = parseLimit(s)
		}
		return err
	}

	if d, ok := g.groupDirOf(Memory); ok {
		dir := d.path(g.name)
		f.Versions[Memory] = d.version
		limFile, swapFile := "memory.limit_in_bytes", "memory.memsw.limit_in_bytes"
		if d.version == 2 {
			limFile, swapFile = "memory.max", "memory.swap.max"
		}
		if err := limit("MemoryBytes", dir, limFile, &f.MemoryBytes); err != nil {
			return f, err
		}
		var swap int64
		err := limit("MemswBytes", dir, swapFile, &swap)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			f.NoSwapAccounting = true
		case err != nil:
			return f, err
		case d.version == 1:
			f.MemswBytes = swap
		case swap < 0 || f.MemoryBytes < 0:
			f.MemswBytes = -1
		default:
			f.MemswBytes = f.MemoryBytes + swap
		}
		if d.version == 2 {
			f.TCPMemBytes = f.MemoryBytes
			f.Files["TCPMemBytes"] = f.Files["MemoryBytes"]
		} else if err := limit("TCPMemBytes", dir, tcpLimitV1, &f.TCPMemBytes); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return f, err
		}
	}
	if d, ok := g.groupDirOf(Pids); ok {
		f.Versions[Pids] = d.version
		if err := limit("Pids", d.path(g.name), "pids.max", &f.Pids); err != nil {
			return f, err
		}
	}
	if d, ok := g.groupDirOf(CPU); ok {
		dir := d.path(g.name)
		f.Versions[CPU] = d.version
		if d.version == 2 {
			s, err := read("CPUQuotaUs", dir, "cpu.max")
			if err != nil {
				return f, err
			}
			f.Files["CPUPeriodUs"] = f.Files["CPUQuotaUs"]
			q, p, ok := strings.Cut(s, " ")
			if !ok {
				return f, fmt.Errorf("read back cgroup %s: malformed cpu.max %q", g.name, s)
			}
			if f.CPUQuotaUs, err = parseLimit(q); err != nil {
				return f, err
			}
			if f.CPUPeriodUs, err = parseLimit(p); err != nil {
				return f, err
			}
		} else {
			if err := limit("CPUQuotaUs", dir, "cpu.cfs_quota_us", &f.CPUQuotaUs); err != nil {
				return f, err
			}
			if err := limit("CPUPeriodUs", dir, "cpu.cfs_period_us", &f.CPUPeriodUs); err != nil {
				return f, err
			}
		}
	}
	return f, nil
}

// NoSwapAccounting reports that Create set a memory limit on a host that
// does not account swap, so swap use is not capped by the group.
func (g *Group) NoSwapAccounting() bool { return g.noSwapAcct }
