package evidence

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// InSituHost is the trusted side's half of the in-situ set: an abstract
// Unix socket and a loopback TCP port it opened in the host's network
// namespace just for this sandbox, so that any connection they accept
// before the host's own control connection came from inside. It must be
// opened on a thread in the host's network namespace (any unlocked
// goroutine of the trusted process).
type InSituHost struct {
	Full     bool
	Abstract string // name without the leading NUL
	Port     int
	unixFD   int
	tcpFD    int
}

// OpenInSitu opens the listeners. Close it after Judge.
func OpenInSitu(full bool) (*InSituHost, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	h := &InSituHost{Full: full, Abstract: "cordon-insitu-" + hex.EncodeToString(b[:]), unixFD: -1, tcpFD: -1}
	var err error
	if h.unixFD, err = listenFD(unix.AF_UNIX, &unix.SockaddrUnix{Name: "@" + h.Abstract}); err != nil {
		return nil, fmt.Errorf("in-situ abstract listener: %w", err)
	}
	if h.tcpFD, err = listenFD(unix.AF_INET, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		h.Close()
		return nil, fmt.Errorf("in-situ loopback listener: %w", err)
	}
	sa, err := unix.Getsockname(h.tcpFD)
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("in-situ loopback listener: %w", err)
	}
	h.Port = sa.(*unix.SockaddrInet4).Port
	return h, nil
}

func listenFD(family int, sa unix.Sockaddr) (int, error) {
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if err := unix.Listen(fd, 8); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// Close closes the listeners (and any connection still queued on them).
func (h *InSituHost) Close() {
	if h == nil {
		return
	}
	for _, fd := range []int{h.unixFD, h.tcpFD} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	h.unixFD, h.tcpFD = -1, -1
}

// InSituInputs say where the traces are.
type InSituInputs struct {
	Pid       int    // host pid of the sandbox init
	ProbeDir  string // sandbox path of the probe tmpfs
	Write     string // file name in ProbeDir the init tried to write after seccomp
	Control   string // sandbox path of the control write
	RoutePort int    // UDP port of the route attempt and its control
	Route     string // the non-loopback address of the route attempt
}

// Judge reads every trace of the attempts from the host and judges them.
func (h *InSituHost) Judge(in InSituInputs) *InSitu {
	start := time.Now()
	proc := fmt.Sprintf("/proc/%d", in.Pid)
	s := &InSitu{Set: "default"}
	if h.Full {
		s.Set = "full"
	}
	s.Checks = append(s.Checks, writeChecks(proc, in)...)
	s.Checks = append(s.Checks, h.acceptChecks(proc)...)
	s.Checks = append(s.Checks, fdChecks(proc, h.Full)...)
	s.Checks = append(s.Checks, routeChecks(proc, in)...)
	if h.Full {
		s.Checks = append(s.Checks, mountCheck(proc, in.ProbeDir))
	}
	s.JudgeMicros = time.Since(start).Microseconds()
	return s
}

// inRoot opens path under the sandbox's root without following any
// symlink (the root, seen from the host, is the sandbox's to shape).
func inRoot(proc, path string) error {
	root, err := unix.Open(proc+"/root", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(root)
	fd, err := unix.Openat2(root, strings.TrimPrefix(path, "/"), &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC | unix.O_NOFOLLOW, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS})
	if err != nil {
		return err
	}
	unix.Close(fd)
	return nil
}

func writeChecks(proc string, in InSituInputs) []Check {
	p := filepath.Join(in.ProbeDir, in.Write)
	err := inRoot(proc, p)
	c := Check{Name: "insitu_write_outside_writable", Boundary: Filesystem, Want: "absent", Got: errText(err, "present: the write landed"), Source: proc + "/root" + p}
	c.OK = errors.Is(err, unix.ENOENT)
	err = inRoot(proc, in.Control)
	ctl := Check{Name: "insitu_write_control", Boundary: Filesystem, Control: true, Want: "present", Got: errText(err, "present"), Source: proc + "/root" + in.Control}
	ctl.OK = err == nil
	return []Check{c, ctl}
}

// acceptChecks counts the connections queued on the host's listeners
// (must be none), then connects to each itself and counts again (must be
// exactly one: the counting sees a connection that does arrive).
func (h *InSituHost) acceptChecks(proc string) []Check {
	var out []Check
	for _, l := range []struct {
		name, src string
		fd        int
		sa        unix.Sockaddr
		family    int
	}{
		{"insitu_host_abstract_socket", "host abstract socket @" + h.Abstract, h.unixFD, &unix.SockaddrUnix{Name: "@" + h.Abstract}, unix.AF_UNIX},
		{"insitu_host_loopback_port", fmt.Sprintf("host listener 127.0.0.1:%d", h.Port), h.tcpFD, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}, Port: h.Port}, unix.AF_INET},
	} {
		b := Network
		if l.family == unix.AF_UNIX {
			b = IPC
		}
		foreign := 0
		n, err := drain(l.fd, 0, func(c int) bool {
			if outsideSandbox(proc, c, l.family, h.Port) {
				foreign++
				return false
			}
			return true
		})
		c := Check{Name: l.name, Boundary: b, Want: "0 connections accepted", Got: fmt.Sprintf("%d connections accepted", n), Source: l.src, OK: err == nil && n == 0}
		if foreign > 0 {
			c.Got += fmt.Sprintf(" (%d from outside the sandbox not counted)", foreign)
		}
		if err != nil {
			c.Got = "unreadable: " + err.Error()
		}
		ctl := Check{Name: l.name + "_control", Boundary: b, Control: true, Want: "the host's own connection accepted (1)", Source: l.src}
		n, err = hostConnect(l.fd, l.family, l.sa)
		if err != nil {
			ctl.Got = "connect: " + err.Error()
		} else {
			ctl.Got = fmt.Sprintf("%d connections accepted", n)
			ctl.OK = n == 1
		}
		out = append(out, c, ctl)
	}
	return out
}

