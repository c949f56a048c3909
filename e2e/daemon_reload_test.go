package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/testkit"
)

// SIGHUP never kills the daemon: it keeps serving on the same socket and
// reloads the host policy directory. A forbid added to the directory is
// not in force before the HUP (positive control: the drift scan, which
// also re-reads it, is an hour away) and is after it; an invalid set is
// refused as a whole, logged, and the set in force stays. SIGTERM
// still stops the daemon and leaves the sandboxes running.
func TestDaemonSIGHUPReloadsHostPolicy(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	pdir := t.TempDir()
	os.WriteFile(filepath.Join(pdir, "host.cedar"), []byte(`@id("no-evil") forbid(principal, action == Action::"model.invoke", resource == Model::"evil");`), 0o644)
	d := startDaemon(t, st, "--policy-dir", pdir, "--drift-interval", "1h")
	pid := d.cmd.Process.Pid
	waitFor(t, func() bool {
		return strings.Contains(d.String(), "daemon starting") && strings.Contains(d.String(), fmt.Sprintf("pid=%d", pid)) &&
			strings.Contains(d.String(), d.socket)
	}, "the start logged at INFO with socket and pid")

	up := testkit.NewModelUpstream(t, fakeKey, "via-reloaded-daemon")
	cfg := gatewayConfig(t, up.URL(), "")
	call := func(name string) result {
		t.Helper()
		if r := d.cli("sandbox", "create", name, "--config", cfg, "--", "/bin/sleep", "1000"); r.Code != 0 {
			t.Fatalf("create %s: %s", name, r.Stderr)
		}
		if r := d.cli("sandbox", "start", name); r.Code != 0 {
			t.Fatalf("start %s: %s", name, r.Stderr)
		}
		return d.cli("sandbox", "exec", name, "--", "/usr/bin/curl", "-sS", "--max-time", "10", "-H", "content-type: application/json",
			"-d", `{"model":"claude-x","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, "http://127.0.0.1:80/v1/messages")
	}
	hup := func() {
		t.Helper()
		if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	serving := func(when string) {
		t.Helper()
		select {
		case <-d.done:
			t.Fatalf("%s: the daemon exited: %s", when, d)
		case <-time.After(200 * time.Millisecond):
		}
		if fi, err := os.Stat(d.socket); err != nil || fi.Mode()&os.ModeSocket == 0 {
			t.Fatalf("%s: the socket is gone: %v", when, err)
		}
		if r := d.cli("sandbox", "ls", "--json"); r.Code != 0 {
			t.Fatalf("%s: sandbox ls: %d %s", when, r.Code, r.Stderr)
		}
	}

	forbid := filepath.Join(pdir, "no-claude-x.cedar")
	os.WriteFile(forbid, []byte(`@id("no-claude-x") forbid(principal, action == Action::"model.invoke", resource) when { resource.name like "claude-x*" };`), 0o644)
	// Positive control: written, not yet in force.
	if r := call("before"); r.Code != 0 || !strings.Contains(r.Stdout, "via-reloaded-daemon") {
		t.Fatalf("model call before the HUP: %d %s %s", r.Code, r.Stdout, r.Stderr)
	}

	hup()
	waitFor(t, func() bool { return strings.Contains(d.String(), "reload: host policy in force") }, "the reload logged")
	serving("after SIGHUP")
	r := call("after")
	if strings.Contains(r.Stdout, "via-reloaded-daemon") || !strings.Contains(r.Stdout, "denied by policy") {
		t.Fatalf("model call after the HUP, want the new forbid to deny it: %d %s %s", r.Code, r.Stdout, r.Stderr)
	}

	// An invalid set (a schema error), without the forbid: refused as a
	// whole, so the forbid stays in force and gateway sandboxes still plan.
	os.Remove(forbid)
	os.WriteFile(filepath.Join(pdir, "bad.cedar"), []byte(`permit(principal, action == Action::"model.invoke", resource) when { resource.name > 3 };`), 0o644)
	hup()
	waitFor(t, func() bool {
		return strings.Contains(d.String(), "host policy refused") && strings.Contains(d.String(), "bad.cedar")
	}, "the refusal logged, naming the bad file")
	serving("after SIGHUP with an invalid set")
	r = call("refused")
	if strings.Contains(r.Stdout, "via-reloaded-daemon") || !strings.Contains(r.Stdout, "denied by policy") {
		t.Fatalf("model call after a refused reload, want the old forbid still in force: %d %s %s", r.Code, r.Stdout, r.Stderr)
	}

	// SIGTERM keeps its meaning: the daemon stops accepting and exits 0,
	// its sandboxes keep running.
	init := d.ls()["refused"].InitPid
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !d.exited() {
		t.Fatalf("SIGTERM: the daemon did not exit: %s", d)
	}
	if c := d.cmd.ProcessState.ExitCode(); c != 0 || !strings.Contains(d.String(), "stopped accepting") {
		t.Fatalf("SIGTERM: exit %d\n%s", c, d)
	}
	if !alive(init) {
		t.Fatal("SIGTERM stopped a sandbox")
	}
}
