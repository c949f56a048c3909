package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/hostmgr"
	"github.com/cordon-project/cordon/internal/hostmgr/proto"
)

// complete runs `cordon __complete args…` in process and returns its
// stdout (the candidates, then :directive) and stderr.
func complete(t *testing.T, args ...string) (string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	g := &globals{stdout: &out, stderr: &errb}
	root := newRoot(g)
	root.SetArgs(append([]string{"__complete"}, args...))
	if err := root.Execute(); err != nil {
		t.Fatalf("__complete %q: %v", args, err)
	}
	return out.String(), errb.String()
}

// lsDaemon serves ls on a socket with the given names (a stand-in for
// the daemon; its ls is scoped per caller, tested in hostmgr).
func lsDaemon(t *testing.T, names ...string) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "d.sock")
	l, err := proto.Listen(sock, 0, -1)
	if err != nil {
		t.Fatalf("unix socket: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); l.Close() })
	go l.Serve(ctx, func(ctx context.Context, peer proto.Peer, req proto.Request, files []*os.File, reply func(proto.Response) error) error {
		var is []hostmgr.Info
		for _, n := range names {
			is = append(is, hostmgr.Info{Name: n})
		}
		b, _ := json.Marshal(is)
		return reply(proto.Response{Version: proto.Version, ID: req.ID, Final: true, Result: b})
	})
	return sock
}

// Every command that takes a sandbox name completes it from the daemon
// (with --socket or CORDON_SOCKET), filtered by what was typed; a name
// that is not a valid name never reaches the shell. Enumerated flags
// complete their values, file flags ask the shell for files.
func TestCompleteSandboxNames(t *testing.T) {
	sock := lsDaemon(t, "alpha", "beta", "bad name;rm -rf")
	for _, cmd := range [][]string{
		{"sandbox", "start"}, {"sandbox", "exec"}, {"sandbox", "stop"}, {"sandbox", "rm"}, {"sandbox", "logs"},
		{"sandbox", "status"}, {"sandbox", "profile"}, {"sandbox", "readmit"}, {"stop"},
	} {
		out, _ := complete(t, append(cmd, "--socket", sock, "")...)
		if out != "alpha\nbeta\n:4\n" {
			t.Errorf("complete %q = %q, want alpha, beta and no file completion", cmd, out)
		}
	}
	t.Setenv("CORDON_SOCKET", sock)
	if out, _ := complete(t, "sandbox", "stop", "b"); out != "beta\n:4\n" {
		t.Errorf("complete sandbox stop b (CORDON_SOCKET) = %q, want beta", out)
	}
	if out, _ := complete(t, "sandbox", "profile", "alpha", ""); out != "SAFE_GUIDED\nFULL_CONTROL_LAB\n:4\n" {
		t.Errorf("complete profile's second argument = %q", out)
	}
	if out, _ := complete(t, "sandbox", "status", "alpha", ""); out != ":4\n" {
		t.Errorf("complete past the name = %q, want nothing", out)
	}
	if out, _ := complete(t, "sandbox", "exec", "alpha", "--", ""); out != ":0\n" {
		t.Errorf("complete exec's program = %q, want the shell's files", out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"sandbox", "create", "x", "--profile", ""}, "SAFE_GUIDED\nFULL_CONTROL_LAB\n:4\n"},
		{[]string{"run", "--tty", ""}, "auto\nalways\nnever\n:4\n"},
		{[]string{"run", "--agent", "c"}, "claude\ncodex\n:4\n"},
		{[]string{"receipts", "--broker", "e"}, "egress\n:4\n"},
		{[]string{"run", "--level", "DEDICATED_C"}, "DEDICATED_CONTAINER\n:4\n"},
		{[]string{"run", "--config", ""}, ":0\n"},
		{[]string{"sandbox", "create", "x", "--workspace", ""}, ":16\n"},
	} {
		if out, _ := complete(t, c.args...); out != c.want {
			t.Errorf("complete %q = %q, want %q", c.args, out, c.want)
		}
	}
}

// With no daemon, or one that does not answer, completion prints no
// candidate and no error text, within its timeout. Positive control: the
// same command against a daemon that answers lists the names.
func TestCompleteWithoutDaemon(t *testing.T) {
	dir := t.TempDir()
	hang := filepath.Join(dir, "hang.sock")
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: hang, Net: "unixpacket"})
	if err != nil {
		t.Fatalf("unix socket: %v", err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close() // accepted, never answered
		}
	}()
	for _, sock := range []string{filepath.Join(dir, "absent.sock"), hang} {
		start := time.Now()
		out, errs := complete(t, "sandbox", "stop", "--socket", sock, "")
		if out != ":4\n" || strings.Contains(errs, "daemon") || strings.Contains(errs, "Error") {
			t.Errorf("complete against %s = %q, stderr %q; want nothing", filepath.Base(sock), out, errs)
		}
		if d := time.Since(start); d > completeTimeout+2*time.Second {
			t.Errorf("complete against %s took %v", filepath.Base(sock), d)
		}
	}
	if out, _ := complete(t, "sandbox", "stop", "--socket", lsDaemon(t, "up"), ""); out != "up\n:4\n" {
		t.Errorf("control: %q, want up", out)
	}
}
