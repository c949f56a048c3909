package proto

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cordon-project/cordon/internal/testkit"
	"golang.org/x/sys/unix"
)

// socketEnv names the socket the children of TestSocketModeRefusesOthers
// dial: the test binary re-execs itself under another uid as the child
// "dial-refused" or "dial-ok" with it set.
const socketEnv = "CORDON_PROTO_TEST_SOCKET"

func TestMain(m *testing.M) {
	testkit.Dispatch(map[string]func() int{
		"dial-refused": func() int { return child("dial-refused", os.Getenv(socketEnv)) },
		"dial-ok":      func() int { return child("dial-ok", os.Getenv(socketEnv)) },
	})
	os.Exit(m.Run())
}

// child dials the socket as whoever it runs as and prints what happened.
func child(mode, path string) int {
	// The socket itself must be reachable, so that a refusal comes from
	// its mode and not from a directory on the way.
	if _, err := os.Stat(path); err != nil {
		fmt.Println("stat:", err)
		return 3
	}
	c, err := Dial(path)
	switch mode {
	case "dial-refused":
		if errors.Is(err, syscall.EACCES) {
			fmt.Print("EACCES")
			return 0
		}
		fmt.Println("dial:", err)
		return 1
	case "dial-ok":
		if err != nil {
			fmt.Println("dial:", err)
			return 1
		}
		defer c.Close()
		var p Peer
		if err := c.Do(context.Background(), "peer", nil, nil, &p); err != nil {
			fmt.Println("peer:", err)
			return 1
		}
		json.NewEncoder(os.Stdout).Encode(p)
		return 0
	}
	return 2
}

func TestListenModeAndOwner(t *testing.T) {
	testkit.RequireRoot(t) // chown to another group
	dir := t.TempDir()
	// The widest umask: a socket bound now would be rwxrwxrwx.
	old := syscall.Umask(0)
	defer syscall.Umask(old)

	var windowMode uint32
	var windowErr error
	testHookAfterBind = func(p string) {
		var st unix.Stat_t
		unix.Lstat(p, &st)
		windowMode = st.Mode & 0o777
		c, err := net.Dial("unixpacket", p)
		if err == nil {
			c.Close()
		}
		windowErr = err
	}
	defer func() { testHookAfterBind = nil }()

	for _, tc := range []struct {
		mode     os.FileMode
		gid      int
		wantMode uint32
		wantGid  uint32
	}{
		{0o660, 65534, 0o660, 65534},
		{0, 65534, 0o660, 65534},
		{0, -1, 0o600, uint32(os.Getegid())},
		{0o600, 65534, 0o600, 65534},
	} {
		path := filepath.Join(dir, fmt.Sprintf("s%d-%o.sock", tc.gid, tc.mode))
		l, err := Listen(path, tc.mode, tc.gid)
		if err != nil {
			t.Fatalf("Listen(%#o, %d) = %v", tc.mode, tc.gid, err)
		}
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			t.Fatal(err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFSOCK || st.Mode&0o7777 != tc.wantMode || st.Uid != 0 || st.Gid != tc.wantGid {
			t.Errorf("Listen(%#o, %d): socket mode %#o uid %d gid %d, want %#o, 0, %d", tc.mode, tc.gid, st.Mode&0o7777, st.Uid, st.Gid, tc.wantMode, tc.wantGid)
		}
		// Before listen() the file had the umask's mode, but nobody
		// could connect through it.
		if !errors.Is(windowErr, syscall.ECONNREFUSED) {
			t.Errorf("connect between bind and listen (file mode %#o) = %v, want ECONNREFUSED", windowMode, windowErr)
		}
		l.Close()
		if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("after Close: %v, want the socket file removed", err)
		}
	}

	for _, mode := range []os.FileMode{0o666, 0o604, 0o4660, 0o1660, 0o662} {
		if _, err := Listen(filepath.Join(dir, "bad.sock"), mode, 65534); err == nil || !strings.Contains(err.Error(), "owner and its group only") {
			t.Errorf("Listen(mode %#o) = %v, want a refusal", mode, err)
		}
	}
}

