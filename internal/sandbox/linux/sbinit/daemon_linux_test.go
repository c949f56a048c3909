package sbinit

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// seqpacketPair returns the init's end of an exec connection (as
// serveExec gets it from Accept) and the client's end.
func seqpacketPair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conv := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "conn")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c.(*net.UnixConn)
	}
	a, b := conv(fds[0]), conv(fds[1])
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func send(t *testing.T, c *net.UnixConn, m any, fds ...int) {
	t.Helper()
	b, ok := m.([]byte)
	if !ok {
		var err error
		if b, err = json.Marshal(m); err != nil {
			t.Fatal(err)
		}
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if _, _, err := c.WriteMsgUnix(b, oob, nil); err != nil {
		t.Fatal(err)
	}
}

func recvMsg(t *testing.T, c *net.UnixConn) Message {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	var m Message
	if err := json.Unmarshal(buf[:n], &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func pipeFDs(t *testing.T, n int) []int {
	t.Helper()
	var fds []int
	for len(fds) < n {
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		fds = append(fds, p[0], p[1])
	}
	t.Cleanup(func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	})
	return fds[:n]
}

// serveExec hands a well-formed request with its three descriptors to the
// main loop, relays the reply, the client's signals and the exit status.
func TestServeExec(t *testing.T) {
	srv, cli := seqpacketPair(t)
	execs := make(chan *execRequest)
	sigs := make(chan signalRequest)
	served := make(chan struct{})
	go func() { serveExec(srv, execs, sigs); close(served) }()

	send(t, cli, Message{Type: "exec", Argv: []string{"/bin/echo", "hi"}, Env: []string{"A=b"}, Dir: "/tmp"}, pipeFDs(t, 3)...)
	var r *execRequest
	select {
	case r = <-execs:
	case <-time.After(5 * time.Second):
		t.Fatal("no request reached the main loop")
	}
	if strings.Join(r.argv, " ") != "/bin/echo hi" || strings.Join(r.env, " ") != "A=b" || r.dir != "/tmp" {
		t.Errorf("request %+v", r)
	}
	for _, fd := range r.fds {
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC == 0 {
			t.Errorf("received fd %d: flags %#x, %v; want close-on-exec", fd, flags, err)
		}
		unix.Close(fd)
	}
	r.pid = 42
	r.reply <- Message{Type: "started", Pid: 42}
	if m := recvMsg(t, cli); m.Type != "started" || m.Pid != 42 {
		t.Fatalf("reply %+v", m)
	}
	send(t, cli, Message{Type: "signal", Signal: int(syscall.SIGINT)})
	send(t, cli, Message{Type: "signal", Signal: 0})   // ignored
	send(t, cli, Message{Type: "signal", Signal: 999}) // ignored
	send(t, cli, Message{Type: "signal", Signal: int(syscall.SIGTERM)})
	for _, want := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		select {
		case q := <-sigs:
			if q.r != r || q.sig != want {
				t.Errorf("signal request %v for %p, want %v for %p", q.sig, q.r, want, r)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("signal %v not relayed", want)
		}
	}
	r.reply <- Message{Type: "exit", Code: 3}
	if m := recvMsg(t, cli); m.Type != "exit" || m.Code != 3 {
		t.Fatalf("exit %+v", m)
	}
	select {
	case <-served:
	case <-time.After(5 * time.Second):
		t.Fatal("serveExec did not return after the exit")
	}
}

// Malformed requests are answered with an error and never reach the main
// loop; the descriptors that came with them are closed.
func TestServeExecRefuses(t *testing.T) {
	huge := []byte(`{"type":"exec","argv":["` + strings.Repeat("x", MaxExecMessage) + `"]}`)
	cases := []struct {
		name string
		msg  any
		fds  int
		want string
	}{
		{"two fds", Message{Type: "exec", Argv: []string{"/bin/true"}}, 2, "exactly 3"},
		{"four fds", Message{Type: "exec", Argv: []string{"/bin/true"}}, 4, "exactly 3"},
		{"no fds", Message{Type: "exec", Argv: []string{"/bin/true"}}, 0, "exactly 3"},
		{"not exec", Message{Type: "signal", Signal: 9}, 3, "unexpected"},
		{"no argv", Message{Type: "exec"}, 3, "no program"},
		{"empty argv0", Message{Type: "exec", Argv: []string{""}}, 3, "no program"},
		{"not json", []byte("{"), 3, "malformed"},
		{"too large", huge, 3, "larger than"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv, cli := seqpacketPair(t)
			if c.name == "too large" {
				if err := unix.SetsockoptInt(socketFD(t, cli), unix.SOL_SOCKET, unix.SO_SNDBUF, 4*MaxExecMessage); err != nil {
					t.Fatal(err)
				}
			}
			execs := make(chan *execRequest, 1)
			done := make(chan struct{})
			go func() { serveExec(srv, execs, make(chan signalRequest)); close(done) }()
			fds := pipeFDs(t, c.fds)
			before := openFDs(t)
			send(t, cli, c.msg, fds...)
			m := recvMsg(t, cli)
			if m.Type != "error" || !strings.Contains(m.Error, c.want) {
				t.Errorf("reply %+v, want an error with %q", m, c.want)
			}
			<-done
			if len(execs) != 0 {
				t.Error("the request reached the main loop")
			}
			// Every descriptor serveExec received is closed again.
			if after := openFDs(t); after > before {
				t.Errorf("%d descriptors open after, %d before", after, before)
			}
		})
	}
}

func socketFD(t *testing.T, c *net.UnixConn) int {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var fd int
	rc.Control(func(f uintptr) { fd = int(f) })
	return fd
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// At most MaxExecs connections are served at once; one more is refused
// with EAGAIN, and served again once a slot frees.
func TestAcceptExecsBound(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.sock")
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, MaxExecs); err != nil {
		t.Fatal(err)
	}
	ln, err := execListener(fd)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	execs := make(chan *execRequest)
	go acceptExecs(ln, execs, make(chan signalRequest))
	dial := func() *net.UnixConn {
		c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	var held []*execRequest
	for range MaxExecs {
		c := dial()
		send(t, c, Message{Type: "exec", Argv: []string{"/bin/true"}}, pipeFDs(t, 3)...)
		r := <-execs
		for _, fd := range r.fds {
			unix.Close(fd)
		}
		r.pid = len(held) + 2
		r.reply <- Message{Type: "started", Pid: r.pid}
		if m := recvMsg(t, c); m.Type != "started" {
			t.Fatalf("reply %+v", m)
		}
		held = append(held, r)
	}
	c := dial()
	send(t, c, Message{Type: "exec", Argv: []string{"/bin/true"}}, pipeFDs(t, 3)...)
	if m := recvMsg(t, c); m.Type != "error" || m.Errno != int(unix.EAGAIN) {
		t.Fatalf("exec %d = %+v, want EAGAIN", MaxExecs+1, m)
	}
	// One ends: its slot serves the next connection.
	held[0].reply <- Message{Type: "exit"}
	deadline := time.Now().Add(5 * time.Second)
	for {
		c := dial()
		send(t, c, Message{Type: "exec", Argv: []string{"/bin/true"}}, pipeFDs(t, 3)...)
		select {
		case r := <-execs:
			for _, fd := range r.fds {
				unix.Close(fd)
			}
			r.reply <- Message{Type: "error", Step: "exec", Error: "test"}
			return
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("no slot freed after an exec ended")
		}
	}
}

func TestExecListenerRefusesStream(t *testing.T) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := execListener(fd); err == nil {
		t.Error("a stream socket was accepted as the exec listener")
	}
}
