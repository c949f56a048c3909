package probeops

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Host-wide pools (docs/host-pools.md). Each op takes as much of one pool
// as the kernel gives and keeps it (run under hold): the tests count what
// was taken from outside and check that a host process and another
// sandbox still get their share.
func init() {
	register("inotify", inotifyOp)
	register("aio", aioOp)
	register("ptys", ptysOp)
	register("tcpfill", tcpfillOp)
	register("tcpmany", tcpmanyOp)
	register("tcpunaccepted", tcpunacceptedOp)
	register("tcpreset", tcpresetOp)
	register("tcpmptcp", tcpmptcpOp)
	register("pipes", pipesOp)
}

// kept keeps what the ops took alive until the process exits.
var kept []any

func count(a []string) (int, error) {
	if len(a) < 1 {
		return 0, fmt.Errorf("want a count")
	}
	n, err := strconv.Atoi(a[0])
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("count %q: want a positive number", a[0])
	}
	return n, nil
}

// inotifyOp creates up to N inotify instances and keeps them.
func inotifyOp(a []string) (string, error) {
	n, err := count(a)
	if err != nil {
		return "", err
	}
	got := 0
	for got < n {
		fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
		if err != nil {
			return fmt.Sprintf("instances=%d", got), err
		}
		kept = append(kept, fd)
		got++
	}
	return fmt.Sprintf("instances=%d", got), nil
}

// aioOp reserves N events of the host's fs.aio-max-nr with io_setup.
func aioOp(a []string) (string, error) {
	n, err := count(a)
	if err != nil {
		return "", err
	}
	var ctx uintptr
	if _, _, e := unix.Syscall(unix.SYS_IO_SETUP, uintptr(n), uintptr(unsafe.Pointer(&ctx)), 0); e != 0 {
		return "", e
	}
	kept = append(kept, ctx)
	return fmt.Sprintf("reserved=%d", n), nil
}

// ptysOp opens up to N pseudo-terminals from /dev/ptmx and keeps them.
func ptysOp(a []string) (string, error) {
	n, err := count(a)
	if err != nil {
		return "", err
	}
	got := 0
	for got < n {
		f, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
		if err != nil {
			return fmt.Sprintf("ptys=%d", got), unwrap(err)
		}
		kept = append(kept, f)
		got++
	}
	return fmt.Sprintf("ptys=%d", got), nil
}

