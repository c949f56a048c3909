package proto

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The Unix socket transport: AF_UNIX, SOCK_SEQPACKET. One frame is one
// datagram; descriptors ride beside it as SCM_RIGHTS.

// sendBuffer is asked of every socket's SO_SNDBUF: one datagram must fit
// the sender's buffer, and the default (wmem_default, ~208 KiB) is smaller
// than MaxFrame. The kernel doubles the value for its bookkeeping and, for
// an unprivileged SO_SNDBUF, caps it at wmem_max (~208 KiB by default, so
// ~416 KiB after doubling: enough).
const sendBuffer = MaxFrame + 64<<10

// listenBacklog is the kernel's queue of connections not yet accepted.
const listenBacklog = 128

// testHookAfterBind, when set, runs after bind and before the socket gets
// its mode, owner and listen(): tests use it to prove that nobody can
// connect in that window.
var testHookAfterBind func(path string)

// Listener is the daemon's socket. Set Logger and MaxConns before Serve.
type Listener struct {
	// Logger receives what clients are not told: handler failures behind
	// a KindInternal answer, refused frames and connections. nil discards.
	Logger *slog.Logger
	// MaxConns bounds the connections served at once; 0 means
	// DefaultMaxConns. Excess connections get a KindUnavailable answer
	// (ID 0) and are closed.
	MaxConns int

	path      string
	ln        *net.UnixListener
	dev, ino  uint64
	serving   atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

// Listen creates the daemon's socket at path (absolute) and returns it
// listening.
//
// The socket's directory is created (0755) when missing, and must belong
// to root (or to the caller) and be writable by nobody else unless it is
// sticky: otherwise another user could swap the socket for their own. A
// socket file left at path by a daemon that is gone is replaced; a
// socket something still listens on is refused ("another daemon is
// listening"), and anything that is not a socket is never touched.
//
// The socket file gets mode (owner and group bits only; 0 means 0660 when
// gid >= 0, else 0600) and, when gid >= 0, group gid; its owner is the
// caller (root, for the daemon). Both are set on the path after bind()
// and before listen(): until listen() every connect() to the socket is
// refused (ECONNREFUSED) whatever its mode, so no one ever connects
// through the mode the umask gave it. (The alternative, binding in a
// private directory and renaming into place, would leave getsockname and
// /proc/net/unix naming the temporary path.)
func Listen(path string, mode os.FileMode, gid int) (*Listener, error) {
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("listen on %s: the socket path must be absolute", path)
	}
	path = filepath.Clean(path)
	if len(path) >= len(unix.RawSockaddrUnix{}.Path) {
		return nil, fmt.Errorf("listen on %s: the path is longer than a socket address allows (%d bytes)", path, len(unix.RawSockaddrUnix{}.Path)-1)
	}
	if mode == 0 {
		mode = 0o600
		if gid >= 0 {
			mode = 0o660
		}
	}
	if uint32(mode)&^0o770 != 0 {
		return nil, fmt.Errorf("listen on %s: mode %#o: the socket may grant its owner and its group only", path, uint32(mode))
	}
	if err := socketDir(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := clearStale(path); err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}

	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: socket: %w", path, err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("listen on %s: bind: %w", path, err)
	}
	// From here on the file is ours: remove it if anything fails.
	fail := func(what string, err error) (*Listener, error) {
		unix.Close(fd)
		os.Remove(path)
		return nil, fmt.Errorf("listen on %s: %s: %w", path, what, err)
	}
	if testHookAfterBind != nil {
		testHookAfterBind(path)
	}
	// Narrow the mode first, then hand the group over.
	if err := unix.Fchmodat(unix.AT_FDCWD, path, uint32(mode), 0); err != nil {
		return fail("chmod", err)
	}
	if gid >= 0 {
		if err := unix.Lchown(path, -1, gid); err != nil {
			return fail("chown", err)
		}
	}
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return fail("stat", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK || st.Mode&0o7777 != uint32(mode) || (gid >= 0 && st.Gid != uint32(gid)) {
		return fail("check", fmt.Errorf("the socket file has mode %#o and group %d, want %#o and %d", st.Mode&0o7777, st.Gid, uint32(mode), gid))
	}
	if err := unix.Listen(fd, listenBacklog); err != nil {
		return fail("listen", err)
	}
	f := os.NewFile(uintptr(fd), path)
	nl, err := net.FileListener(f)
	f.Close()
	if err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	ln, ok := nl.(*net.UnixListener)
	if !ok {
		nl.Close()
		os.Remove(path)
		return nil, fmt.Errorf("listen on %s: not a Unix listener (%T)", path, nl)
	}
	return &Listener{path: path, ln: ln, dev: st.Dev, ino: st.Ino}, nil
}

