package linux

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/sandbox/linux/cgroup"
)

// How often the watch looks. A sandbox with few TCP sockets cannot move
// its TCP memory far between two looks (see tcpProbe.check), so it is read
// at the idle pace; with more, at the busy pace. Idle daemon sandboxes
// must cost next to nothing: 500 of them at the busy pace with a full
// socket-table read each time (~4 ms: /proc/net/tcp walks the host's
// whole hash table) would take more CPU than the host has.
const (
	busyEvery = 20 * time.Millisecond
	idleEvery = 250 * time.Millisecond
	// idleSockets: at most this many TCP sockets (the gateway's
	// listeners and a connection or two) is idle.
	idleSockets = 8
)

// maxTCPSockets bounds the TCP sockets of a sandbox's network namespace
// (listeners, connections, and connections not yet accepted; TIME_WAIT
// is not counted): each can pin socket memory that no memory cgroup is
// charged for (see watchTCP), and the watch reads them all.
const maxTCPSockets = 8192

// errUnreadable marks a watch that could not read what it watches: a
// reason to kill only while the init lives.
var errUnreadable = errors.New("unreadable")

// tcpBound is how much TCP socket memory a sandbox with TCP limit limit
// may hold before the trusted side ends it: a quarter past the limit.
func tcpBound(limit int64) int64 {
	if limit > math.MaxInt64/2 {
		return math.MaxInt64
	}
	return limit + limit/4
}

// watchTCP ends the sandbox when its TCP socket memory passes tcpBound,
// which the kernel alone does not ensure in two ways.
//
// On cgroup v1 memory.kmem.tcp.limit_in_bytes is overshot by design: the
// kernel charges past it whenever it must let a socket make progress (a
// socket whose receive queue is empty takes one skb; a sender below its
// send buffer is let through), so many small loopback connections with
// one write each pinned ~40 KiB apiece past the limit: 5000 took a
// sandbox limited to 64 MiB to 213 MiB. v2 charges the same to memory.max,
// whose OOM killer acts; v1 has no OOM kill for this counter. So on v1
// the counter is polled.
//
// On both, a connection the program has not accepted yet belongs to no
// memory cgroup (the kernel charges it at accept): with its listener's
// SO_RCVBUF raised, 200 such connections held 1 MiB each, 200 MiB of host
// TCP memory, charged nowhere. So the bytes queued on the sandbox's
// network namespace's sockets, and their number, are polled too.
//
// Past a bound, or if either cannot be read while the sandbox lives, the
// whole sandbox is killed, as the OOM killer would.
func (sb *linuxSandbox) watchTCP() {
	if sb.skip("tcp-watch") {
		return
	}
	(&tcpWatch{
		id: sb.spec.ID, limit: sb.tcpBytes, cg: sb.cg, initPid: sb.InitPid(), done: sb.done, log: sb.p.opts.Logger,
		gw: sb.gwcg, gwLimit: gatewayLimits(sb.spec.Limits).TCPBytes,
		kill: func() {
			sb.mu.Lock()
			sb.tcpOver = true
			sb.mu.Unlock()
			sb.kill()
		},
	}).run()
}

// tcpWatch is what watchTCP needs of one sandbox, spawned here or
// attached after a restart.
type tcpWatch struct {
	id    string
	limit int64 // the sandbox's TCP limit (cgroup.Limits.TCPBytes)
	cg    *cgroup.Group
	// gw is the gateway's group (nil: none), gwLimit its TCP limit. The
	// gateway's sockets hold what the agent makes them hold (an egress
	// tunnel whose agent end never reads piles the upstream's bytes up in
	// them), and on v1 its kmem.tcp limit is overshot like the sandbox's.
	gw      *cgroup.Group
	gwLimit int64
	initPid int
	done    <-chan struct{} // closed when the sandbox has ended
	kill    func()          // ends the whole sandbox
	exited  func() bool     // set by run: the init has exited (or does within 200 ms)
	log     *slog.Logger
}

