package e2e

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/cordon-project/cordon/internal/testkit"
	"golang.org/x/sys/unix"
)

// Host-wide kernel pools (docs/host-pools.md): one sandbox takes all it
// can of a pool and holds it; from outside, the test counts what it took
// and checks that a host root process and a second sandbox still get
// theirs.

// perSandboxInotify is max_inotify_instances in the sandbox's user
// namespace (internal/sandbox/linux userNSLimits): below the host's
// per-user 128, so the bound the program meets is its own.
const perSandboxInotify = 64

// sandboxMaxPtys is sbinit.MaxPtys, the devpts instance's max=.
const sandboxMaxPtys = 64

// countFDs counts pid's descriptors whose target contains what.
func countFDs(t *testing.T, pid int, what string) int {
	t.Helper()
	n := 0
	for _, l := range fdTargets(t, pid) {
		if strings.Contains(l, what) {
			n++
		}
	}
	return n
}

// nsOwner is the host uid owning pid's user namespace (NS_GET_OWNER_UID).
func nsOwner(t *testing.T, pid int) int {
	t.Helper()
	fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/user", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	var uid uint32
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), 0xb704, uintptr(unsafe.Pointer(&uid))); e != 0 {
		t.Fatalf("NS_GET_OWNER_UID on pid %d: %v", pid, e)
	}
	return int(uid)
}

// TestHostPoolInotify: inotify instances are charged up the user
// namespace chain to the namespace's owner. The sandbox's namespace is
// owned by its lease, so a sandbox that takes every instance it can stops
// at its own per-namespace limit, while host root (whose 128 a sandbox
// once took whole) and a second sandbox still create theirs.
func TestHostPoolInotify(t *testing.T) {
	testkit.RequireRoot(t)
	t.Parallel()
	st := newStateDir(t)
	h := startHeld(t, cordonBin, st, probeArgs([]string{"--json"}, "hold", "inotify", "100000")...)
	if h.Probe.OK || h.Probe.Errno != "EMFILE" {
		t.Fatalf("inotify instances until refused: probe %+v, want EMFILE", h.Probe)
	}
	initPid, prog := h.pids()
	// From outside: what the program holds, and who is charged for it.
	if n := countFDs(t, prog, "anon_inode:inotify"); n != perSandboxInotify {
		t.Errorf("the sandboxed program holds %d inotify instances (host /proc/%d/fd), want exactly the per-namespace limit %d", n, prog, perSandboxInotify)
	}
	progUID, _ := strconv.Atoi(hostUID(t, prog))
	lease := progUID - 1000 // the program is uid 1000 inside, the lease's base is 0
	if o := nsOwner(t, initPid); o != lease || o == 0 {
		t.Errorf("owner of the sandbox's user namespace = %d, want its lease %d (program host uid %d)", o, lease, progUID)
	}
	// Host root still creates instances while the sandbox holds its own.
	var fds []int
	for range 8 {
		fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
		if err != nil {
			t.Errorf("host root inotify_init1 while a sandbox holds %d instances: %v", perSandboxInotify, err)
			break
		}
		fds = append(fds, fd)
	}
	for _, fd := range fds {
		unix.Close(fd)
	}
	// So does a second sandbox (another lease).
	r := runCordon(t, st, runOpts{}, probeArgs(nil, "inotify", "16")...)
	if r.Code != 0 || !r.Probe.OK || r.Probe.Data != "instances=16" {
		t.Errorf("second sandbox: 16 inotify instances = %d, probe %+v; want all 16\nstderr: %s", r.Code, r.Probe, r.Stderr)
	}
	if fr := h.finish(); fr.Code != 0 {
		t.Errorf("held sandbox exit %d\nstderr: %s", fr.Code, fr.Stderr)
	}

	// Control 1: without the per-namespace limit (test build) the program
	// takes exactly the host's per-user limit, charged to its lease: host
	// root still creates instances. So 64 above was the namespace's limit,
	// and the host-level charge is the lease's, not root's.
	hostMax := int(readInt(t, "/proc/sys/user/max_inotify_instances"))
	c := startHeld(t, hooksBin, st, probeArgs(withoutLayer("userns-limits", append([]string{"--json"}, lowerLevel...)), "hold", "inotify", "100000")...)
	_, cprog := c.pids()
	if n := countFDs(t, cprog, "anon_inode:inotify"); c.Probe.Errno != "EMFILE" || n != hostMax {
		t.Errorf("control without the namespace limit: probe %+v, %d instances held; want EMFILE at the host's per-user %d", c.Probe, n, hostMax)
	}
	if fd, err := unix.InotifyInit1(unix.IN_CLOEXEC); err != nil {
		t.Errorf("host root inotify_init1 while a sandbox holds its lease's %d instances: %v", hostMax, err)
	} else {
		unix.Close(fd)
	}
	c.finish()

	// Control 2: created the old way (test build: host root owns the
	// namespace), the owner read from outside is root and the evidence
	// refuses the credential boundary.
	ev := filepath.Join(t.TempDir(), "ev.json")
	o := startHeld(t, hooksBin, st, probeArgs(withoutLayer("userns-owner", []string{"--json", "--level", "SHARED", "--evidence", ev}), "hold", "inotify", "1")...)
	oinit, _ := o.pids()
	if got := nsOwner(t, oinit); got != 0 {
		t.Errorf("control with a root-owned namespace: owner read from outside = %d, want 0 (the check must be able to see root)", got)
	}
	o.finish()
	t.Logf("control 1: probe %s (host per-user limit %d); control 2: owner of a root-made namespace read as 0", c.Probe.Data, hostMax)
	rec := readEvidenceFile(t, ev)
	for _, f := range rec.facts(t, "credential") {
		if f.Name == "user_namespace_owner" && (f.OK || f.Got != "0") {
			t.Errorf("control with a root-owned namespace: evidence %+v, want got 0 and not ok", f)
		}
	}
	if rec.EnforcementMode == "VERIFIED" {
		t.Errorf("control with a root-owned namespace: enforcement %s, want UNVERIFIED", rec.EnforcementMode)
	}
	requireNoResidue(t, st)
}

