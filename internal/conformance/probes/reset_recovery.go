package probes

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cordon-project/cordon/internal/conformance"
	"github.com/cordon-project/cordon/internal/conformance/probeops"
	"github.com/cordon-project/cordon/internal/conformance/record"
)

func init() {
	conformance.Register(conformance.Probe{
		ID:     "recovery.killed-run",
		Class:  record.Reset,
		Clause: "§2.5 recovery; §9: recovery cannot resume consumed authority (a reservation), cleanup is ownership-scoped",
		Title:  "cordon SIGKILLed mid-stream: cordon gc charges the open reservation in full, the budget then refuses, and no process, cgroup, namespace or mount of the sandbox remains",
		Run:    gatewayProbe(killedRun),
	})
}

// streamCall is a streamed model call reserving 256 output tokens.
var streamCall = []string{"POST", "$ANTHROPIC_BASE_URL/v1/messages",
	`{"model":"claude-probe-1","max_tokens":256,"stream":true,"messages":[{"role":"user","content":"hi"}]}`}

// killedSandbox is what the host saw of a sandbox before its cordon was
// killed.
type killedSandbox struct {
	id           string
	procs        []hostProc
	netns, mntns string
}

// observeLive snapshots the one live sandbox of st from the host: its id
// (cordon gc --json lists it as live), its processes and the gateway's
// (their cgroups), and its namespaces.
func observeLive(ctx context.Context, e *conformance.Env, st string, h *conformance.Held) (killedSandbox, error) {
	var k killedSandbox
	rep, err := runGC(ctx, e, st)
	if err != nil {
		return k, err
	}
	if len(rep.Live) != 1 {
		return k, fmt.Errorf("cordon gc lists live sandboxes %v, want exactly the held one", rep.Live)
	}
	k.id = rep.Live[0]
	// The init is the process of the sandbox's cgroups whose parent is
	// cordon (Held.Pids assumes cordon has no other child; with a
	// gateway it has).
	initPid := 0
	pids := append(cgroupProcs(k.id), cgroupProcs(k.id+"--gw")...)
	for _, pid := range pids {
		if parentOf(pid) == h.Pid() && slices.Contains(cgroupProcs(k.id), pid) && inOtherUserns(pid) {
			initPid = pid
		}
		if p, ok := readHostProc(pid); ok && pid != h.Pid() && !slices.ContainsFunc(k.procs, func(q hostProc) bool { return q.pid == pid }) {
			k.procs = append(k.procs, p)
		}
	}
	if initPid == 0 {
		return k, fmt.Errorf("no process of sandbox %s's cgroups %v is cordon's child in its own user namespace", k.id, pids)
	}
	k.netns, _ = os.Readlink(fmt.Sprintf("/proc/%d/ns/net", initPid))
	k.mntns, _ = os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", initPid))
	if k.netns == "" || k.mntns == "" {
		return k, fmt.Errorf("cannot read the namespaces of the sandbox init %d", initPid)
	}
	return k, nil
}