func TestListenDirectory(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	base := t.TempDir()
	path := filepath.Join(base, "run", "cordon", "cordon.sock")
	l, err := Listen(path, 0, -1)
	if err != nil {
		t.Fatalf("Listen in a missing directory = %v", err)
	}
	l.Close()
	st, err := os.Stat(filepath.Dir(path))
	if err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("created directory: %v, %v; want mode 0755", st.Mode(), err)
	}

	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if l, err := Listen(filepath.Join(open, "s.sock"), 0, -1); err == nil || !strings.Contains(err.Error(), "writable by other users") {
		t.Errorf("Listen in a world-writable directory = %v, want a refusal", err)
		if l != nil {
			l.Close()
		}
	}
	if err := os.Chmod(open, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	l, err = Listen(filepath.Join(open, "s.sock"), 0, -1)
	if err != nil {
		t.Errorf("Listen in a sticky directory = %v", err)
	} else {
		l.Close()
	}
	if _, err := Listen("relative.sock", 0, -1); err == nil {
		t.Errorf("Listen(relative path) = nil, want an error")
	}
	if _, err := Listen("/"+strings.Repeat("a", 120), 0, -1); err == nil {
		t.Errorf("Listen(long path) = nil, want an error")
	}
}

func TestListenStaleAndLive(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cordon.sock")

	// A daemon that died leaves its socket file behind.
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	l, err := Listen(path, 0, -1)
	if err != nil {
		t.Fatalf("Listen over a stale socket = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go l.Serve(ctx, newTestHandler().serve)
	c := dial(t, path)
	if err := c.Do(context.Background(), "echo", nil, nil, nil); err != nil {
		t.Fatalf("Do on the replacing daemon = %v", err)
	}

	// A live one is left alone.
	if _, err := Listen(path, 0, -1); err == nil || !strings.Contains(err.Error(), "another daemon is listening") {
		t.Errorf("Listen over a live socket = %v, want another daemon is listening", err)
	}
	if err := c.Do(context.Background(), "echo", nil, nil, nil); err != nil {
		t.Errorf("Do on the first daemon after the second was refused = %v", err)
	}

	// Anything but a socket is never replaced.
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{file, link} {
		if _, err := Listen(p, 0, -1); err == nil || !strings.Contains(err.Error(), "is not a socket") {
			t.Errorf("Listen(%s) = %v, want a refusal", p, err)
		}
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "keep" {
		t.Errorf("the file was touched: %q, %v", b, err)
	}
}

// TestSocketModeRefusesOthers runs the test binary as nobody against a
// socket of mode 0600 (refused by the kernel: EACCES) and of mode 0660
// with nobody's group (served, with nobody as the peer).
func TestSocketModeRefusesOthers(t *testing.T) {
	testkit.RequireRoot(t) // run as another uid
	// A directory everyone can traverse, so that only the socket's mode
	// decides; the test binary is copied in so that nobody can run it.
	dir, err := os.MkdirTemp("", "cordon-proto-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "proto.test")
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}

	run := func(mode, path string) (string, error) {
		// The copy runs, with only what the child needs in its
		// environment.
		cmd := testkit.Child(t, mode)
		cmd.Path, cmd.Args[0] = bin, bin
		cmd.Env = []string{testkit.ChildVar + "=" + mode, socketEnv + "=" + path}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	start := func(path string, mode os.FileMode, gid int) {
		l, err := Listen(path, mode, gid)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { l.Serve(ctx, newTestHandler().serve); close(done) }()
		t.Cleanup(func() { cancel(); <-done })
	}

	private := filepath.Join(dir, "private.sock")
	start(private, 0, -1)
	if out, err := run("dial-refused", private); err != nil || out != "EACCES" {
		t.Errorf("nobody dialing a 0600 root socket: %q, %v; want EACCES", out, err)
	}

	shared := filepath.Join(dir, "shared.sock")
	start(shared, 0o660, 65534)
	out, err := run("dial-ok", shared)
	if err != nil {
		t.Fatalf("nobody dialing a 0660 socket of its group: %q, %v", out, err)
	}
	var p Peer
	if err := json.Unmarshal([]byte(out), &p); err != nil || p.UID != 65534 || p.GID != 65534 || p.PID <= 1 {
		t.Errorf("peer seen by the daemon = %q (%v), want uid and gid 65534", out, err)
	}
}
