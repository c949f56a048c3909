package oci

import (
	"encoding/json"
	"fmt"
	"net"
	"os"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// MaxMessage bounds one message on a keeper's socket.
const MaxMessage = 256 << 10

// Request is one request to a keeper (keeper.sock, SOCK_SEQPACKET: one
// message per request). Only root reaches the socket (its directory is
// 0700 root): the engine's runtime calls.
type Request struct {
	Op string `json:"op"` // "start", "kill", "exec", "signal" (to an exec, on its connection)
	// kill / signal
	Signal int  `json:"signal,omitempty"`
	All    bool `json:"all,omitempty"`
	// exec: the process (its stdio, without a terminal, rides with the
	// message: SCM_RIGHTS, exactly three descriptors).
	Process *specs.Process `json:"process,omitempty"`
}

// Reply is a keeper's answer. For an exec: "started" (with the pty
// master as the one descriptor when Process.Terminal), then "exit".
type Reply struct {
	OK    bool   `json:"ok,omitempty"`
	Error string `json:"error,omitempty"`
	Kind  string `json:"kind,omitempty"`
	// exec
	Started bool `json:"started,omitempty"`
	Pid     int  `json:"pid,omitempty"`
	Exited  bool `json:"exited,omitempty"`
	Code    int  `json:"code,omitempty"` // 128+n for signal n
}

// Conn is one connection to or from a keeper.
type Conn struct{ c *net.UnixConn }

// NewConn wraps c.
func NewConn(c *net.UnixConn) *Conn { return &Conn{c: c} }

// Dial connects to container dir's keeper.
func Dial(dir string) (*Conn, error) {
	var c *net.UnixConn
	err := viaDir(dir, func(p string) (err error) {
		c, err = net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: p, Net: "unixpacket"})
		return err
	})
	if err != nil {
		return nil, err
	}
	return &Conn{c: c}, nil
}

// Listen listens on container dir's keeper socket (mode 0600).
func Listen(dir string) (*net.UnixListener, error) {
	var ln *net.UnixListener
	err := viaDir(dir, func(p string) (err error) {
		if ln, err = net.ListenUnix("unixpacket", &net.UnixAddr{Name: p, Net: "unixpacket"}); err != nil {
			return err
		}
		ln.SetUnlinkOnClose(false)
		return os.Chmod(p, 0o600)
	})
	if err != nil && ln != nil {
		ln.Close()
	}
	return ln, err
}

// viaDir runs f with the path of dir's keeper socket as
// /proc/self/fd/N/keeper.sock: engines' roots are deep (containerd's run
// dirs) and a socket's path is limited to 107 bytes.
func viaDir(dir string, f func(path string) error) error {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return f(fmt.Sprintf("/proc/self/fd/%d/%s", fd, SocketFile))
}

// Close closes the connection.
func (c *Conn) Close() error { return c.c.Close() }

// Send sends v with files attached (may be none).
func (c *Conn) Send(v any, files ...*os.File) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(b) > MaxMessage {
		return fmt.Errorf("message of %d bytes; at most %d", len(b), MaxMessage)
	}
	var oob []byte
	if len(files) > 0 {
		fds := make([]int, len(files))
		for i, f := range files {
			fds[i] = int(f.Fd())
		}
		oob = unix.UnixRights(fds...)
	}
	_, _, err = c.c.WriteMsgUnix(b, oob, nil)
	return err
}

// Recv receives one message into v and the descriptors that came with it
// (at most max; more is an error and every one received is closed).
func (c *Conn) Recv(v any, max int) ([]*os.File, error) {
	b := make([]byte, MaxMessage+1)
	oob := make([]byte, unix.CmsgSpace(4*max+4))
	n, oobn, flags, _, err := c.c.ReadMsgUnix(b, oob)
	if err != nil {
		return nil, err
	}
	var files []*os.File
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			fds, err := unix.ParseUnixRights(&m)
			if err != nil {
				continue
			}
			for _, fd := range fds {
				unix.CloseOnExec(fd)
				files = append(files, os.NewFile(uintptr(fd), "received"))
			}
		}
	}
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 || len(files) > max {
		closeAll()
		return nil, fmt.Errorf("message or descriptors truncated")
	}
	if n == 0 {
		closeAll()
		return nil, fmt.Errorf("connection closed")
	}
	if err := json.Unmarshal(b[:n], v); err != nil {
		closeAll()
		return nil, err
	}
	return files, nil
}