// run watches until the sandbox ends, killing it at most once.
func (w *tcpWatch) run() {
	if w.limit <= 0 {
		return
	}
	closePidfd := w.watchInitExit()
	defer closePidfd()
	var once sync.Once
	over := func(reason error) {
		once.Do(func() {
			w.log.Warn("sandbox past its TCP socket memory bound: killing it", "sandbox", w.id, "reason", reason.Error())
			w.kill()
		})
	}
	p := w.newTCPProbe()
	defer p.close()
	w.loop(over, p.check)
}

// watchInitExit sets w.exited from a pidfd of the init: once it is
// readable the init has exited and what can no longer be read is no reason
// to kill (the sandbox is ending on its own; done follows). The returned
// func closes the pidfd once the sandbox has ended.
func (w *tcpWatch) watchInitExit() (closePidfd func()) {
	pidfd, perr := unix.PidfdOpen(w.initPid, 0)
	closePidfd = func() {}
	if perr != nil {
		w.log.Warn("sandbox TCP watch: no pidfd for the init", "sandbox", w.id, "err", perr)
		pidfd = -1
	} else {
		closePidfd = func() {
			<-w.done // the v1 goroutine may still use it until then
			unix.Close(pidfd)
		}
	}
	w.exited = func() bool {
		if pidfd < 0 {
			return false
		}
		pfd := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
		if n, err := unix.Poll(pfd, 0); err == nil && n > 0 {
			return true
		}
		// An exiting init drops its namespaces (and /proc/PID/net with
		// them) before its pidfd becomes readable, which on a loaded host
		// can take longer than any fixed wait; the kernel marks it
		// exiting (PF_EXITING) first. Its pidfd is not readable, so the
		// pid is still the init's.
		if initExiting(w.initPid) {
			return true
		}
		n, err := unix.Poll(pfd, 200)
		return err == nil && n > 0
	}
	return closePidfd
}

// tcpProbe is what one look of the watch reads: the sandbox's TCP socket
// count, its (and its gateway's) v1 TCP memory counters, and the bytes
// queued on its network namespace's sockets.
type tcpProbe struct {
	bound     int64  // tcpBound of the sandbox's limit
	usageFile string // the sandbox's v1 TCP usage counter (v1 only)
	v1        bool
	gwUsage   string // the gateway's v1 TCP usage counter ("": none)
	gwBound   int64
	perSocket int64 // unacceptedSocketMax
	procDir   int   // the init's /proc directory (valid when openErr is nil)
	openErr   error
	diag      *listenDiag // valid when derr is nil
	derr      error
}