// TestHostPoolAIO: fs.aio-max-nr is one pool for the whole host; io_setup
// fails with ENOSYS in a sandbox, while a host process reserves events at
// the same time. Positive control: without the seccomp layer (test build)
// the same io_setup inside succeeds and the host's aio-nr rises.
func TestHostPoolAIO(t *testing.T) {
	testkit.RequireRoot(t)
	t.Parallel()
	st := newStateDir(t)
	h := startHeld(t, cordonBin, st, probeArgs([]string{"--json"}, "hold", "aio", "4096")...)
	if h.Probe.OK || h.Probe.Errno != "ENOSYS" {
		t.Errorf("io_setup(4096) in a sandbox: probe %+v, want ENOSYS", h.Probe)
	}
	if p := hostProbe(t, nil, "aio", "1024"); !p.OK {
		t.Errorf("host io_setup(1024) while a sandbox tried: %+v, want ok", p)
	}
	h.finish()

	before := readInt(t, "/proc/sys/fs/aio-nr")
	c := startHeld(t, hooksBin, st, probeArgs(withoutLayer("seccomp", append([]string{"--json"}, lowerLevel...)), "hold", "aio", "4096")...)
	during := readInt(t, "/proc/sys/fs/aio-nr")
	if !c.Probe.OK || during < before+4096 {
		t.Errorf("control without seccomp: io_setup(4096) inside = %+v, host aio-nr %d -> %d; want ok and a rise of at least 4096", c.Probe, before, during)
	}
	c.finish()
	requireNoResidue(t, st)
}

// TestHostPoolPty: kernel.pty.max counts the ptys of every devpts
// instance on the host. A sandbox's private instance holds at most
// sandboxMaxPtys; while one sandbox holds all of them, the host and a
// second sandbox still open ptys. Positive control: the host's
// kernel.pty.nr shows the sandbox's ptys.
func TestHostPoolPty(t *testing.T) {
	testkit.RequireRoot(t)
	t.Parallel()
	st := newStateDir(t)
	before := readInt(t, "/proc/sys/kernel/pty/nr")
	ev := filepath.Join(t.TempDir(), "ev.json")
	h := startHeld(t, cordonBin, st, probeArgs([]string{"--json", "--evidence", ev}, "hold", "ptys", "100000")...)
	if h.Probe.OK || h.Probe.Errno != "ENOSPC" || h.Probe.Data != fmt.Sprintf("ptys=%d", sandboxMaxPtys) {
		t.Errorf("ptys until refused: probe %+v, want ENOSPC after %d", h.Probe, sandboxMaxPtys)
	}
	_, prog := h.pids()
	if n := countFDs(t, prog, "ptmx"); n != sandboxMaxPtys {
		t.Errorf("the sandboxed program holds %d ptmx descriptors (host /proc/%d/fd), want %d", n, prog, sandboxMaxPtys)
	}
	if during := readInt(t, "/proc/sys/kernel/pty/nr"); during < before+sandboxMaxPtys {
		t.Errorf("host kernel.pty.nr %d -> %d while the sandbox holds %d ptys; want a rise of at least %d (the ptys are the host's)", before, during, sandboxMaxPtys, sandboxMaxPtys)
	}
	f, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Errorf("host root open /dev/ptmx while a sandbox holds its ptys: %v", err)
	} else {
		f.Close()
	}
	r := runCordon(t, st, runOpts{}, probeArgs(nil, "ptys", "8")...)
	if r.Code != 0 || !r.Probe.OK || r.Probe.Data != "ptys=8" {
		t.Errorf("second sandbox: 8 ptys = %d, probe %+v; want all 8\nstderr: %s", r.Code, r.Probe, r.Stderr)
	}
	h.finish()
	if got := factGot(t, readEvidenceFile(t, ev), "resource", "devpts_max"); !strings.Contains(got, fmt.Sprintf("max=%d", sandboxMaxPtys)) {
		t.Errorf("evidence devpts_max read %q, want max=%d", got, sandboxMaxPtys)
	}
	requireNoResidue(t, st)
}