// hostConnect is the control: the host connects to its own listener lfd
// and counts the connections it accepts that are its own. Anyone on the
// host can queue connections on the listeners too: they are not counted
// (the control would otherwise fail), and the connect never blocks (a
// blocking connect to a full abstract socket's backlog waits for ever);
// a full backlog fails the control instead (fail closed).
func hostConnect(lfd, family int, sa unix.Sockaddr) (int, error) {
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	if err := unix.Connect(fd, sa); err != nil && err != unix.EINPROGRESS {
		return 0, err
	}
	own := func(c int) bool {
		if family == unix.AF_UNIX {
			cred, err := unix.GetsockoptUcred(c, unix.SOL_SOCKET, unix.SO_PEERCRED)
			return err == nil && int(cred.Pid) == os.Getpid()
		}
		local, err1 := unix.Getsockname(fd)
		peer, err2 := unix.Getpeername(c)
		l4, ok1 := local.(*unix.SockaddrInet4)
		p4, ok2 := peer.(*unix.SockaddrInet4)
		return err1 == nil && err2 == nil && ok1 && ok2 && l4.Port == p4.Port && l4.Addr == p4.Addr
	}
	return drain(lfd, 1, own)
}

// drain accepts and closes every queued connection on a non-blocking
// listener; with want > 0 it waits up to 200ms for that many. count, if
// not nil, says whether an accepted connection is counted.
func drain(fd, want int, count func(c int) bool) (int, error) {
	n := 0
	deadline := time.Now().Add(200 * time.Millisecond)
	for {
		c, _, err := unix.Accept4(fd, unix.SOCK_CLOEXEC)
		if err == nil {
			if count == nil || count(c) {
				n++
			}
			unix.Close(c)
			continue
		}
		if err == unix.EINTR || err == unix.ECONNABORTED {
			continue
		}
		if err != unix.EAGAIN {
			return n, err
		}
		if n >= want || time.Now().After(deadline) {
			return n, nil
		}
		time.Sleep(time.Millisecond)
	}
}

// fdChecks reads the init's descriptors: the kernel objects the filter
// denies must be absent, the eventfd it allows present.
func fdChecks(proc string, full bool) []Check {
	links, err := fdLinks(proc)
	src := proc + "/fd"
	ctl := Check{Name: "insitu_kernel_object_control", Boundary: Process, Control: true, Want: "anon_inode:[eventfd] present", Source: src}
	if err != nil {
		ctl.Got = "unreadable: " + err.Error()
	} else {
		ctl.OK = slices.Contains(links, "anon_inode:[eventfd]")
		ctl.Got = fmt.Sprintf("%d descriptors; eventfd present: %v", len(links), ctl.OK)
	}
	out := []Check{ctl}
	objs := []struct{ name, link string }{
		{"insitu_io_uring_setup", "anon_inode:[io_uring]"},
		{"insitu_userfaultfd", "anon_inode:[userfaultfd]"},
	}
	if full {
		objs = append(objs, struct{ name, link string }{"insitu_bpf_map_create", "anon_inode:bpf-map"},
			struct{ name, link string }{"insitu_perf_event_open", "anon_inode:[perf_event]"})
	}
	for _, o := range objs {
		c := Check{Name: o.name, Boundary: Process, Want: o.link + " absent", Source: src}
		if err != nil {
			c.Got = "unreadable: " + err.Error()
		} else {
			c.OK = !slices.Contains(links, o.link)
			c.Got = o.link + " absent"
			if !c.OK {
				c.Got = o.link + " present: the call succeeded"
			}
		}
		out = append(out, c)
	}
	return out
}

