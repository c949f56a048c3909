package probes

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/cordon-project/cordon/internal/conformance"
	"github.com/cordon-project/cordon/internal/conformance/record"
)

func init() {
	conformance.Register(conformance.Probe{
		ID:      "recovery.daemon-crash",
		Class:   record.Reset,
		Clause:  "§2.5 recovery; §6 lifecycle: deterministic stop/reset/recovery; §9: recovery cannot resume stale authority",
		Title:   "the daemon killed inside exec, stop and rm (test build: --test-crash-at): after the restart each sandbox is in the step's recorded state, its init alive only if running",
		Daemon:  true,
		Timeout: 120 * time.Second,
		Run:     daemonCrash,
	})
}

// hasFlag says whether `BIN args... --help` lists flag (a test build's
// hooks).
func hasFlag(ctx context.Context, bin, flag string, args ...string) bool {
	out, _ := exec.CommandContext(ctx, bin, append(args, "--help")...).CombinedOutput()
	return strings.Contains(string(out), flag)
}

// crashPoints are the lifecycle points the probe kills the daemon at, the
// command that reaches each, and the state the sandbox must be in after
// the restart ("" removed).
var crashPoints = []struct{ point, after string }{
	{"exec.after_start", "running"},
	{"stop.after_kill", "stopped"},
	{"rm.after_record", ""},
}

func crashDrive(point string) []string {
	switch point {
	case "exec.after_start":
		return []string{"sandbox", "exec", "x", "--", "/bin/sleep", "1000"}
	case "stop.after_kill":
		return []string{"sandbox", "stop", "x"}
	}
	return []string{"sandbox", "rm", "x"}
}

// daemonCrash: for each point, a daemon runs sandbox x; it is replaced
// by a daemon on the same state dir and socket that SIGKILLs itself at
// the point, the command reaching the point is sent, and the daemon is
// started again. From outside: the crash happened (the daemon exited
// without answering), the restarted daemon lists x in the point's
// recorded state, the init the host saw before the crash is alive only
// when running, and a running x takes an exec again. Control: before each
// crash the daemon listed x running and its init alive on the host.
func daemonCrash(ctx context.Context, e *conformance.Env) conformance.Outcome {
	if !hasFlag(ctx, e.Bin, "--test-crash-at", "daemon") {
		return conformance.Outcome{NotEvidenced: "killing the daemon at a lifecycle point needs the test build (cordon_testhooks: --test-crash-at); " +
			"e2e TestDaemonCrashRecovery evidences it (contract-tested only)"}
	}
	var facts []record.Fact
	for _, cp := range crashPoints {
		f, err := crashAt(ctx, e, cp.point, cp.after)
		if err != nil {
			return conformance.Outcome{Err: fmt.Errorf("%s: %w", cp.point, err)}
		}
		facts = append(facts, f...)
	}
	return conformance.Outcome{Facts: facts}
}

func crashAt(ctx context.Context, e *conformance.Env, point, want string) ([]record.Fact, error) {
	d, err := e.Daemon(ctx)
	if err != nil {
		return nil, err
	}
	if err := d.Create(ctx, "x", "--", "/bin/sleep", "1000"); err != nil {
		return nil, err
	}
	before, err := daemonLs(ctx, d, "x")
	if err != nil {
		return nil, err
	}
	initProc, ok := readHostProc(before.InitPid)
	if before.InitPid == 0 || !ok || !inOtherUserns(before.InitPid) {
		return nil, fmt.Errorf("the daemon lists init pid %d, not a sandbox process on the host", before.InitPid)
	}
	d.Stop()
	crashed, err := crashingDaemon(ctx, e, d, point)
	if err != nil {
		return nil, err
	}
	r, err := d.Cordon(ctx, crashDrive(point)...)
	if err != nil {
		return nil, err
	}
	died := false
	select {
	case <-crashed:
		died = true
	case <-time.After(10 * time.Second):
	}
	if err := d.Start(ctx); err != nil {
		return nil, err
	}
	after, lerr := daemonLs(ctx, d, "x")
	got := "removed"
	if lerr == nil {
		got = after.State
	}
	wantName := want
	if want == "" {
		wantName = "removed"
	}
	alive := initProc.alive()
	facts := []record.Fact{
		{Name: point + ": the daemon at the point", Want: "killed itself before answering", Got: fmt.Sprintf("exited %v; the client got exit %d", died, r.Code),
			OK: died && r.Code != 0, Source: "the daemon process (its exit), the client's exit status"},
		{Name: point + ": the sandbox after the restart", Want: wantName, Got: got, OK: got == wantName && (want == "" || after.ID == before.ID),
			Source: "cordon sandbox ls --json"},
		{Name: point + ": the init the host saw before the crash", Want: map[bool]string{true: "alive", false: "ended"}[want == "running"],
			Got: map[bool]string{true: "alive", false: "ended"}[alive], OK: alive == (want == "running"), Source: "the host's /proc (pid and start time)"},
		{Name: point + ": before the crash", Want: "running, init alive on the host", Got: before.State + ", init alive", OK: before.State == "running",
			Source: "cordon sandbox ls --json; the host's /proc", Control: true},
	}
	if want == "running" {
		x, err := d.Cordon(ctx, "sandbox", "exec", "x", "--", "/bin/true")
		if err != nil {
			return nil, err
		}
		facts = append(facts, record.Fact{Name: point + ": an exec in the adopted sandbox", Want: "exit 0", Got: fmt.Sprintf("exit %d", x.Code),
			OK: x.Code == 0, Source: "cordon sandbox exec's exit status"})
	}
	return facts, nil
}

// crashingDaemon replaces d (stopped) by a daemon on the same state dir,
// socket and volumes that SIGKILLs itself at point; the channel closes
// when it exits.
func crashingDaemon(ctx context.Context, e *conformance.Env, d *conformance.Daemon, point string) (<-chan struct{}, error) {
	args := []string{"--state-dir", d.StateDir}
	if e.Provider != "" {
		args = append(args, "--provider", e.Provider)
	}
	args = append(args, "daemon", "--socket", d.Socket, "--volume-dir", d.VolumeDir,
		"--settings", filepath.Join(e.Dir, "crash-daemon.conf"), "--test-crash-at", point)
	log, err := os.Create(filepath.Join(e.Dir, "crash-"+point+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(e.Bin, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); log.Close(); close(done) }()
	// Whatever happens, it does not outlive the probe.
	e.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	if !waitFor(10*time.Second, func() bool {
		c, err := net.Dial("unixpacket", d.Socket)
		if err == nil {
			c.Close()
		}
		return err == nil || ctx.Err() != nil
	}) {
		return nil, fmt.Errorf("the crashing daemon did not answer on %s", d.Socket)
	}
	return done, nil
}