// socketDir makes sure dir exists, is a directory, and only its owner
// (root, or the caller) can change what it holds.
func socketDir(dir string) error {
	st, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := os.Chmod(dir, 0o755); err != nil { // whatever the umask
			return err
		}
		st, err = os.Stat(dir)
	}
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	sys := st.Sys().(*syscall.Stat_t)
	if sys.Uid != 0 && int(sys.Uid) != os.Geteuid() {
		return fmt.Errorf("the socket's directory %s belongs to uid %d, not to root", dir, sys.Uid)
	}
	if st.Mode().Perm()&0o022 != 0 && st.Mode()&os.ModeSticky == 0 {
		return fmt.Errorf("the socket's directory %s (mode %#o) is writable by other users", dir, uint32(st.Mode().Perm()))
	}
	return nil
}

// clearStale removes a socket file at path that nothing listens on, and
// refuses anything else that is there.
func clearStale(path string) error {
	st, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if st.Mode().Type() != os.ModeSocket {
		return fmt.Errorf("%s exists and is not a socket; refusing to replace it", path)
	}
	c, err := net.DialTimeout("unixpacket", path, time.Second)
	switch {
	case err == nil:
		c.Close()
		return fmt.Errorf("another daemon is listening on %s", path)
	case errors.Is(err, syscall.ECONNREFUSED):
		// Stale: whoever bound it is gone.
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove the stale socket: %w", err)
		}
		return nil
	case errors.Is(err, syscall.ENOENT):
		return nil // gone meanwhile
	case errors.Is(err, syscall.EPROTOTYPE):
		return fmt.Errorf("another process is listening on %s (a socket of another type)", path)
	default:
		return fmt.Errorf("another daemon may be listening on %s: %w", path, err)
	}
}

// Path returns the socket's path.
func (l *Listener) Path() string { return l.path }

// Close stops accepting connections and removes the socket file (unless
// another has replaced it meanwhile). A running Serve then returns.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() {
		l.closeErr = l.ln.Close()
		var st unix.Stat_t
		if unix.Lstat(l.path, &st) == nil && st.Dev == l.dev && st.Ino == l.ino {
			if err := os.Remove(l.path); err != nil && l.closeErr == nil {
				l.closeErr = err
			}
		}
	})
	return l.closeErr
}

