package e2e

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/testkit"
)

// logsFollow runs `cordon sandbox logs -f name` for at most limit; it
// reports the output and whether the command ended on its own.
func (d *daemon) logsFollow(name string, limit time.Duration) (string, bool) {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, cordonBin, "--state-dir", d.state, "sandbox", "logs", "-f", name)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "CORDON_SOCKET=" + d.socket}
	out, errf := tempOut(d.t), tempOut(d.t)
	cmd.Stdout, cmd.Stderr = out, errf
	err := cmd.Run()
	if ctx.Err() != nil {
		return readAll(out), false
	}
	if err != nil {
		d.t.Fatalf("logs -f %s: %v %s", name, err, readAll(errf))
	}
	return readAll(out), true
}

// `sandbox logs -f` follows the main program and ends when it exits,
// with everything it wrote, although the sandbox stays up for execs.
// Control: on a program that keeps running it does not end. --tail N
// prints the last N lines.
func TestDaemonLogsFollowEndsWithTheProgram(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	d := startDaemon(t, st)
	ws := userWorkspace(t)
	for name, script := range map[string]string{
		"ends":  "echo one; sleep 2; echo two >&2",
		"keeps": "echo up; exec sleep 1000",
	} {
		if r := d.cli("sandbox", "create", name, "--workspace", ws, "--", "/bin/sh", "-c", script); r.Code != 0 {
			t.Fatalf("create %s: %d %s", name, r.Code, r.Stderr)
		}
		if r := d.cli("sandbox", "start", name); r.Code != 0 {
			t.Fatalf("start %s: %d %s", name, r.Code, r.Stderr)
		}
	}
	out, ended := d.logsFollow("ends", 30*time.Second)
	if !ended || out != "one\ntwo\n" {
		t.Fatalf("logs -f of a program that exits: ended=%v %q, want ended with one and two", ended, out)
	}
	if i := d.ls()["ends"]; i.State != "running" || i.MainExit != "exit 0" {
		t.Errorf("after the program: %+v, want running, exit 0", i)
	}
	for tail, want := range map[string]string{"1": "two\n", "0": "", "5": "one\ntwo\n"} {
		if r := d.cli("sandbox", "logs", "ends", "--tail", tail); r.Code != 0 || r.Stdout != want {
			t.Errorf("logs --tail %s: %d %q %s, want %q", tail, r.Code, r.Stdout, r.Stderr, want)
		}
	}
	out, ended = d.logsFollow("keeps", 3*time.Second)
	if ended || !strings.Contains(out, "up") {
		t.Fatalf("logs -f of a running program: ended=%v %q, want still following, up", ended, out)
	}
}

// `sandbox ls --json` reports when a sandbox created since the daemon
// started was created (not the zero time), and the same after a restart
// (which adopts the running sandbox from its record); `ls` shows its AGE,
// `ls -q` its name alone.
func TestDaemonLsCreated(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	d := startDaemon(t, st)
	before := time.Now().Add(-2 * time.Second)
	d.createStart("c", "--workspace", userWorkspace(t), "--", "/bin/sleep", "1000")
	after := time.Now().Add(2 * time.Second)
	created := func() time.Time {
		r := d.cli("sandbox", "ls", "--json")
		var is []struct {
			Name    string    `json:"name"`
			Created time.Time `json:"created"`
		}
		if err := json.Unmarshal([]byte(r.Stdout), &is); err != nil || len(is) != 1 {
			t.Fatalf("ls: %v %s %s", err, r.Stdout, r.Stderr)
		}
		return is[0].Created
	}
	c1 := created()
	if c1.Before(before) || c1.After(after) {
		t.Fatalf("created %v, want between %v and %v", c1, before, after)
	}
	// -q: the names alone; the table: an AGE (seconds old, not years).
	if r := d.cli("sandbox", "ls", "-q"); r.Code != 0 || r.Stdout != "c\n" {
		t.Errorf("ls -q: %d %q %s, want c", r.Code, r.Stdout, r.Stderr)
	}
	if r := d.cli("sandbox", "ls", "-q", "--json"); r.Code != 125 || r.Stdout != "" || !strings.Contains(r.Stderr, "-q or --json") {
		t.Errorf("ls -q --json: %d %q %s, want a usage error", r.Code, r.Stdout, r.Stderr)
	}
	r := d.cli("sandbox", "ls")
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	if len(lines) != 2 || strings.Fields(lines[0])[4] != "AGE" || !strings.HasSuffix(strings.Fields(lines[1])[4], "s") {
		t.Errorf("ls table, want an AGE in seconds:\n%s%s", r.Stdout, r.Stderr)
	}
	d.kill()
	d.start()
	if c2 := created(); !c2.Equal(c1) {
		t.Fatalf("created after a restart %v, before %v", c2, c1)
	}
}