// newTCPProbe opens what the probe reads. Failures are kept, not returned:
// check reports them as errUnreadable while the sandbox lives.
func (w *tcpWatch) newTCPProbe() *tcpProbe {
	p := &tcpProbe{bound: tcpBound(w.limit), gwBound: tcpBound(w.gwLimit)}
	p.usageFile, p.v1 = w.cg.TCPUsageFile()
	if w.gw != nil && w.gwLimit > 0 {
		p.gwUsage, _ = w.gw.TCPUsageFile()
	}
	p.perSocket = unacceptedSocketMax()
	// The init's /proc directory, opened while it surely runs: a pid
	// reused after it exits is never read.
	p.procDir, p.openErr = unix.Open(fmt.Sprintf("/proc/%d", w.initPid), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	// Connections waiting to be accepted, counted by a sock_diag socket
	// (see listenDiag). Without it they cannot be counted at all (one reset
	// while it waits is in no table), so the watch fails closed.
	p.diag, p.derr = openListenDiag(w.initPid)
	return p
}

// close releases what newTCPProbe opened.
func (p *tcpProbe) close() {
	if p.derr == nil {
		p.diag.Close()
	}
	if p.openErr == nil {
		unix.Close(p.procDir)
	}
}

// check is one look: an error past a bound or when something cannot be
// read, else whether the sandbox is busy (look again at the busy pace).
func (p *tcpProbe) check() (busy bool, err error) {
	if p.openErr != nil {
		return false, fmt.Errorf("%w: open the init's /proc directory: %w", errUnreadable, p.openErr)
	}
	if p.derr != nil {
		return false, fmt.Errorf("%w: connections waiting to be accepted cannot be counted: %w", errUnreadable, p.derr)
	}
	// The namespace's TCP socket count: O(1) (net/sockstat{,6}).
	n, err := netnsTCPCount(p.procDir)
	switch {
	case err != nil:
		return false, fmt.Errorf("%w: %w", errUnreadable, err)
	case n > maxTCPSockets:
		return false, fmt.Errorf("%d TCP sockets in the sandbox's network namespace, at most %d", n, maxTCPSockets)
	}
	busy = n > idleSockets
	if p.v1 {
		used, err := chargedTCP(p.usageFile, p.bound, "the sandbox")
		if err != nil {
			return false, err
		}
		busy = busy || used > p.bound/8
	}
	if p.gwUsage != "" {
		used, err := chargedTCP(p.gwUsage, p.gwBound, "the sandbox's gateway")
		if err != nil {
			return false, err
		}
		busy = busy || used > p.gwBound/8
	}
	return p.checkQueued(busy)
}

// chargedTCP reads a v1 TCP usage counter and fails when it is past bound;
// who names whose counter it is in the error.
func chargedTCP(usageFile string, bound int64, who string) (int64, error) {
	b, err := os.ReadFile(usageFile)
	var used int64
	if err == nil {
		used, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	}
	switch {
	case err != nil:
		return 0, fmt.Errorf("%w: %s: %w", errUnreadable, usageFile, err)
	case used > bound:
		return 0, fmt.Errorf("TCP memory charged to %s %d bytes, bound %d", who, used, bound)
	}
	return used, nil
}

// checkQueued bounds the bytes queued on the namespace's sockets, counting
// the connections not yet accepted; busy is what check found so far.
func (p *tcpProbe) checkQueued(busy bool) (bool, error) {
	// Connections not yet accepted are charged nowhere, and each holds
	// at most perSocket. The socket count above is no bound on them: a
	// connection reset by its peer while it waits is unhashed (neither
	// sockstat nor the socket table shows it any more) yet stays in the
	// accept queue with all it received. So the accept queues are
	// always counted (the kernel walks only the listening hash), and
	// only when those could hold more than the bound is the whole table
	// read (it walks the host's hash table).
	waiting, _, err := p.diag.waiting()
	if err != nil {
		return false, fmt.Errorf("%w: %w", errUnreadable, err)
	}
	busy = busy || waiting > 0
	if int64(waiting) <= p.bound/p.perSocket {
		return busy, nil
	}
	q, _, seen, err := netnsTCP(p.procDir)
	if err != nil {
		return false, fmt.Errorf("%w: %w", errUnreadable, err)
	}
	// Waiting connections the table did not show hold at most
	// perSocket each. Counted again after the table: a connection
	// accepted meanwhile is no longer waiting (one that leaves the
	// queue only by accept or its listener's close, as a reset one
	// does, is in both counts).
	after, _, err := p.diag.waiting()
	if err != nil {
		return false, fmt.Errorf("%w: %w", errUnreadable, err)
	}
	hidden := int64(max(min(waiting, after)-seen, 0))
	switch {
	case q > p.bound:
		return false, fmt.Errorf("%d bytes queued on the TCP sockets of the sandbox's network namespace, bound %d", q, p.bound)
	case hidden > 0 && q+hidden*p.perSocket > p.bound:
		return false, fmt.Errorf("%d connections waiting to be accepted that no socket table shows (reset while waiting; up to %d bytes each) and %d bytes queued, bound %d", hidden, p.perSocket, q, p.bound)
	}
	return true, nil
}

// unacceptedSocketMax is the most a TCP connection not yet accepted can
// hold in its receive queue: its buffer is inherited from the listener and
// capped by SO_RCVBUF's ceiling (twice net.core.rmem_max, host-wide), and
// it is not auto-tuned until the program reads from it, which it cannot
// before accepting. At least 6 MiB (tcp_rmem's maximum in a new network
// namespace), whatever the host says.
func unacceptedSocketMax() int64 {
	b, _ := os.ReadFile("/proc/sys/net/core/rmem_max")
	return unacceptedFromRmemMax(b)
}

// unacceptedFromRmemMax is unacceptedSocketMax for net.core.rmem_max's
// content b (nil or unparsable: the floor).
func unacceptedFromRmemMax(b []byte) int64 {
	n := int64(6 << 20)
	if v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && v > 0 && 2*v > n {
		n = 2 * v
	}
	return n
}

// netnsTCPCount is the number of TCP sockets (IPv4 and IPv6, not counting
// TIME_WAIT) in the network namespace of the process whose /proc
// directory is procDir, from net/sockstat{,6}: their "inuse" counts are
// per namespace and cost nothing to read.
func netnsTCPCount(procDir int) (int, error) {
	total := 0
	for _, f := range []struct{ name, proto string }{{"net/sockstat", "TCP:"}, {"net/sockstat6", "TCP6:"}} {
		fd, err := unix.Openat(procDir, f.name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) && f.name == "net/sockstat6" {
			continue // no IPv6 in this kernel
		}
		if err != nil {
			return 0, fmt.Errorf("open the sandbox's /proc/PID/%s: %w", f.name, err)
		}
		file := os.NewFile(uintptr(fd), f.name)
		b, err := readAll(file)
		file.Close()
		if err != nil {
			return 0, fmt.Errorf("read the sandbox's /proc/PID/%s: %w", f.name, err)
		}
		n, err := parseSockstatInuse(b, f.proto)
		if err != nil {
			return 0, fmt.Errorf("the sandbox's /proc/PID/%s: %w", f.name, err)
		}
		total += n
	}
	return total, nil
}

// parseSockstatInuse returns the "inuse" count of proto's line
// ("TCP: inuse 3 orphan 0 tw 0 alloc 4 mem 1").
func parseSockstatInuse(b []byte, proto string) (int, error) {
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 3 || f[0] != proto {
			continue
		}
		if f[1] != "inuse" {
			return 0, fmt.Errorf("%s line %q", proto, l)
		}
		n, err := strconv.Atoi(f[2])
		if err != nil || n < 0 {
			return 0, fmt.Errorf("%s inuse %q", proto, f[2])
		}
		return n, nil
	}
	return 0, fmt.Errorf("no %s line", proto)
}