func unwrap(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

// tcpfillOp opens N loopback connections and, on each, writes without
// the peer ever reading until the kernel takes no more: the bytes queue in
// the socket buffers of the sandbox's own network namespace.
func tcpfillOp(a []string) (string, error) {
	n, err := count(a)
	if err != nil {
		return "", err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	kept = append(kept, ln)
	buf := make([]byte, 1<<20)
	var total int64
	for i := 0; i < n; i++ {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return fmt.Sprintf("conns=%d queued=%d", i, total), err
		}
		s, err := ln.Accept()
		if err != nil {
			return fmt.Sprintf("conns=%d queued=%d", i, total), err
		}
		kept = append(kept, c, s)
		raw, err := c.(*net.TCPConn).SyscallConn()
		if err != nil {
			return "", err
		}
		var werr error
		_ = raw.Control(func(fd uintptr) {
			_ = unix.SetNonblock(int(fd), true)
			for {
				w, err := unix.Write(int(fd), buf)
				if w > 0 {
					total += int64(w)
				}
				if err != nil {
					if err != unix.EAGAIN {
						werr = err
					}
					return
				}
			}
		})
		if werr != nil {
			return fmt.Sprintf("conns=%d queued=%d", i+1, total), werr
		}
	}
	return fmt.Sprintf("conns=%d queued=%d", n, total), nil
}

// pipesOp creates N pipes and fills each until it takes no more; it
// reports the bytes held and the capacity of the last pipe (the kernel
// gives a user past fs.pipe-user-pages-soft one-page pipes).
func pipesOp(a []string) (string, error) {
	n, err := count(a)
	if err != nil {
		return "", err
	}
	buf := make([]byte, 64<<10)
	var total int64
	last := 0
	for i := 0; i < n; i++ {
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
			return fmt.Sprintf("pipes=%d bytes=%d lastsize=%d", i, total, last), err
		}
		kept = append(kept, p)
		for {
			w, err := unix.Write(p[1], buf)
			if w > 0 {
				total += int64(w)
			}
			if err != nil {
				break
			}
		}
		if last, err = unix.FcntlInt(uintptr(p[1]), unix.F_GETPIPE_SZ, 0); err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("pipes=%d bytes=%d lastsize=%d", n, total, last), nil
}

// tcpmanyOp opens N loopback connections and writes once on each, the
// peer never reading. Each socket is small, but the kernel accepts one
// skb on a socket with an empty queue whatever its memory cgroup's TCP
// limit (forced charges): many sockets add up far past the limit.
func tcpmanyOp(a []string) (string, error) {
	n, err := count(a)
	if err != nil {
		return "", err
	}
	ln, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	if err := unix.Bind(ln, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return "", err
	}
	if err := unix.Listen(ln, 128); err != nil {
		return "", err
	}
	addr, err := unix.Getsockname(ln)
	if err != nil {
		return "", err
	}
	kept = append(kept, ln)
	buf := make([]byte, 64<<10)
	var total int64
	for i := 0; i < n; i++ {
		c, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err == nil {
			err = unix.Connect(c, addr)
		}
		var s int
		if err == nil {
			s, _, err = unix.Accept4(ln, unix.SOCK_CLOEXEC)
		}
		if err != nil {
			return fmt.Sprintf("conns=%d queued=%d", i, total), err
		}
		kept = append(kept, c, s)
		_ = unix.SetNonblock(c, true)
		if w, _ := unix.Write(c, buf); w > 0 {
			total += int64(w)
		}
		if i%4 == 3 {
			time.Sleep(time.Millisecond) // so that a watcher outside sees the rise
		}
	}
	return fmt.Sprintf("conns=%d queued=%d", n, total), nil
}

// tcpunacceptedOp opens N loopback connections to one listener whose
// receive buffer is raised (the connections inherit it), writes 1 MiB on
// each and never accepts them: a connection not yet accepted belongs to
// no memory cgroup. It pauses 5 ms after each, so that a watcher outside
// sees the bytes rise.
func tcpunacceptedOp(a []string) (string, error) {
	n, err := count(a)
	if err != nil {
		return "", err
	}
	addr, err := wideListener(0)
	if err != nil {
		return "", err
	}
	buf := make([]byte, 1<<20)
	var total int64
	for i := 0; i < n; i++ {
		c, err := dial(addr, 0)
		if err != nil {
			return fmt.Sprintf("conns=%d queued=%d", i, total), err
		}
		kept = append(kept, c)
		_ = unix.SetNonblock(c, true)
		if w, _ := unix.Write(c, buf); w > 0 {
			total += int64(w)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return fmt.Sprintf("conns=%d queued=%d", n, total), nil
}

// tcpresetOp is tcpunacceptedOp with each client reset (SO_LINGER 0,
// close) once its bytes are in the connection waiting to be accepted: the
// reset connection leaves the socket tables (sockstat's count, /proc/net/tcp)
// but stays in its listener's accept queue with all it received, charged
// to no memory cgroup. It pauses 10 ms after each, so that a watcher
// outside sees the queue grow.
func tcpresetOp(a []string) (string, error) {
	n, err := count(a)
	if err != nil {
		return "", err
	}
	addr, err := wideListener(0)
	if err != nil {
		return "", err
	}
	buf := make([]byte, 8<<20)
	var total int64
	for i := 0; i < n; i++ {
		c, err := dial(addr, 0)
		if err != nil {
			return fmt.Sprintf("conns=%d sent=%d", i, total), err
		}
		_ = unix.SetNonblock(c, true)
		if w, _ := unix.Write(c, buf); w > 0 {
			total += int64(w)
		}
		time.Sleep(5 * time.Millisecond) // the bytes reach the waiting connection
		if err := unix.SetsockoptLinger(c, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0}); err != nil {
			return fmt.Sprintf("conns=%d sent=%d", i, total), err
		}
		unix.Close(c)
		time.Sleep(5 * time.Millisecond)
	}
	return fmt.Sprintf("conns=%d sent=%d", n, total), nil
}

// egressfloodOp opens N tunnels through the egress proxy to
// allowed.test:PORT, reads each one's "200" and never reads again, its
// receive buffer at the minimum: what the upstream sends piles up in the
// gateway's sockets (charged to the gateway's cgroup).
func egressfloodOp(a []string) (string, error) {
	if len(a) < 2 {
		return "", fmt.Errorf("want a count and a port")
	}
	n, err := count(a)
	if err != nil {
		return "", err
	}
	proxy := os.Getenv("HTTPS_PROXY")
	host := proxy[len("http://"):]
	if i := len(host) - 1; host[i] == '/' {
		host = host[:i]
	}
	for i := 0; i < n; i++ {
		c, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fmt.Sprintf("tunnels=%d", i), err
		}
		_ = unix.SetsockoptInt(c, unix.SOL_SOCKET, unix.SO_RCVBUF, 1)
		ta, err := net.ResolveTCPAddr("tcp", host)
		if err != nil {
			return "", err
		}
		var ip [4]byte
		copy(ip[:], ta.IP.To4())
		if err := unix.Connect(c, &unix.SockaddrInet4{Addr: ip, Port: ta.Port}); err != nil {
			return fmt.Sprintf("tunnels=%d", i), err
		}
		req := "CONNECT allowed.test:" + a[1] + " HTTP/1.1\r\nHost: allowed.test:" + a[1] + "\r\n\r\n"
		if _, err := unix.Write(c, []byte(req)); err != nil {
			return fmt.Sprintf("tunnels=%d", i), err
		}
		buf := make([]byte, 12)
		if _, err := unix.Read(c, buf); err != nil || string(buf[9:12]) != "200" {
			return fmt.Sprintf("tunnels=%d answer=%q", i, buf), err
		}
		kept = append(kept, c)
	}
	return fmt.Sprintf("tunnels=%d", n), nil
}

func init() { register("egressflood", egressfloodOp) }

// tcpmptcpOp is tcpunacceptedOp over Multipath TCP (IPPROTO_MPTCP): 4 MiB
// written on each connection, none accepted. An MPTCP connection keeps
// what it received in its own socket, which /proc/net/tcp does not show
// (its TCP subflow there queues nothing).
func tcpmptcpOp(a []string) (string, error) {
	n, err := count(a)
	if err != nil {
		return "", err
	}
	addr, err := wideListener(unix.IPPROTO_MPTCP)
	if err != nil {
		return "", err
	}
	buf := make([]byte, 4<<20)
	var total int64
	for i := 0; i < n; i++ {
		c, err := dial(addr, unix.IPPROTO_MPTCP)
		if err != nil {
			return fmt.Sprintf("conns=%d sent=%d", i, total), err
		}
		kept = append(kept, c)
		_ = unix.SetNonblock(c, true)
		if w, _ := unix.Write(c, buf); w > 0 {
			total += int64(w)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Sprintf("conns=%d sent=%d", n, total), nil
}

// wideListener listens on 127.0.0.1 (any port, protocol proto of
// AF_INET stream sockets) with a 4 MiB receive buffer, which the
// connections it has not accepted inherit, and a backlog of 4096; the
// listener is kept open. It returns the listener's address.
func wideListener(proto int) (unix.Sockaddr, error) {
	ln, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return nil, err
	}
	if err := unix.SetsockoptInt(ln, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20); err != nil {
		return nil, err
	}
	if err := unix.Bind(ln, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return nil, err
	}
	if err := unix.Listen(ln, 4096); err != nil {
		return nil, err
	}
	kept = append(kept, ln)
	return unix.Getsockname(ln)
}

// dial connects a stream socket of protocol proto to addr.
func dial(addr unix.Sockaddr, proto int) (int, error) {
	c, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, proto)
	if err == nil {
		err = unix.Connect(c, addr)
	}
	return c, err
}
