package probes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cordon-project/cordon/internal/conformance"
	"github.com/cordon-project/cordon/internal/conformance/record"
)

func init() {
	conformance.Register(conformance.Probe{
		ID:     "bypass.proc.host-process",
		Class:  record.Bypass,
		Clause: "§2.2 every undeclared route is denied by a control outside the agent: host processes",
		Title:  "a host process the runner owns survives the sandbox's kill, ptrace and /proc/PID/mem attempts",
		Run:    hostProcess,
	})
	conformance.Register(conformance.Probe{
		ID:     "bypass.proc.sandbox-init",
		Class:  record.Bypass,
		Clause: "§2.2 every undeclared route is denied by a control outside the agent: the sandbox's own trusted init",
		Title:  "the program cannot kill, ptrace or open the memory of its sandbox's init: the init lives on, untraced",
		Run:    sandboxInit,
	})
	conformance.Register(conformance.Probe{
		ID:     "bypass.other-sandbox",
		Class:  record.Bypass,
		Clause: "§2.2 every undeclared route is denied by a control outside the agent: other sandboxes' files and processes",
		Title:  "a sandbox cannot read a concurrent sandbox's workspace (by host path or through its /proc root) nor kill or trace its processes",
		Run:    otherSandbox,
	})
}

// tracer is pid's TracerPid (from /proc/PID/status on the host).
func tracer(pid int) string {
	st, err := procStatus(pid)
	if err != nil {
		return err.Error()
	}
	return st["TracerPid"]
}

// hostProcess: the runner holds a sacrificial process on the host; the
// program tries to SIGKILL it, ptrace it and open its memory. The host
// sees it alive and untraced. Control: the same kill op run on the host
// against a second sacrificial process kills it.
func hostProcess(ctx context.Context, e *conformance.Env) conformance.Outcome {
	victim, err := startHostHeld(ctx, e, nil, "ids")
	if err != nil {
		return broke(err)
	}
	pid := strconv.Itoa(victim.Pid())
	r, err := e.Run(ctx, conformance.RunOpts{Op: []string{"procattack", pid}})
	if err != nil {
		return broke(err)
	}
	if err := ranOp(r); err != nil {
		return broke(err)
	}
	ended := victim.Ended(200 * time.Millisecond)
	tr := tracer(victim.Pid())
	second, err := startHostHeld(ctx, e, nil, "ids")
	if err != nil {
		return broke(err)
	}
	if _, err := e.HostOp(ctx, "kill", strconv.Itoa(second.Pid()), "9"); err != nil {
		return broke(err)
	}
	killed := second.Ended(5*time.Second) && second.WaitStatus().Signaled() && second.WaitStatus().Signal() == syscall.SIGKILL
	return conformance.Outcome{Hint: r.Hint(), Facts: []record.Fact{
		fact("the runner's process "+pid+" after the sandbox's SIGKILL", "alive", aliveText(!ended && pidAlive(victim.Pid())), !ended && pidAlive(victim.Pid()), "wait status and /proc/PID/status on the host"),
		fact("its TracerPid after the sandbox's ptrace attach", "0", tr, tr == "0", "/proc/PID/status on the host"),
		control("a second runner process after the same kill op on the host", "killed by SIGKILL", map[bool]string{true: "killed by SIGKILL", false: "not killed"}[killed], killed, "its wait status on the host"),
	}}
}

func aliveText(alive bool) string {
	if alive {
		return "alive"
	}
	return "ended"
}

// sandboxInit: the program, held after attacking its parent, the
// sandbox's init (SIGKILL, ptrace, /proc/PID/mem; by getppid, never pid 1,
// which under a provider that isolates nothing is the host's init); the host finds the sandbox's init alive and untraced, and
// the run ends normally. Control: a second sandbox whose init the host
// kills ends with signal 9 (the run would show a dead init).
func sandboxInit(ctx context.Context, e *conformance.Env) conformance.Outcome {
	h, err := e.Start(ctx, conformance.RunOpts{Op: []string{"hold", "ppidattack"}})
	if err != nil {
		return broke(err)
	}
	initPid, _, err := h.Pids()
	if err != nil {
		return broke(err)
	}
	alive, tr := pidAlive(initPid), tracer(initPid)
	r, err := h.Finish(ctx)
	if err != nil {
		return broke(err)
	}
	c, err := e.Start(ctx, conformance.RunOpts{Op: []string{"hold", "ids"}})
	if err != nil {
		return broke(err)
	}
	cinit, _, err := c.Pids()
	if err != nil {
		return broke(err)
	}
	if err := syscall.Kill(cinit, syscall.SIGKILL); err != nil {
		return broke(err)
	}
	cr, err := c.Finish(ctx)
	if err != nil {
		return broke(err)
	}
	return conformance.Outcome{Hint: r.Hint(), Facts: []record.Fact{
		fact("the sandbox's init after the program's attacks", "alive", aliveText(alive), alive, fmt.Sprintf("/proc/%d/status on the host", initPid)),
		fact("the init's TracerPid", "0", tr, tr == "0", fmt.Sprintf("/proc/%d/status on the host", initPid)),
		fact("cordon run's exit after the attacks", "0", strconv.Itoa(r.Code), r.Code == 0, "cordon run's exit status"),
		control("cordon run's exit after the host killed a second sandbox's init", "137", strconv.Itoa(cr.Code), cr.Code == 128+9, "cordon run's exit status"),
	}}
}

