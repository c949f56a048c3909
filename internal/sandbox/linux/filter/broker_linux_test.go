//go:build linux && (amd64 || arm64)

package filter

import (
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// brokerChild installs the broker filter (or not, the control) and tries
// to create sockets: a TCP socket, a Unix socket connecting to the
// listener at path, and a socketpair. One "name errno" line per probe.
func brokerChild(install bool, path string) int {
	runtime.LockOSThread()
	if install && !installChildFilter(BuildBroker) {
		return 2
	}
	report := reportErrno
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
	if err == nil {
		unix.Close(fd)
	}
	report("socket-inet", err)
	c, err := net.Dial("unix", path)
	if err == nil {
		c.Close()
	}
	report("connect-unix", err)
	_, err = unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	report("socketpair", err)
	// The process keeps working: files and pipes are not sockets.
	r, w, err := os.Pipe()
	if err == nil {
		r.Close()
		w.Close()
	}
	report("pipe", err)
	return 0
}

// TestBrokerFilterLive: a child with the broker filter cannot create a
// socket of any family, so it cannot reach a pathname Unix socket on the
// host (which a network namespace would not isolate); the listener, on
// the host side, accepted nothing. The child without the filter is the
// positive control: the same listener accepts its connection.
func TestBrokerFilterLive(t *testing.T) {
	for _, tc := range []struct {
		mode       string
		want       map[string]syscall.Errno
		wantAccept int64
	}{
		{mode: "nobroker", want: map[string]syscall.Errno{"socket-inet": 0, "connect-unix": 0, "socketpair": 0, "pipe": 0}, wantAccept: 1},
		{mode: "broker", want: map[string]syscall.Errno{"socket-inet": unix.EPERM, "connect-unix": unix.EPERM, "socketpair": unix.EPERM, "pipe": 0}, wantAccept: 0},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "host.sock")
			ln, err := net.Listen("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			var accepted atomic.Int64
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					accepted.Add(1)
					c.Close()
				}
			}()
			got := runChild(t, tc.mode, path)
			for name, want := range tc.want {
				if g, ok := got[name]; !ok || g != want {
					t.Errorf("f(%q) = %v (reported %t), want %v", tc.mode+" "+name, g, ok, want)
				}
			}
			deadline := time.Now().Add(2 * time.Second)
			for accepted.Load() < tc.wantAccept && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			time.Sleep(50 * time.Millisecond)
			if n := accepted.Load(); n != tc.wantAccept {
				t.Errorf("f(%q) = %d, want %d", tc.mode+" connections the host listener accepted", n, tc.wantAccept)
			}
		})
	}
}

// TestBrokerDenied: the broker filter refuses everything the sandbox
// filter refuses outright, plus socket creation, connect, bind and listen,
// IPC, and signals that name another process by thread or pidfd.
func TestBrokerDenied(t *testing.T) {
	got := BrokerDenied()
	for _, name := range []string{"socket", "socketpair", "connect", "bind", "listen", "ptrace", "process_vm_readv", "setns", "unshare",
		"mount", "bpf", "io_uring_setup", "shmget", "msgget", "semget", "mq_open", "tkill", "pidfd_send_signal"} {
		if !slices.Contains(got, name) {
			t.Errorf("BrokerDenied() lacks %q", name)
		}
	}
	if _, err := BuildBroker(); err != nil {
		t.Fatalf("BuildBroker() = %v", err)
	}
}

// sourceChild installs the socket source filter and probes what it must
// and must not do. One "name errno" line per probe.
func sourceChild(path string) int {
	runtime.LockOSThread()
	if !installChildFilter(BuildSocketSource) {
		return 2
	}
	report := reportErrno
	fd4, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
	report("socket-inet", err)
	fd6, err := unix.Socket(unix.AF_INET6, unix.SOCK_STREAM, 0)
	report("socket-inet6", err)
	_, err = unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	report("socket-unix", err)
	_, err = unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW, 0)
	report("socket-netlink", err)
	if fd4 >= 0 {
		report("connect", unix.Connect(fd4, &unix.SockaddrInet4{Port: 1, Addr: [4]byte{127, 0, 0, 1}}))
		report("bind", unix.Bind(fd4, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}))
		report("listen", unix.Listen(fd4, 1))
	}
	if fd6 >= 0 {
		unix.Close(fd6)
	}
	_, err = unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	report("socketpair", err)
	return 0
}

// TestSocketSourceFilterLive: the socket source may create IP sockets
// and nothing else; it cannot connect, bind or listen.
func TestSocketSourceFilterLive(t *testing.T) {
	got := runChild(t, "source", "")
	want := map[string]syscall.Errno{"socket-inet": 0, "socket-inet6": 0, "socket-unix": unix.EPERM, "socket-netlink": unix.EPERM,
		"connect": unix.EPERM, "bind": unix.EPERM, "listen": unix.EPERM, "socketpair": unix.EPERM}
	for name, w := range want {
		if g, ok := got[name]; !ok || g != w {
			t.Errorf("f(%q) = %v (reported %t), want %v", "source "+name, g, ok, w)
		}
	}
}