// parentOf is pid's parent, from the host's /proc (0 if gone).
func parentOf(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

// inOtherUserns says whether pid runs in a user namespace other than the
// host's (cordon's own threads may sit in a sandbox's v1 cgroups for a
// moment).
func inOtherUserns(pid int) bool {
	self, err1 := os.Readlink("/proc/self/ns/user")
	other, err2 := os.Readlink(fmt.Sprintf("/proc/%d/ns/user", pid))
	return err1 == nil && err2 == nil && self != other
}

// residue lists what of k remains on the host.
func (k killedSandbox) residue(st string) []string {
	var left []string
	for _, p := range k.procs {
		if p.alive() {
			left = append(left, fmt.Sprintf("process %d", p.pid))
		}
	}
	for _, n := range []string{k.id, k.id + "--gw"} {
		if d := cgroupDirs(n); len(d) > 0 {
			left = append(left, "cgroups "+strings.Join(d, ","))
		}
	}
	if p := nsHolders("net", k.netns); len(p) > 0 {
		left = append(left, fmt.Sprintf("%s held by %v", k.netns, p))
	}
	if p := nsHolders("mnt", k.mntns); len(p) > 0 {
		left = append(left, fmt.Sprintf("%s held by %v", k.mntns, p))
	}
	if m := mountsUnder(st); len(m) > 0 {
		left = append(left, "mounts "+strings.Join(m, ","))
	}
	return left
}

// killedRun: a run streams a model call reserving 256 of a 400 output
// token budget; with the stream in flight the probe SIGKILLs cordon.
// Observed from outside: the sandbox's and the gateway's processes end
// without anyone telling them; no receipt settles the reservation before
// cordon gc; gc reclaims the sandbox and charges it in full (one
// gateway_lost receipt of 256 output tokens); the same call then never
// reaches the upstream; no process, cgroup, namespace or mount of the
// sandbox remains. Controls: the first call, under the same budget,
// reached the upstream; before the kill the host saw the sandbox's
// processes, cgroups and namespaces where the residue check looks.
func killedRun(ctx context.Context, e *conformance.Env) conformance.Outcome {
	up, st, cfg, h, err := startHeldStream(ctx, e)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	k, err := observeLive(ctx, e, st, h)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	before := k.residue(st)
	admitted := up.requests.Load()
	if err := syscall.Kill(h.Pid(), syscall.SIGKILL); err != nil {
		return conformance.Outcome{Err: err}
	}
	if _, err := h.Finish(ctx); err != nil {
		return conformance.Outcome{Err: err}
	}
	// Nobody tells the sandbox or the gateway: the parent-death signal
	// must end them.
	ended := waitFor(5*time.Second, func() bool {
		return !slices.ContainsFunc(k.procs, func(p hostProc) bool { return p.alive() })
	})
	rcs, err := receipts(ctx, e, st)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	settled := 0
	for _, rc := range rcs {
		if rc.Identity.SandboxID == k.id {
			settled++
		}
	}
	rep, err := runGC(ctx, e, st)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	rcs, err = receipts(ctx, e, st)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	var lost []receipt
	for _, rc := range rcs {
		if rc.Identity.SandboxID == k.id && rc.Reason == "gateway_lost" {
			lost = append(lost, rc)
		}
	}
	left := k.residue(st)
	up.unblock()
	r, err := gwRun(ctx, e, conformance.RunOpts{StateDir: st, Flags: []string{"--config", cfg}, Op: append([]string{"http"}, streamCall...)})
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	again := up.requests.Load() - admitted
	lostGot := fmt.Sprintf("%d gateway_lost receipts", len(lost))
	if len(lost) == 1 {
		lostGot += fmt.Sprintf(", %d output tokens", lost[0].Usage.OutputTokens)
	}
	const procSrc = "the host's /proc (pid and start time of each process the host saw in the sandbox's and its gateway's cgroups)"
	return conformance.Outcome{Hint: "held: " + opJSON(h.Op) + " | after: " + r.Hint(), Facts: []record.Fact{
		{Name: "the sandbox's and the gateway's processes within 5s of cordon's SIGKILL", Want: "all ended", Got: fmt.Sprintf("%d processes, ended %v", len(k.procs), ended),
			OK: ended, Source: procSrc},
		{Name: "receipts of the killed sandbox before cordon gc", Want: "0 (nothing settled the reservation)", Got: fmt.Sprint(settled), OK: settled == 0,
			Source: "the store, via cordon receipts --json"},
		{Name: "cordon gc reclaims the killed sandbox", Want: "reclaimed " + k.id, Got: fmt.Sprintf("reclaimed %v, live %v", rep.Reclaimed, rep.Live),
			OK: slices.Contains(rep.Reclaimed, k.id) && len(rep.Live) == 0, Source: "cordon gc --json"},
		{Name: "the open reservation after cordon gc", Want: "1 gateway_lost receipt, 256 output tokens", Got: lostGot,
			OK: len(lost) == 1 && lost[0].Usage.OutputTokens == 256, Source: "the store, via cordon receipts --json"},
		{Name: "the same call after the charge (144 of 400 output tokens left)", Want: "0 upstream requests (refused by the budget)", Got: fmt.Sprintf("%d upstream requests", again),
			OK: again == 0, Source: "the slow model upstream on the host, request count"},
		{Name: "what of the sandbox remains on the host after cordon gc", Want: "nothing", Got: orNothing(left), OK: len(left) == 0,
			Source: procSrc + "; /sys/fs/cgroup/*/cordon; /proc/*/ns/{net,mnt}; /proc/self/mountinfo under the state dir"},
		{Name: "the first call under the same budget", Want: "1 upstream request", Got: fmt.Sprintf("%d upstream requests", admitted),
			OK: admitted == 1, Source: "the slow model upstream on the host, request count", Control: true},
		{Name: "the sandbox on the host before the kill", Want: "processes, cgroups and namespaces seen where the residue check looks",
			Got: orNothing(before), OK: len(k.procs) >= 2 && hasAll(before, "process", "cgroups", "net:[", "mnt:["),
			Source: procSrc + "; /sys/fs/cgroup/*/cordon; /proc/*/ns/{net,mnt}", Control: true},
	}}
}

func opJSON(r probeops.Result) string {
	b, _ := json.Marshal(r)
	return string(b)
}

func orNothing(s []string) string {
	if len(s) == 0 {
		return "nothing"
	}
	return strings.Join(s, "; ")
}

// hasAll says whether every word occurs in some item of s.
func hasAll(s []string, words ...string) bool {
	for _, w := range words {
		if !slices.ContainsFunc(s, func(x string) bool { return strings.Contains(x, w) }) {
			return false
		}
	}
	return true
}

// startHeldStream starts a gateway run under a 400-output-token budget
// whose program holds a model stream open against a slow upstream, and
// returns once the stream reached the upstream: a crossing in flight with
// its reservation held, for the probes that then kill part of the run.
func startHeldStream(ctx context.Context, e *conformance.Env) (up *slowUpstream, stateDir, cfg string, h *conformance.Held, err error) {
	key := secretValue()
	up = newSlowUpstream(e, key)
	if cfg, err = keyedModelConfig(e, up.srv.URL, key, "budgets:\n  output_tokens: 400\n"); err != nil {
		return nil, "", "", nil, err
	}
	stateDir = e.StateDir()
	h, err = e.Start(ctx, conformance.RunOpts{StateDir: stateDir, Flags: []string{"--config", cfg}, Op: append([]string{"hold", "httpopen"}, streamCall...)})
	if err != nil {
		return nil, "", "", nil, err
	}
	select {
	case <-up.started:
	case <-time.After(30 * time.Second):
		return nil, "", "", nil, fmt.Errorf("the stream never reached the upstream (op: %s)", opJSON(h.Op))
	}
	return up, stateDir, cfg, h, nil
}