// TestHostPoolTCPMemory: a sandbox with --memory 64M queues data on many
// loopback connections in its own network namespace, never reading. The
// charge lands in its memory cgroup (cgroup v1 memory.kmem.tcp, set to the
// memory limit), and from outside the bytes queued in the sandbox's
// network namespace and the host's TCP memory stay within the limit.
// Positive control: with the TCP limit lifted (test build), the same
// program queues well past 64 MiB.
func TestHostPoolTCPMemory(t *testing.T) {
	testkit.RequireRoot(t)
	t.Parallel()
	const limit, margin = 64 << 20, 16 << 20
	const conns = "32" // ~10 MiB of socket buffers each when nothing bounds them
	st := newStateDir(t)
	before := sockstatTCPPages(t)
	ev := filepath.Join(t.TempDir(), "ev.json")
	h := startHeld(t, cordonBin, st, probeArgs([]string{"--json", "--memory", "64M", "--evidence", ev}, "hold", "tcpfill", conns)...)
	initPid, _ := h.pids()
	mem := memoryCgroupDir(t, initPid)
	if mem == "" {
		t.Fatalf("init %d has no v1 memory cgroup; this test needs the v1 memory controller", initPid)
	}
	lim := readInt(t, filepath.Join(mem, "memory.kmem.tcp.limit_in_bytes"))
	maxUse := readInt(t, filepath.Join(mem, "memory.kmem.tcp.max_usage_in_bytes"))
	if lim != limit {
		t.Errorf("memory.kmem.tcp.limit_in_bytes = %d, want the memory limit %d", lim, limit)
	}
	// The sockets' memory is charged to this group, and the program
	// queued enough to meet the bound.
	if maxUse < limit/2 {
		t.Errorf("memory.kmem.tcp.max_usage_in_bytes = %d, want at least %d: the queued data must be charged to the sandbox", maxUse, limit/2)
	}
	if maxUse > limit+margin {
		t.Errorf("memory.kmem.tcp.max_usage_in_bytes = %d, want at most the limit %d (+16 MiB of forced charges)", maxUse, limit)
	}
	queued := netnsQueued(t, initPid)
	if queued > limit+margin {
		t.Errorf("bytes queued in the sandbox's network namespace (/proc/%d/net/tcp) = %d, want at most %d", initPid, queued, limit)
	}
	after := sockstatTCPPages(t)
	if rise := (after - before) * int64(os.Getpagesize()); rise > limit+64<<20 {
		t.Errorf("host TCP memory rose by %d bytes (sockstat %d -> %d pages), want at most %d (+64 MiB for other tests)", rise, before, after, limit)
	}
	t.Logf("probe %s; kmem.tcp max %d; queued in netns %d; host TCP pages %d -> %d", h.Probe.Data, maxUse, queued, before, after)
	h.finish()
	if got := factGot(t, readEvidenceFile(t, ev), "resource", "tcp_memory_limit"); got != strconv.Itoa(limit) {
		t.Errorf("evidence tcp_memory_limit read back %q, want %d", got, limit)
	}

	// Evidence reads the limit back: lifted, the resource boundary fails.
	if r := cordon(t, hooksBin, st, probeArgs(withoutLayer("kmem-tcp", []string{"--json", "--memory", "64M"}), "inotify", "1")...); r.Outcome.FailureKind != "evidence_insufficient" || !slices.Contains(r.Outcome.Unverified, "resource") {
		t.Errorf("TCP limit lifted: outcome %+v, want evidence_insufficient with resource unverified", r.Outcome)
	}
	// (The trusted side's watch, which would end it, is left out too.)
	c := startHeld(t, hooksBin, st, probeArgs(withoutLayer("kmem-tcp,tcp-watch", append([]string{"--json", "--memory", "64M"}, lowerLevel...)), "hold", "tcpfill", conns)...)
	cinit, _ := c.pids()
	cmem := memoryCgroupDir(t, cinit)
	cqueued, cuse := netnsQueued(t, cinit), readInt(t, filepath.Join(cmem, "memory.kmem.tcp.usage_in_bytes"))
	if cqueued <= limit+margin || cuse <= limit+margin {
		t.Errorf("control without the TCP limit: %d bytes queued in the netns, kmem.tcp usage %d; want both above %d (the limit is what bounds it)", cqueued, cuse, limit+margin)
	}
	t.Logf("control: probe %s; queued in netns %d; kmem.tcp usage %d", c.Probe.Data, cqueued, cuse)
	c.finish()
	requireNoResidue(t, st)
}

