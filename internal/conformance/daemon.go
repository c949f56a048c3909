package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/cordon-project/cordon/internal/hostmgr"
)

// Daemon is a `cordon daemon` a probe started (Env.Daemon) on its own
// state directory and socket, both under the probe's Dir. The socket is
// root's only (no --group: mode 0600, in a 0700 directory). When the
// probe ends every sandbox it holds is removed, the daemon is stopped and
// `cordon gc` runs on its state directory.
type Daemon struct {
	// StateDir is the daemon's state directory (its store, evidence log,
	// lease range); Socket is where it serves; VolumeDir holds its
	// volumes.
	StateDir, Socket, VolumeDir string

	e       *Env
	args    []string // more `cordon daemon` flags (DaemonWith)
	logPath string
	cmd     *exec.Cmd
	done    chan struct{}
}

// Daemon starts a cordon daemon of the binary under test (with the
// suite's --provider) and returns once its socket answers.
func (e *Env) Daemon(ctx context.Context) (*Daemon, error) { return e.DaemonWith(ctx) }

// DaemonWith is Daemon with more `cordon daemon` flags (--group,
// --policy-dir, --drift-interval), kept for every later Start.
func (e *Env) DaemonWith(ctx context.Context, args ...string) (*Daemon, error) {
	e.mu.Lock()
	e.daemons++
	n := e.daemons
	e.mu.Unlock()
	d := &Daemon{e: e, StateDir: e.StateDir(), args: args}
	base := filepath.Join(e.Dir, fmt.Sprintf("daemon%d", n))
	if err := os.Mkdir(base, 0o711); err != nil {
		return nil, err
	}
	sockDir := filepath.Join(base, "run")
	if err := os.Mkdir(sockDir, 0o700); err != nil {
		return nil, err
	}
	d.Socket = filepath.Join(sockDir, "d.sock")
	if len(d.Socket) > 100 { // sun_path holds 108 bytes
		short, err := os.MkdirTemp("", "cdsock-")
		if err != nil {
			return nil, err
		}
		e.Cleanup(func() { os.RemoveAll(short) })
		d.Socket = filepath.Join(short, "d.sock")
	}
	d.VolumeDir = filepath.Join(base, "volumes")
	if err := os.Mkdir(d.VolumeDir, 0o711); err != nil {
		return nil, err
	}
	d.logPath = filepath.Join(base, "daemon.log")
	// Registered before the start: a daemon that answers late is still
	// stopped, and what it created removed.
	e.Cleanup(d.cleanup)
	if err := d.Start(ctx); err != nil {
		return nil, err
	}
	return d, nil
}

// Start starts the daemon (again, after Stop or Kill) on the same state
// directory and socket and waits until the socket answers.
func (d *Daemon) Start(ctx context.Context) error {
	if d.Running() {
		return errors.New("conformance: the daemon is already running")
	}
	lf, err := os.OpenFile(d.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer lf.Close()
	args := append(d.e.globals(d.StateDir), "daemon", "--socket", d.Socket, "--volume-dir", d.VolumeDir,
		// No host settings file: the suite's daemon runs with its defaults.
		"--settings", filepath.Join(filepath.Dir(d.logPath), "daemon.conf"))
	args = append(args, d.args...)
	// Not CommandContext: the daemon outlives the call that starts it;
	// the probe's cleanup ends it.
	d.cmd = exec.Command(d.e.Bin, args...)
	d.cmd.Env = []string{"PATH=/usr/bin:/bin"}
	d.cmd.Stdout, d.cmd.Stderr = lf, lf
	if err := d.cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	d.done = done
	cmd := d.cmd
	go func() { _ = cmd.Wait(); close(done) }()
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		if c, err := net.Dial("unixpacket", d.Socket); err == nil {
			c.Close()
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("cordon daemon exited at start (%s): %s", cmd.ProcessState, lastLines(d.Log(), 5))
		case <-ctx.Done():
			d.Kill()
			return fmt.Errorf("cordon daemon did not answer on %s: %w: %s", d.Socket, ctx.Err(), lastLines(d.Log(), 5))
		case <-tick.C:
		}
	}
}

// Running reports whether the daemon this Daemon started is still alive.
func (d *Daemon) Running() bool {
	if d.done == nil {
		return false
	}
	select {
	case <-d.done:
		return false
	default:
		return true
	}
}

// Pid is the daemon's pid (0 before the first Start).
func (d *Daemon) Pid() int {
	if d.cmd == nil || d.cmd.Process == nil {
		return 0
	}
	return d.cmd.Process.Pid
}

// Stop sends SIGTERM and waits (SIGKILL after 15 s). The daemon's
// sandboxes keep running; the next Start adopts them.
func (d *Daemon) Stop() {
	if !d.Running() {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(15 * time.Second):
		d.Kill()
	}
}

// Kill SIGKILLs the daemon (a crash) and waits for it.
func (d *Daemon) Kill() {
	if !d.Running() {
		return
	}
	_ = d.cmd.Process.Kill()
	<-d.done
}

// Log is what the daemon has logged so far.
func (d *Daemon) Log() string {
	b, _ := os.ReadFile(d.logPath)
	return string(b)
}

// Cordon runs a client command (`sandbox create ...`, `sandbox exec
// ...`, `daemon status`, `volume ...`) against this daemon: its socket is
// passed as CORDON_SOCKET, which every client command's --socket
// defaults to, and its state directory and the suite's provider as the
// global flags.
func (d *Daemon) Cordon(ctx context.Context, args ...string) (RunResult, error) {
	return d.e.cordonWith(ctx, d.StateDir, []string{"CORDON_SOCKET=" + d.Socket}, args...)
}

// Create creates sandbox name with the suite's --profile and --level
// (args are more `sandbox create` arguments, "-- PROGRAM ARGS..." last)
// and starts it. A refusal of either step is an error naming it.
func (d *Daemon) Create(ctx context.Context, name string, args ...string) error {
	ca := []string{"sandbox", "create", name}
	if p := d.e.Profile; p != "" {
		ca = append(ca, "--profile", p)
		if p == string(hostmgr.FullControlLab) {
			ca = append(ca, "--accept", hostmgr.AcceptPhrase(name))
		}
	}
	if d.e.Level != "" {
		ca = append(ca, "--level", d.e.Level)
	}
	r, err := d.Cordon(ctx, append(ca, args...)...)
	if err != nil {
		return err
	}
	if r.Code != 0 {
		return fmt.Errorf("sandbox create %s: exit %d: %s", name, r.Code, firstLine(r.Stderr))
	}
	if r, err = d.Cordon(ctx, "sandbox", "start", name); err != nil {
		return err
	}
	if r.Code != 0 {
		return fmt.Errorf("sandbox start %s: exit %d: %s", name, r.Code, firstLine(r.Stderr))
	}
	return nil
}

// cleanup removes every sandbox the daemon holds (through a fresh daemon
// if this one is gone: the records say what exists), then stops it. The
// state dir's gc cleanup, registered earlier, runs after this one.
func (d *Daemon) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if !d.Running() {
		if d.cmd == nil || d.Start(ctx) != nil {
			return
		}
	}
	if r, err := d.Cordon(ctx, "sandbox", "ls", "--json"); err == nil && r.Code == 0 {
		var is []struct{ Name string }
		_ = json.Unmarshal([]byte(r.Stdout), &is)
		for _, i := range is {
			_, _ = d.Cordon(ctx, "sandbox", "rm", i.Name)
		}
	}
	d.Stop()
}

func lastLines(s string, n int) string {
	ls := strings.Split(strings.TrimSpace(s), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}