// loop runs check at the busy pace while it says so, else at the idle
// pace, until the sandbox ends; the first error it returns while the
// sandbox lives goes to over.
func (w *tcpWatch) loop(over func(error), check func() (bool, error)) {
	t := time.NewTimer(busyEvery)
	defer t.Stop()
	for {
		select {
		case <-w.done:
			return
		case <-t.C:
		}
		busy, err := check()
		if err == nil {
			if busy {
				t.Reset(busyEvery)
			} else {
				t.Reset(idleEvery)
			}
			continue
		}
		select {
		case <-w.done:
			return
		default:
		}
		if errors.Is(err, errUnreadable) && w.exited() {
			return
		}
		over(err)
		return
	}
}

// netnsTCP sums the bytes queued (send and receive) on the TCP sockets of
// the network namespace of the process whose /proc directory is procDir,
// counts those sockets (TIME_WAIT excluded; a listener's queues are
// connection counts, not bytes, so only the listener itself counts) and
// the connections among them waiting to be accepted (parseProcNetTCP).
func netnsTCP(procDir int) (queued int64, sockets, children int, err error) {
	for _, name := range []string{"net/tcp", "net/tcp6"} {
		fd, err := unix.Openat(procDir, name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) && name == "net/tcp6" {
			continue // no IPv6 in this kernel
		}
		if err != nil {
			return 0, 0, 0, fmt.Errorf("open the sandbox's /proc/PID/%s: %w", name, err)
		}
		f := os.NewFile(uintptr(fd), name)
		b, err := readAll(f)
		f.Close()
		if err != nil {
			return 0, 0, 0, fmt.Errorf("read the sandbox's /proc/PID/%s: %w", name, err)
		}
		q, n, c, err := parseProcNetTCP(b)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("the sandbox's /proc/PID/%s: %w", name, err)
		}
		queued, sockets, children = queued+q, sockets+n, children+c
	}
	return queued, sockets, children, nil
}