func readInt(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(strings.Fields(string(b))[0], 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return n
}

// memoryCgroupDir is the v1 memory cgroup directory of pid, "" on v2.
func memoryCgroupDir(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) == 3 && f[1] == "memory" {
			return filepath.Join("/sys/fs/cgroup/memory", f[2])
		}
	}
	return ""
}

// sockstatTCPPages is the host's TCP memory in pages (/proc/net/sockstat).
func sockstatTCPPages(t *testing.T) int64 {
	t.Helper()
	f, err := os.Open("/proc/net/sockstat")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "TCP:"); ok {
			fs := strings.Fields(rest)
			for i := 0; i+1 < len(fs); i += 2 {
				if fs[i] == "mem" {
					n, _ := strconv.ParseInt(fs[i+1], 10, 64)
					return n
				}
			}
		}
	}
	t.Fatal("no TCP mem in /proc/net/sockstat")
	return 0
}

// netnsQueued sums tx_queue and rx_queue over the TCP sockets of pid's
// network namespace (/proc/PID/net/tcp{,6}, read from the host).
func netnsQueued(t *testing.T, pid int) int64 {
	t.Helper()
	var total int64
	for _, name := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, name))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(l)
			if len(f) < 5 {
				continue
			}
			tx, rx, ok := strings.Cut(f[4], ":")
			if !ok {
				continue
			}
			a, _ := strconv.ParseInt(tx, 16, 64)
			c, _ := strconv.ParseInt(rx, 16, 64)
			total += a + c
		}
	}
	return total
}

// TestHostPoolPipes: pipe buffers are charged to the memory cgroup of the
// writer and counted against fs.pipe-user-pages-soft of its real uid,
// which is the sandbox's own (lease + 1000). One sandbox fills pipes past
// that soft limit (its new pipes shrink to the minimum); meanwhile an
// unprivileged host user and a second sandbox still get full-size pipes.
// Positive control: the first sandbox's memory cgroup holds the bytes.
func TestHostPoolPipes(t *testing.T) {
	testkit.RequireRoot(t)
	t.Parallel()
	st := newStateDir(t)
	softPages := readInt(t, "/proc/sys/fs/pipe-user-pages-soft")
	if softPages == 0 || softPages > 65536 {
		t.Fatalf("fs.pipe-user-pages-soft = %d; this test needs a soft limit it can reach in 256 MiB", softPages)
	}
	soft := softPages * int64(os.Getpagesize())
	n := strconv.FormatInt(soft/(64<<10)+200, 10) // past the soft limit at 64 KiB a pipe
	h := startHeld(t, cordonBin, st, probeArgs([]string{"--json", "--memory", "256M"}, "hold", "pipes", n)...)
	if !h.Probe.OK || !strings.HasSuffix(h.Probe.Data, "lastsize=8192") && !strings.HasSuffix(h.Probe.Data, "lastsize=4096") {
		t.Errorf("pipes past the soft limit: probe %+v, want the last pipe at the minimum size", h.Probe)
	}
	initPid, _ := h.pids()
	if use := readInt(t, filepath.Join(memoryCgroupDir(t, initPid), "memory.usage_in_bytes")); use < soft {
		t.Errorf("sandbox memory cgroup usage %d while it holds pipes, want at least the %d bytes it queued (charged to the sandbox)", use, soft)
	}
	nobody := &syscall.Credential{Uid: 65534, Gid: 65534}
	if p := hostProbe(t, nobody, "pipes", "4"); !p.OK || !strings.HasSuffix(p.Data, "lastsize=65536") {
		t.Errorf("host user nobody: 4 pipes while a sandbox is past its soft limit: %+v, want full-size pipes", p)
	}
	r := runCordon(t, st, runOpts{}, probeArgs(nil, "pipes", "4")...)
	if !r.Probe.OK || !strings.HasSuffix(r.Probe.Data, "lastsize=65536") {
		t.Errorf("second sandbox: 4 pipes = %+v, want full-size pipes\nstderr: %s", r.Probe, r.Stderr)
	}
	h.finish()
	requireNoResidue(t, st)
}