// Serve accepts connections and serves their requests with h until ctx
// ends or the Listener is closed; the end of ctx closes the Listener.
// Each connection's peer is read once (SO_PEERCRED) when it is accepted;
// its requests are served one at a time in order, different connections
// concurrently, at most MaxConns at once. A frame that cannot be decoded is
// answered with its *Error (against its ID when it had a readable one, else
// 0) and its connection closed. Once accepting stops, Serve cancels every
// connection's context, closes the connections and returns when every
// handler has returned: nil after Close, ctx.Err() when ctx ended.
func (l *Listener) Serve(ctx context.Context, h Handler) error {
	if h == nil {
		return errors.New("proto: Serve with a nil handler")
	}
	if !l.serving.CompareAndSwap(false, true) {
		return errors.New("proto: Serve called twice")
	}
	log := l.Logger
	if log == nil {
		log = discardLogger()
	}
	limit := l.MaxConns
	if limit <= 0 {
		limit = DefaultMaxConns
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	// The end of ctx closes the listener, which ends Accept. Close runs
	// again on the way out: sync.Once makes that wait for the socket
	// file's removal, and it covers a failing Accept too.
	context.AfterFunc(ctx, func() { l.Close() })
	defer l.Close()

	slots := make(chan struct{}, limit)
	rootSlots := make(chan struct{}, RootReserve)
	perUser := &userConns{n: map[uint32]int{}}
	var backoff time.Duration
	for {
		conn, err := l.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return ctx.Err()
			}
			if temporary(err) {
				// Out of descriptors or memory: wait and try again, as
				// net/http does, rather than stop serving.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				log.Warn("cordon-host: accept", "err", err, "retry_in", backoff)
				select {
				case <-time.After(backoff):
				case <-ctx.Done():
				}
				continue
			}
			return fmt.Errorf("accept on %s: %w", l.path, err)
		}
		backoff = 0
		// Who connected decides which slots it may take: root has its own
		// reserve (the emergency stop must always get through), and no
		// other user may hold more than MaxConnsPerUser at once.
		peer, err := peerOf(conn)
		if err != nil {
			log.Error("cordon-host: read the peer's credentials", "err", err)
			conn.Close()
			continue
		}
		pool := slots
		if peer.UID == 0 {
			pool = rootSlots
		}
		if !perUser.take(peer.UID) {
			log.Warn("cordon-host: refused a connection", "reason", "too many connections of this user", "uid", peer.UID, "max", MaxConnsPerUser)
			refuse(conn, Errorf(KindUnavailable, "you (uid %d) already hold %d connections to the daemon, the limit per user", peer.UID, MaxConnsPerUser))
			continue
		}
		select {
		case pool <- struct{}{}:
		default:
			perUser.give(peer.UID)
			log.Warn("cordon-host: refused a connection", "reason", "too many connections", "max", limit)
			refuse(conn, Errorf(KindUnavailable, "the daemon is serving %d connections, its limit; try again later", limit))
			continue
		}
		c := newSeqConn(conn, writeTimeout)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-pool; perUser.give(peer.UID) }()
			serveConn(ctx, c, peer, h, log)
		}()
	}
}

// RootReserve is the number of connections kept for uid 0 beyond
// MaxConns; MaxConnsPerUser bounds any other user's connections at once.
const (
	RootReserve     = 32
	MaxConnsPerUser = 16
)

// userConns counts each non-root user's open connections.
type userConns struct {
	mu sync.Mutex
	n  map[uint32]int
}

func (u *userConns) take(uid uint32) bool {
	if uid == 0 {
		return true
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.n[uid] >= MaxConnsPerUser {
		return false
	}
	u.n[uid]++
	return true
}

func (u *userConns) give(uid uint32) {
	if uid == 0 {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.n[uid]--; u.n[uid] <= 0 {
		delete(u.n, uid)
	}
}

// refuse answers a connection it will not serve with e (ID 0) and closes
// it, without waiting long for a client that does not read.
func refuse(conn *net.UnixConn, e *Error) {
	c := &seqConn{c: conn, writeTimeout: time.Second}
	if b, err := EncodeResponse(Response{Final: true, Error: e}); err == nil {
		c.writeFrame(b, nil)
	}
	c.Close()
}

// temporary reports whether an accept error may clear by itself.
func temporary(err error) bool {
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED, syscall.EINTR} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// peerOf reads the kernel's record of who connected.
func peerOf(c *net.UnixConn) (Peer, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return Peer{}, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return Peer{}, err
	}
	if cerr != nil {
		return Peer{}, fmt.Errorf("SO_PEERCRED: %w", cerr)
	}
	var groups []uint32
	if err := rc.Control(func(fd uintptr) { groups, cerr = peerGroups(int(fd)) }); err != nil {
		return Peer{}, err
	}
	if cerr != nil {
		return Peer{}, fmt.Errorf("SO_PEERGROUPS: %w", cerr)
	}
	return Peer{UID: cred.Uid, GID: cred.Gid, PID: cred.Pid, Groups: groups}, nil
}

// peerGroups reads the peer's supplementary groups at connect time
// (SO_PEERGROUPS): the buffer grows to what the kernel says it needs.
func peerGroups(fd int) ([]uint32, error) {
	buf := make([]uint32, 64)
	for {
		n := uint32(len(buf) * 4)
		_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)), 0)
		switch {
		case errno == unix.ERANGE && int(n/4) > len(buf) && n/4 <= 1<<16:
			buf = make([]uint32, n/4)
		case errno != 0:
			return nil, errno
		default:
			return buf[:n/4], nil
		}
	}
}