func fdLinks(proc string) ([]string, error) {
	ents, err := os.ReadDir(proc + "/fd")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if l, err := os.Readlink(proc + "/fd/" + e.Name()); err == nil {
			out = append(out, l)
		}
	}
	return out, nil
}

// routeChecks reads the UDP sockets of the sandbox's network namespace:
// none may be connected to a non-loopback address (a route existed), and
// the control's socket, connected to the sandbox's own loopback, must be
// there.
func routeChecks(proc string, in InSituInputs) []Check {
	src := proc + "/net/udp"
	b, err := os.ReadFile(src)
	c := Check{Name: "insitu_route_out", Boundary: Network, Want: "no UDP socket connected to " + in.Route, Source: src}
	ctl := Check{Name: "insitu_route_control", Boundary: Network, Control: true, Want: fmt.Sprintf("a UDP socket connected to 127.0.0.1:%d", in.RoutePort), Source: src}
	if err != nil {
		c.Got, ctl.Got = "unreadable: "+err.Error(), "unreadable: "+err.Error()
		return []Check{c, ctl}
	}
	remotes, err := parseUDPRemotes(b)
	if err != nil {
		c.Got, ctl.Got = "unparsable: "+err.Error(), "unparsable: "+err.Error()
		return []Check{c, ctl}
	}
	var out []string
	for _, r := range remotes {
		if !strings.HasPrefix(r, "127.") && !strings.HasPrefix(r, "0.0.0.0:") {
			out = append(out, r)
		}
	}
	c.OK = len(out) == 0
	c.Got = fmt.Sprintf("non-loopback remotes: %v", out)
	ctl.OK = slices.Contains(remotes, fmt.Sprintf("127.0.0.1:%d", in.RoutePort))
	ctl.Got = fmt.Sprintf("remotes: %v", remotes)
	return []Check{c, ctl}
}

// mountCheck (full set): the mount over the probe dir must not exist.
// Control: the probe dir's own mount is there to be counted.
func mountCheck(proc, dir string) Check {
	c := Check{Name: "insitu_mount_over_probe_dir", Boundary: Filesystem, Want: "1 mount at " + dir, Source: proc + "/mountinfo"}
	ms, err := readMountinfo(proc + "/mountinfo")
	if err != nil {
		c.Got = "unreadable: " + err.Error()
		return c
	}
	n := 0
	for _, m := range ms {
		if m.target == dir {
			n++
		}
	}
	c.Got = fmt.Sprintf("%d mounts at %s", n, dir)
	c.OK = n == 1
	return c
}

// outsideSandbox says whether the accepted connection c provably came
// from outside the sandbox whose init is proc: the listeners live in the
// host's network namespace, where any local user can find them
// (/proc/net/unix, /proc/net/tcp) and connect, and such a connection is
// no fact about the sandbox (counting it would let a local user refuse
// every session and blame its boundary). Anything not provably foreign
// is counted (fail closed). Unix: the peer's pid namespace (SO_PEERCRED)
// is not the init's. TCP: the peer's socket is in the host's table and
// is not among the init's descriptors.
func outsideSandbox(proc string, c, family, port int) bool {
	if family == unix.AF_UNIX {
		cred, err := unix.GetsockoptUcred(c, unix.SOL_SOCKET, unix.SO_PEERCRED)
		if err != nil || cred.Pid <= 0 {
			return false
		}
		peer, err1 := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", cred.Pid))
		own, err2 := os.Readlink(proc + "/ns/pid")
		return err1 == nil && err2 == nil && peer != own
	}
	sa, err := unix.Getpeername(c)
	in4, ok := sa.(*unix.SockaddrInet4)
	if err != nil || !ok {
		return false
	}
	peer := netip.AddrPortFrom(netip.AddrFrom4(in4.Addr), uint16(in4.Port)).String()
	listener := fmt.Sprintf("127.0.0.1:%d", port)
	b, err := os.ReadFile("/proc/self/net/tcp")
	if err != nil || len(b) > maxUDPTable {
		return false
	}
	links, err := fdLinks(proc)
	if err != nil {
		return false
	}
	for i, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if i == 0 || len(f) < 10 {
			continue
		}
		local, err1 := parseHexAddr4(f[1])
		remote, err2 := parseHexAddr4(f[2])
		if err1 == nil && err2 == nil && local == peer && remote == listener && f[9] != "0" {
			return !slices.Contains(links, "socket:["+f[9]+"]")
		}
	}
	return false
}
