package linux

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/evidence"
	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/sandbox/linux/sbinit"
	"github.com/cordon-project/cordon/internal/setns"
)

// An engine's network namespace (sandbox.Spec.EngineNet): the sandbox's
// init is spawned into it instead of a new one of its own.
//
// The spawning thread joins it (setns) before the clone: the init's
// other namespaces are created by the clone inside a new user namespace,
// and a process there could not join a network namespace the host's user
// namespace owns. The thread is locked to the init's spawning goroutine
// and never unlocked (runInit; daemon mode, which frees the thread, is
// refused), so it ends with the init and nothing else ever runs in the
// engine's namespace. The init holds no capability over that namespace
// and leaves its interfaces alone (sbinit.Config.EngineNet).

// checkEngineNet refuses an EngineNet the provider cannot join safely:
// in daemon mode, without a descriptor, or one setns.CheckEngineNet
// refuses (not a network namespace, the host's, another user namespace's).
func (p *Provider) checkEngineNet(spec sandbox.Spec) error {
	en := spec.EngineNet
	if en == nil {
		return nil
	}
	if p.opts.Daemon {
		return failure.Failf(failure.KindUnsupported, "provision", "an engine's network namespace is not joined by a resident sandbox")
	}
	if en.File == nil {
		return failure.Failf(failure.KindUsage, "provision", "engine network namespace %s: no descriptor", en.Path)
	}
	if err := setns.CheckEngineNet(en.File); err != nil {
		return failure.Failf(failure.KindPolicyRejected, "provision", "engine network namespace %s: %v", en.Path, err)
	}
	return nil
}

// engineNetConfig tells the init that it runs in an engine's network
// namespace.
func (sb *linuxSandbox) engineNetConfig(cfg *sbinit.Config) {
	cfg.EngineNet = sb.spec.EngineNet != nil
}

// netAttr leaves CLONE_NEWNET out of the init's clone when it is spawned
// into an engine's namespace.
func (sb *linuxSandbox) netAttr(attr *syscall.SysProcAttr) {
	if sb.spec.EngineNet != nil {
		attr.Cloneflags &^= syscall.CLONE_NEWNET
	}
}

// joinEngineNet moves the calling (locked spawning) thread into the
// engine's network namespace; it checks the descriptor again first.
func (sb *linuxSandbox) joinEngineNet() error {
	en := sb.spec.EngineNet
	if en == nil {
		return nil
	}
	if err := setns.CheckEngineNet(en.File); err != nil {
		return failure.Failf(failure.KindPolicyRejected, "spawn", "engine network namespace %s: %v", en.Path, err)
	}
	home, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return failure.Fail(failure.KindStart, "spawn: the spawning thread's network namespace", err)
	}
	if err := unix.Setns(int(en.File.Fd()), unix.CLONE_NEWNET); err != nil {
		home.Close()
		return failure.Failf(failure.KindStart, "spawn", "join engine network namespace %s: %v", en.Path, err)
	}
	sb.netHome = home
	return nil
}

// leaveEngineNet runs on the spawning thread once the init is gone. Go
// ends a locked thread when its goroutine returns, except the main
// thread, which it parks for good instead: that one goes back to its own
// network namespace (as it leaves its cgroups), so that no thread of this
// process stays in, and keeps alive, the engine's namespace. If it cannot,
// the thread stays parked there and never runs anything again.
func (sb *linuxSandbox) leaveEngineNet(mainThread bool) {
	if sb.netHome == nil {
		return
	}
	if mainThread {
		if err := unix.Setns(int(sb.netHome.Fd()), unix.CLONE_NEWNET); err != nil {
			sb.p.opts.Logger.Warn("return main thread to its network namespace", "err", err)
		}
	}
	sb.netHome.Close()
	sb.netHome = nil
}

// engineNetEvidence, for a sandbox in an engine's network namespace,
// keeps its network boundary unverified with the fact that says why
// (evidence.WithEngineNet) and adds the record's non-claim. Call it on the
// boundaries as read, before the level is admitted.
func (sb *linuxSandbox) engineNetEvidence(b map[string]evidence.Boundary) (nonClaim string) {
	en := sb.spec.EngineNet
	if en == nil {
		return ""
	}
	e := &evidence.EngineNet{Path: en.Path, Reason: en.Reason}
	evidence.WithEngineNet(b, e)
	return evidence.EngineNetNonClaim(e, b[evidence.Network])
}