// Owns checks that the caller owns the file behind a descriptor it passed
// (fstat; the file's owner must be the peer's UID, root included) and
// returns an *Error of KindUnauthorized when it does not. The daemon calls
// it before it binds a workspace descriptor into a sandbox.
func (p Peer) Owns(f *os.File) error {
	st, err := f.Stat()
	if err != nil {
		return Errorf(KindBadRequest, "a descriptor the caller passed cannot be examined")
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return Errorf(KindInternal, "fstat gave no owner")
	}
	if sys.Uid != p.UID {
		return Errorf(KindUnauthorized, "a descriptor the caller passed belongs to uid %d, not to the caller (uid %d)", sys.Uid, p.UID)
	}
	return nil
}

// Dial connects to the daemon's socket at path.
func Dial(path string) (*Client, error) {
	conn, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		switch {
		case errors.Is(err, syscall.ENOENT):
			return nil, fmt.Errorf("no cordon daemon socket at %s (is `cordon daemon` running?): %w", path, err)
		case errors.Is(err, syscall.ECONNREFUSED):
			return nil, fmt.Errorf("nothing listens on %s (the daemon is not running): %w", path, err)
		case errors.Is(err, syscall.EACCES):
			return nil, fmt.Errorf("no permission to connect to %s (the daemon grants its socket to one group): %w", path, err)
		}
		return nil, fmt.Errorf("connect to the cordon daemon at %s: %w", path, err)
	}
	return newClient(newSeqConn(conn, 0)), nil
}

// seqConn is a frameConn over a SOCK_SEQPACKET Unix socket.
type seqConn struct {
	c            *net.UnixConn
	writeTimeout time.Duration // per write when > 0
	oob          []byte        // room for one descriptor more than MaxFiles
}

var _ frameConn = (*seqConn)(nil)

func newSeqConn(c *net.UnixConn, writeTimeout time.Duration) *seqConn {
	if rc, err := c.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) {
			// Root may pass wmem_max; anyone else gets at most it.
			if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, sendBuffer) != nil {
				unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF, sendBuffer)
			}
		})
	}
	return &seqConn{c: c, writeTimeout: writeTimeout, oob: make([]byte, unix.CmsgSpace(4*(MaxFiles+1)))}
}

func (s *seqConn) Close() error                      { return s.c.Close() }
func (s *seqConn) setDeadline(t time.Time) error     { return s.c.SetDeadline(t) }
func (s *seqConn) setReadDeadline(t time.Time) error { return s.c.SetReadDeadline(t) }

func (s *seqConn) readFrame(maxFiles int) ([]byte, []*os.File, error) {
	// Learn the size of the next datagram without taking it, so that an
	// idle connection holds no frame-sized buffer.
	size, err := s.peekSize()
	if err != nil {
		return nil, nil, s.readErr(err)
	}
	buf := make([]byte, max(1, size))
	if size > MaxFrame {
		buf = buf[:1] // it is refused unread
	}
	// net receives with MSG_CMSG_CLOEXEC on Linux: every descriptor
	// arrives close-on-exec.
	n, oobn, flags, _, err := s.c.ReadMsgUnix(buf, s.oob)
	files, ferr := parseRights(s.oob[:oobn])
	if err != nil {
		// io.EOF: the peer hung up (or sent an empty datagram, which
		// ends the connection too).
		closeFiles(files)
		return nil, nil, s.readErr(err)
	}
	switch {
	case flags&unix.MSG_TRUNC != 0 || size > MaxFrame || n > MaxFrame:
		closeFiles(files)
		return nil, nil, Errorf(KindTooLarge, "a frame of %d bytes is larger than the limit of %d bytes", size, MaxFrame)
	case ferr != nil:
		closeFiles(files)
		return nil, nil, ferr
	case flags&unix.MSG_CTRUNC != 0 || len(files) > maxFiles:
		closeFiles(files)
		if maxFiles == 0 {
			return nil, nil, Errorf(KindBadRequest, "the peer sent descriptors where none belong")
		}
		return nil, nil, Errorf(KindBadRequest, "too many descriptors in one request: at most %d", maxFiles)
	}
	return buf[:n], files, nil
}

