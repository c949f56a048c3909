package linux

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// tcpWatchEvery is how often watchTCP reads a sandbox's v1 TCP memory
// counter, and netnsWatchEvery its network namespace's socket table.
const (
	tcpWatchEvery   = 20 * time.Millisecond
	netnsWatchEvery = 50 * time.Millisecond
)

// maxTCPSockets bounds the TCP sockets of a sandbox's network namespace
// (listeners, connections, and connections not yet accepted; TIME_WAIT
// is not counted): each can pin socket memory that no memory cgroup is
// charged for (see watchTCP), and the watch reads them all.
const maxTCPSockets = 8192

// tcpBound is how much TCP socket memory a sandbox with TCP limit limit
// may hold before the trusted side ends it: a quarter past the limit.
func tcpBound(limit int64) int64 { return limit + limit/4 }

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
	if sb.tcpBytes <= 0 || sb.skip("tcp-watch") {
		return
	}
	bound := tcpBound(sb.tcpBytes)
	if file, v1 := sb.cg.TCPUsageFile(); v1 {
		go sb.every(tcpWatchEvery, func() error {
			b, err := os.ReadFile(file)
			var n int64
			if err == nil {
				n, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			}
			switch {
			case err != nil:
				return fmt.Errorf("read %s: %w", file, err)
			case n > bound:
				return fmt.Errorf("TCP memory charged to the sandbox %d bytes, bound %d", n, bound)
			}
			return nil
		})
	}
	// The init's /proc directory, opened while it surely runs: a pid
	// reused after it exits is never read.
	procDir, err := unix.Open(fmt.Sprintf("/proc/%d", sb.InitPid()), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err == nil {
		defer unix.Close(procDir)
	}
	sb.every(netnsWatchEvery, func() error {
		if err != nil {
			return fmt.Errorf("open the init's /proc directory: %w", err)
		}
		q, n, err := netnsTCP(procDir)
		switch {
		case err != nil:
			return err
		case q > bound:
			return fmt.Errorf("%d bytes queued on the TCP sockets of the sandbox's network namespace, bound %d", q, bound)
		case n > maxTCPSockets:
			return fmt.Errorf("%d TCP sockets in the sandbox's network namespace, at most %d", n, maxTCPSockets)
		}
		return nil
	})
}

// every runs check every interval until the sandbox ends; the first error
// it returns while the sandbox lives kills the whole sandbox.
func (sb *linuxSandbox) every(interval time.Duration, check func() error) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-sb.done:
			return
		case <-t.C:
		}
		over := check()
		if over == nil {
			continue
		}
		select {
		case <-sb.done:
			return
		default:
		}
		sb.mu.Lock()
		first := !sb.tcpOver
		sb.tcpOver = true
		sb.mu.Unlock()
		if first {
			sb.p.opts.Logger.Warn("sandbox past its TCP socket memory bound: killing it", "sandbox", sb.spec.ID, "reason", over.Error())
			sb.kill()
		}
		return
	}
}

// netnsTCP sums the bytes queued (send and receive) on the TCP sockets of
// the network namespace of the process whose /proc directory is procDir,
// and counts those sockets (TIME_WAIT excluded; a listener's queues are
// connection counts, not bytes, so only the listener itself counts).
func netnsTCP(procDir int) (queued int64, sockets int, err error) {
	for _, name := range []string{"net/tcp", "net/tcp6"} {
		fd, err := unix.Openat(procDir, name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) && name == "net/tcp6" {
			continue // no IPv6 in this kernel
		}
		if err != nil {
			return 0, 0, fmt.Errorf("open the sandbox's /proc/PID/%s: %w", name, err)
		}
		f := os.NewFile(uintptr(fd), name)
		b, err := readAll(f)
		f.Close()
		if err != nil {
			return 0, 0, fmt.Errorf("read the sandbox's /proc/PID/%s: %w", name, err)
		}
		q, n, err := parseProcNetTCP(b)
		if err != nil {
			return 0, 0, fmt.Errorf("the sandbox's /proc/PID/%s: %w", name, err)
		}
		queued, sockets = queued+q, sockets+n
	}
	return queued, sockets, nil
}

func readAll(f *os.File) ([]byte, error) {
	var buf bytes.Buffer
	_, err := buf.ReadFrom(f)
	return buf.Bytes(), err
}

// TCP states in /proc/net/tcp (include/net/tcp_states.h).
const (
	tcpTimeWait = 0x06
	tcpListen   = 0x0A
)

// parseProcNetTCP reads /proc/net/tcp{,6}: the sum of tx_queue and
// rx_queue over the sockets that are not listening, and the number of
// sockets that are not in TIME_WAIT.
func parseProcNetTCP(b []byte) (queued int64, sockets int, err error) {
	lines := strings.Split(string(b), "\n")
	for i, l := range lines {
		if i == 0 || strings.TrimSpace(l) == "" {
			continue // the header
		}
		f := strings.Fields(l)
		if len(f) < 5 {
			return 0, 0, fmt.Errorf("line %d: %d fields", i+1, len(f))
		}
		st, err := strconv.ParseUint(f[3], 16, 8)
		if err != nil {
			return 0, 0, fmt.Errorf("line %d: state %q", i+1, f[3])
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
			return 0, 0, fmt.Errorf("line %d: queues %q", i+1, f[4])
		}
		queued += int64(a) + int64(c)
	}
	return queued, sockets, nil
}