func readAll(f *os.File) ([]byte, error) {
	var buf bytes.Buffer
	_, err := buf.ReadFrom(f)
	return buf.Bytes(), err
}

// TCP states in /proc/net/tcp (include/net/tcp_states.h).
const (
	tcpEstablished = 0x01
	tcpTimeWait    = 0x06
	tcpCloseWait   = 0x08
	tcpListen      = 0x0A
)

// parseProcNetTCP reads /proc/net/tcp{,6}: the sum of tx_queue and
// rx_queue over the sockets that are not listening, the number of
// sockets that are not in TIME_WAIT, and the connections waiting to be
// accepted among them: established (or closed by the peer) and held by no
// process (inode 0). A socket a process closed is in neither state, and
// an accepted one has an inode.
func parseProcNetTCP(b []byte) (queued int64, sockets, children int, err error) {
	lines := strings.Split(string(b), "\n")
	for i, l := range lines {
		if i == 0 || strings.TrimSpace(l) == "" {
			continue // the header
		}
		f := strings.Fields(l)
		if len(f) < 5 {
			return 0, 0, 0, fmt.Errorf("line %d: %d fields", i+1, len(f))
		}
		st, err := strconv.ParseUint(f[3], 16, 8)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("line %d: state %q", i+1, f[3])
		}
		if st == tcpTimeWait {
			continue
		}
		sockets++
		if st == tcpListen {
			continue
		}
		tx, rx, ok := strings.Cut(f[4], ":")
		a, err1 := strconv.ParseUint(tx, 16, 32)
		c, err2 := strconv.ParseUint(rx, 16, 32)
		if !ok || err1 != nil || err2 != nil {
			return 0, 0, 0, fmt.Errorf("line %d: queues %q", i+1, f[4])
		}
		if a >= 1<<31 {
			// tx_queue is write_seq - snd_una, read without the socket's
			// lock: when snd_una moves past the write_seq read a moment
			// before, the 32-bit difference wraps to ~4 GiB for one read.
			// A real send queue is bounded by sk_sndbuf, an int: a value
			// this large is only that wrap (seen in CI as 3.5 GB queued in
			// a 64 MiB sandbox).
			a = 0
		}
		queued += int64(a) + int64(c)
		if st == tcpEstablished || st == tcpCloseWait {
			if len(f) < 10 {
				return 0, 0, 0, fmt.Errorf("line %d: %d fields, no inode", i+1, len(f))
			}
			ino, err := strconv.ParseUint(f[9], 10, 64)
			if err != nil {
				return 0, 0, 0, fmt.Errorf("line %d: inode %q", i+1, f[9])
			}
			if ino == 0 {
				children++
			}
		}
	}
	return queued, sockets, children, nil
}

// pfExiting is the kernel's PF_EXITING task flag (include/linux/sched.h).
const pfExiting = 0x4

// initExiting reports whether /proc/PID/stat's flags (field 9) carry
// PF_EXITING: the process has begun to exit.
func initExiting(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 7 {
		return false
	}
	flags, err := strconv.ParseUint(f[6], 10, 64)
	return err == nil && flags&pfExiting != 0
}