// peekSize waits for the next datagram and returns its length (0 at the
// end of the connection), leaving it queued.
func (s *seqConn) peekSize() (int, error) {
	rc, err := s.c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		var one [1]byte
		for {
			n, _, _, _, rerr = unix.Recvmsg(int(fd), one[:], nil, unix.MSG_PEEK|unix.MSG_TRUNC|unix.MSG_DONTWAIT)
			if rerr != unix.EINTR {
				return rerr != unix.EAGAIN
			}
		}
	})
	if err != nil {
		return 0, err
	}
	if rerr != nil {
		return 0, os.NewSyscallError("recvmsg", rerr)
	}
	return n, nil
}

// readErr marks a reset connection as the peer's hang-up.
func (s *seqConn) readErr(err error) error {
	if errors.Is(err, syscall.ECONNRESET) {
		return fmt.Errorf("%w: %w", errPeerGone, err)
	}
	return err
}

// parseRights returns every descriptor in a control buffer, and an *Error
// when it holds anything but descriptors.
func parseRights(oob []byte) ([]*os.File, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, Errorf(KindBadRequest, "malformed control message")
	}
	var files []*os.File
	var bad error
	for i := range msgs {
		if msgs[i].Header.Level != unix.SOL_SOCKET || msgs[i].Header.Type != unix.SCM_RIGHTS {
			bad = Errorf(KindBadRequest, "a control message other than descriptors")
			continue
		}
		fds, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			bad = Errorf(KindBadRequest, "malformed descriptor message")
			continue
		}
		for _, fd := range fds {
			files = append(files, os.NewFile(uintptr(fd), fmt.Sprintf("cordon-host-fd-%d", len(files))))
		}
	}
	return files, bad
}

func (s *seqConn) writeFrame(b []byte, files []*os.File) error {
	if s.writeTimeout > 0 {
		s.c.SetWriteDeadline(time.Now().Add(s.writeTimeout))
	}
	err := withFDs(files, nil, func(fds []int) error {
		var oob []byte
		if len(fds) > 0 {
			oob = unix.UnixRights(fds...)
		}
		n, oobn, err := s.c.WriteMsgUnix(b, oob, nil)
		if err == nil && (n != len(b) || oobn != len(oob)) {
			err = io.ErrShortWrite
		}
		return err
	})
	switch {
	case errors.Is(err, syscall.EMSGSIZE):
		return Errorf(KindTooLarge, "a frame of %d bytes does not fit the socket's send buffer (net.core.wmem_max)", len(b))
	case errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNRESET):
		return fmt.Errorf("%w: %w", errPeerGone, err)
	}
	return err
}

// withFDs calls fn with the descriptors of files, each held open (against
// a concurrent Close) for the duration, and without putting them in
// blocking mode as File.Fd would.
func withFDs(files []*os.File, fds []int, fn func([]int) error) error {
	if len(files) == 0 {
		return fn(fds)
	}
	rc, err := files[0].SyscallConn()
	if err != nil {
		return fmt.Errorf("descriptor %d to pass: %w", len(fds), err)
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) {
		ferr = withFDs(files[1:], append(fds, int(fd)), fn)
	}); err != nil {
		return fmt.Errorf("descriptor %d to pass: %w", len(fds), err)
	}
	return ferr
}
