package linux

// Execs and the console in a standalone sandbox (sandbox.Spec.Execs,
// sandbox.Image.TerminalAtStart): what an OCI runtime's keeper needs of a
// `cordon run`-like sandbox.
//
// With Spec.Execs the sandbox is a standalone one in every other respect:
// its record is of kind "run" (Reclaim removes its residue once its
// spawner is provably gone), the spawner holds the lease lock, the init
// keeps its parent-death signal, and the init ends when the main program
// ends, which ends every process in the sandbox. It also serves the exec
// channel exactly as a daemon-mode init does (daemon_linux.go: the
// listening socket <StateDir>/run/<id>.sock created before the spawn,
// ExecProcess, ExecProcessTerminal, Process.Signal and Wait), and the
// socket goes with Deprovision or Reclaim.
//
// With Image.TerminalAtStart (and Spec.Terminal) the init opens the
// program's pseudo-terminal after hardening and hands its master over in a
// "console" message before "ready" (sbinit.Config.TtyAtStart), so Master
// returns it right after Start.

import (
	"context"
	"fmt"
	"syscall"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/sandbox/linux/sbinit"
)

var _ sandbox.AllSignaler = (*linuxSandbox)(nil)

// checkExecsConsole refuses the combinations of Execs and the console at
// start that make no sense.
func (p *Provider) checkExecsConsole(spec sandbox.Spec) error {
	if spec.Execs && p.opts.Daemon {
		return failure.Failf(failure.KindUsage, "provision", "Spec.Execs is for a standalone sandbox: a daemon-mode sandbox serves execs already")
	}
	if spec.Image != nil && spec.Image.TerminalAtStart && spec.Terminal == nil {
		return failure.Failf(failure.KindUsage, "provision", "a console at start (Image.TerminalAtStart) needs a terminal (Spec.Terminal)")
	}
	return nil
}

// servesExecs reports whether the sandbox's init serves the exec channel.
func (sb *linuxSandbox) servesExecs() bool { return sb.p.opts.Daemon || sb.spec.Execs }

// consoleAtStart reports whether the program's terminal master is handed
// out at Start rather than at Exec.
func (sb *linuxSandbox) consoleAtStart() bool {
	return sb.spec.Terminal != nil && sb.spec.Image != nil && sb.spec.Image.TerminalAtStart
}

// modeConfig sets the init's modes: daemon (the exec listener and the
// lease lock follow the trees, from fd on: see spawn), Execs (the exec
// listener follows the trees; the spawner keeps the lease lock, as for any
// standalone run) and the console at start.
func (sb *linuxSandbox) modeConfig(cfg *sbinit.Config, fd int) {
	if sb.p.opts.Daemon {
		cfg.Daemon, cfg.ExecFD, cfg.LeaseLockFD = true, fd, fd+1
	}
	if sb.spec.Execs {
		cfg.Execs, cfg.ExecFD = true, fd
	}
	cfg.TtyAtStart = sb.consoleAtStart()
}

// receiveConsole takes the init's "console" message, which comes before
// "ready" with the console at start: exactly one descriptor, checked to be
// a pty master (checkMaster), kept for Master. The init closed its own
// copy before it sent "ready".
func (sb *linuxSandbox) receiveConsole(ctx context.Context) error {
	m, fds, err := sb.nextFDs(ctx, readyTimeout)
	if err != nil {
		closeAll(fds)
		return failure.Fail(failure.KindStart, "wait for init", err)
	}
	if m.Type != "console" || !m.Tty {
		closeAll(fds)
		if m.Type == "error" {
			return initFailure(m)
		}
		return failure.Failf(failure.KindStart, "sandbox init", "unexpected message %q, want the console", m.Type)
	}
	f, err := checkMaster(fds)
	if err != nil {
		return failure.Fail(failure.KindStart, "console", err)
	}
	sb.mu.Lock()
	sb.master = f
	sb.mu.Unlock()
	return nil
}

// SignalAll sends sig to every process of the started sandbox
// (sandbox.AllSignaler): SIGKILL ends the whole sandbox (kill, as Stop
// does); any other signal goes once to each process the host reads in the
// sandbox's cgroups (never a list the sandbox reports), through a pidfd
// opened before the pid was seen there again, except the init, cordon's
// own PID 1, which forwards signals to the main program and would deliver
// them twice. A process forked while the signals go out may miss it.
func (sb *linuxSandbox) SignalAll(sig syscall.Signal) error {
	if sig < 1 || sig > 64 {
		return failure.Failf(failure.KindUsage, "signal", "invalid signal %d", int(sig))
	}
	pid := sb.InitPid()
	if pid == 0 || sb.cg == nil {
		return failure.Failf(failure.KindUsage, "signal", "sandbox %s has not been started", sb.spec.ID)
	}
	select {
	case <-sb.done:
		return nil // nothing is left to signal
	default:
	}
	if sig == syscall.SIGKILL {
		sb.kill()
		return nil
	}
	if err := sb.cg.Signal(sig, pid); err != nil {
		return failure.Fail(failure.KindInternal, "signal", fmt.Errorf("sandbox %s: %w", sb.spec.ID, err))
	}
	return nil
}