// otherSandbox: sandbox A holds with a secret in its workspace; sandbox B
// (same state directory: another lease) reads it by its host path, through
// A's /proc root and at /workspace, and attacks A's init and program. The
// host finds the secret nowhere in B's output, A's processes alive and
// untraced, and the two on distinct host uids. Controls: the host reads
// the secret through A's /proc root, and the kill op on the host reaches
// A's program (signal 0).
func otherSandbox(ctx context.Context, e *conformance.Env) conformance.Outcome {
	wsA, err := newWorkspace(e, "ws-a")
	if err != nil {
		return broke(err)
	}
	secret := "sandbox-a-" + randToken(16)
	p := filepath.Join(wsA.Sub, "secret")
	if err := os.WriteFile(p, []byte(secret), 0o600); err != nil {
		return broke(err)
	}
	if err := os.Chown(p, wsOwnerUID, wsOwnerUID); err != nil {
		return broke(err)
	}
	st := e.StateDir()
	a, err := e.Start(ctx, conformance.RunOpts{StateDir: st, Flags: []string{"--workspace", wsA.Dir}, Op: []string{"hold", "ids"}})
	if err != nil {
		return broke(err)
	}
	initA, progA, err := a.Pids()
	if err != nil {
		return broke(err)
	}
	wsB, err := newWorkspace(e, "ws-b")
	if err != nil {
		return broke(err)
	}
	viaProc := fmt.Sprintf("/proc/%d/root%s/secret", progA, wsA.In)
	b, err := e.Run(ctx, conformance.RunOpts{StateDir: st, Flags: []string{"--workspace", wsB.Dir}, Op: []string{"reads", p, viaProc, wsA.In + "/secret"}})
	if err != nil {
		return broke(err)
	}
	if err := ranOp(b); err != nil {
		return broke(err)
	}
	bk, err := e.Start(ctx, conformance.RunOpts{StateDir: st, Op: []string{"hold", "procattack", strconv.Itoa(initA), strconv.Itoa(progA)}})
	if err != nil {
		return broke(err)
	}
	_, progB, err := bk.Pids()
	if err != nil {
		return broke(err)
	}
	ua, _ := hostUID(progA)
	ub, _ := hostUID(progB)
	bkr, err := bk.Finish(ctx)
	if err != nil {
		return broke(err)
	}
	seen := b.Stdout + b.Stderr + bkr.Stdout + bkr.Stderr + wsText(wsB.Dir)
	aliveA := pidAlive(initA) && pidAlive(progA)
	trA := tracer(initA) + "," + tracer(progA)
	hr, err := e.HostOp(ctx, "reads", viaProc)
	if err != nil {
		return broke(err)
	}
	hk, err := e.HostOp(ctx, "kill", strconv.Itoa(progA), "0")
	if err != nil {
		return broke(err)
	}
	ar, err := a.Finish(ctx)
	if err != nil {
		return broke(err)
	}
	return conformance.Outcome{Hint: b.Hint() + "\n" + bkr.Hint(), Facts: []record.Fact{
		fact("sandbox A's secret in sandbox B's output and workspace", "absent", seenOrNot(seen, secret), !strings.Contains(seen, secret), "cordon run's stdout and stderr for B; B's workspace on the host"),
		fact("sandbox A's init and program after B's kill, ptrace and mem attempts", "alive", aliveText(aliveA), aliveA, fmt.Sprintf("/proc/%d and /proc/%d on the host", initA, progA)),
		fact("TracerPid of A's init and program", "0,0", trA, trA == "0,0", "/proc/PID/status on the host"),
		fact("host uids of A's and B's programs", "distinct", ua+" / "+ub, ua != "" && ub != "" && ua != ub, "/proc/PID/status on the host"),
		fact("sandbox A's exit after B's attempts", "0", strconv.Itoa(ar.Code), ar.Code == 0, "cordon run's exit status"),
		control("the same read through A's /proc root, from the host", "the secret", seenOrNot(hr.Data, secret), strings.Contains(hr.Data, secret), "the host op's output"),
		control("the same kill op (signal 0) on A's program, from the host", "ok", okText(hk.OK, hk.Errno), hk.OK, "kill(2)'s result on the host"),
	}}
}

func okText(ok bool, errno string) string {
	if ok {
		return "ok"
	}
	return errno
}
