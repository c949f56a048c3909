package hostmgr

import (
	"bytes"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// listenNotify binds a unixgram socket as a service manager would.
func listenNotify(t *testing.T, addr string) *net.UnixConn {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func readDatagram(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("read a notification: %v", err)
	}
	return string(buf[:n])
}

// The notifier sends one datagram per message to a path socket and to an
// abstract one ('@'), and takes NOTIFY_SOCKET out of the environment so
// no child inherits it.
func TestNotifierSendsAndUnsets(t *testing.T) {
	for _, addr := range []string{
		filepath.Join(t.TempDir(), "notify"),
		"@cordon-test-notify-" + strings.ReplaceAll(t.Name(), "/", "-") + time.Now().Format("150405.000000000"),
	} {
		l := listenNotify(t, addr)
		t.Setenv(NotifyEnv, addr)
		n := NotifierFromEnv(nil)
		if n == nil {
			t.Fatalf("%s: no notifier", addr)
		}
		if v, ok := os.LookupEnv(NotifyEnv); ok {
			t.Fatalf("NOTIFY_SOCKET still set after reading it: %q", v)
		}
		if err := n.Ready("serving on x\ny"); err != nil {
			t.Fatalf("%s: ready: %v", addr, err)
		}
		got := readDatagram(t, l)
		if !strings.Contains(got, "READY=1\n") || !strings.Contains(got, "STATUS=serving on x y\n") || !strings.Contains(got, "MAINPID=") {
			t.Fatalf("%s: ready datagram %q", addr, got)
		}
		n.Reloading()
		if got := readDatagram(t, l); !strings.HasPrefix(got, "RELOADING=1\n") || !strings.Contains(got, "MONOTONIC_USEC=") {
			t.Fatalf("%s: reloading datagram %q", addr, got)
		}
		n.Stopping()
		if got := readDatagram(t, l); !strings.HasPrefix(got, "STOPPING=1\n") {
			t.Fatalf("%s: stopping datagram %q", addr, got)
		}
	}
}

// Unset means no notifier, and a nil notifier is a no-op.
func TestNotifierAbsent(t *testing.T) {
	t.Setenv(NotifyEnv, "")
	if n := NotifierFromEnv(nil); n != nil {
		t.Fatalf("empty NOTIFY_SOCKET gave a notifier")
	}
	var n *Notifier
	if err := n.Ready("x"); err != nil {
		t.Fatal(err)
	}
}

// A socket nobody listens on, or a name that is no socket address, never
// blocks: the send fails at once and is logged once at WARN, however many
// sends follow.
func TestNotifierBrokenSocketWarnsOnce(t *testing.T) {
	for _, addr := range []string{filepath.Join(t.TempDir(), "absent"), "relative/path"} {
		var log bytes.Buffer
		t.Setenv(NotifyEnv, addr)
		n := NotifierFromEnv(slog.New(slog.NewTextHandler(&log, nil)))
		start := time.Now()
		for range 3 {
			if err := n.Ready("x"); err == nil {
				t.Fatalf("%s: send to nothing succeeded", addr)
			}
		}
		if d := time.Since(start); d > 3*notifyTimeout {
			t.Fatalf("%s: sends took %s", addr, d)
		}
		if c := strings.Count(log.String(), "level=WARN"); c != 1 {
			t.Fatalf("%s: %d warnings, want 1:\n%s", addr, c, log.String())
		}
	}
}
