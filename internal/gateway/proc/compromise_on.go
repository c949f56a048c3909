//go:build cordon_testhooks

package proc

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/gateway/dial"
)

// Compromise is what the "compromised gateway" test hook (test builds
// only) makes a broker process try, from inside itself once it is fully
// hardened and before it serves: what an attacker who took the process
// over with agent traffic would try. The e2e test judges each attempt
// from outside (its listeners, the other upstream, the secret's absence
// from what the process could read and report).
type Compromise struct {
	Broker string   `json:"broker"`          // which broker process runs it
	TCP    []string `json:"tcp,omitempty"`   // host:port to connect to directly
	Unix   []string `json:"unix,omitempty"`  // pathname Unix sockets to connect to
	Dial   []string `json:"dial,omitempty"`  // host:port to ask the checked dialer for
	Files  []string `json:"files,omitempty"` // files to read
	// Retarget are "via>to" pairs: ask the checked dialer for via, then
	// disconnect the socket it hands over (connect AF_UNSPEC) and connect
	// it to to — the dialer's sockets live in the host's network
	// namespace.
	Retarget []string `json:"retarget,omitempty"`
	// Signal names peer processes (a broker, or "sockets" for the socket
	// source) and the signal number to send each; they run as the same
	// uid.
	Signal map[string]int `json:"signal,omitempty"`
	// Peers are the other broker processes' pids (the privileged side
	// fills them in): their environ, mem, cmdline and config descriptor
	// are read.
	Peers map[string]int `json:"peers,omitempty"`
	// SkipFilter leaves the broker seccomp filter out of this process (a
	// positive control: it shows which attempts the empty network
	// namespace alone stops, and which only the filter does).
	SkipFilter bool `json:"skip_filter,omitempty"`
}

// skipNetFilter reports whether the hook's instructions for broker leave
// the broker filter out.
func skipNetFilter(broker string, raw json.RawMessage) bool {
	var c Compromise
	return len(raw) > 0 && json.Unmarshal(raw, &c) == nil && c.Broker == broker && c.SkipFilter
}

// Attempt is one try and what came of it.
type Attempt struct {
	Probe string `json:"probe"`
	Err   string `json:"err,omitempty"` // empty: it worked
	Read  []byte `json:"read,omitempty"`
}

// CompromiseMarker starts the hook's report line on the process's stderr.
const CompromiseMarker = "CORDON-TEST-COMPROMISE "

func compromise(broker string, raw json.RawMessage, dc *dial.Client, _ *slog.Logger) {
	if len(raw) == 0 {
		return
	}
	var c Compromise
	if err := json.Unmarshal(raw, &c); err != nil || c.Broker != broker {
		return
	}
	var out []Attempt
	add := func(probe string, read []byte, err error) {
		a := Attempt{Probe: probe, Read: read}
		if err != nil {
			a.Err = err.Error()
		}
		out = append(out, a)
	}
	for _, t := range c.TCP {
		conn, err := net.DialTimeout("tcp", t, 2*time.Second)
		if err == nil {
			conn.Close()
		}
		add("tcp "+t, nil, err)
	}
	for _, p := range c.Unix {
		conn, err := net.DialTimeout("unix", p, 2*time.Second)
		if err == nil {
			conn.Close()
		}
		add("unix "+p, nil, err)
	}
	for _, t := range c.Dial {
		var err error
		if dc == nil {
			err = fmt.Errorf("no dialer")
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			var conn net.Conn
			conn, err = dc.DialContext(ctx, "tcp", t)
			cancel()
			if err == nil {
				conn.Close()
			}
		}
		add("dial "+t, nil, err)
	}
	for peer, sig := range c.Signal {
		err := fmt.Errorf("no such peer")
		if pid := c.Peers[peer]; pid > 0 {
			err = unix.Kill(pid, unix.Signal(sig))
		}
		add("signal "+peer+" "+strconv.Itoa(sig), nil, err)
	}
	for _, r := range c.Retarget {
		add("retarget "+r, nil, retarget(dc, r))
	}
	read := func(path string) {
		f, err := os.Open(path)
		if err != nil {
			add("read "+path, nil, err)
			return
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, 64<<10))
		add("read "+path, b, err)
	}
	for _, p := range c.Files {
		read(p)
	}
	for _, pid := range c.Peers {
		for _, f := range []string{"environ", "cmdline", "mem", "fd/3", "fd/4", "fdinfo/3", "maps"} {
			read("/proc/" + strconv.Itoa(pid) + "/" + f)
		}
	}
	b, _ := json.Marshal(map[string]any{"broker": broker, "attempts": out})
	fmt.Fprintf(os.Stderr, "%s%s\n", CompromiseMarker, b)
}

// retarget dials via ("via>to") through the checked dialer and points the
// connected socket it got at to.
func retarget(dc *dial.Client, spec string) error {
	via, to, ok := strings.Cut(spec, ">")
	ap, err := netip.ParseAddrPort(to)
	if !ok || err != nil || !ap.Addr().Is4() || dc == nil {
		return fmt.Errorf("retarget %q: want via>ipv4:port and a dialer", spec)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := dc.DialContext(ctx, "tcp", via)
	if err != nil {
		return fmt.Errorf("dial %s: %w", via, err)
	}
	defer conn.Close()
	rc, err := conn.(*net.TCPConn).SyscallConn()
	if err != nil {
		return err
	}
	var cerr error
	err = rc.Control(func(fd uintptr) {
		unspec := [16]byte{} // struct sockaddr, sa_family AF_UNSPEC
		if _, _, e := unix.Syscall(unix.SYS_CONNECT, fd, uintptr(unsafe.Pointer(&unspec)), uintptr(len(unspec))); e != 0 {
			cerr = fmt.Errorf("disconnect: %w", e)
			return
		}
		// The socket is non-blocking: wait for the connection.
		if e := unix.Connect(int(fd), &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}); e != nil && e != unix.EINPROGRESS {
			cerr = fmt.Errorf("connect: %w", e)
			return
		}
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
		if _, e := unix.Poll(pfd, 2000); e != nil {
			cerr = e
			return
		}
		if _, e := unix.Getpeername(int(fd)); e != nil {
			cerr = fmt.Errorf("connect: %w", e)
		}
	})
	if err != nil {
		return err
	}
	return cerr
}
