package probes

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cordon-project/cordon/internal/conformance"
	"github.com/cordon-project/cordon/internal/conformance/record"
)

func init() {
	conformance.Register(conformance.Probe{
		ID:     "failure.broker",
		Class:  record.Failure,
		Clause: "§2.5 failure; §9: an unavailable broker denies the affected crossing, and the crossing in flight is charged, never free",
		Title:  "the gateway killed from the host mid-stream: cordon ends the run, charges the open reservation in full, and nothing more reaches the upstream",
		Run:    gatewayProbe(brokerLost),
	})
}

// gatewayPid is the gateway process of sandbox id: the process of its
// gateway cgroup whose command line names cordon-gateway.
func gatewayPid(id string) int {
	for _, pid := range cgroupProcs(id + "--gw") {
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline"); err == nil && strings.HasPrefix(string(b), "cordon-gateway") {
			return pid
		}
	}
	return 0
}

// brokerLost: a run streams a model call reserving 256 output tokens; the
// probe SIGKILLs its gateway process from the host (an OOM kill or a crash
// looks the same). From outside: cordon ends the run and reports the
// gateway ended early with one lost crossing; one gateway_lost receipt
// charges the 256 tokens; the upstream saw the one request only.
// Control: the gateway was alive and carried the stream to the upstream
// before the kill.
func brokerLost(ctx context.Context, e *conformance.Env) conformance.Outcome {
	up, st, _, h, err := startHeldStream(ctx, e)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	rep, err := runGC(ctx, e, st)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	if len(rep.Live) != 1 {
		return errf("cordon gc lists live sandboxes %v, want exactly the held one", rep.Live)
	}
	id := rep.Live[0]
	var gw int
	waitFor(10*time.Second, func() bool { gw = gatewayPid(id); return gw != 0 })
	gwProc, ok := readHostProc(gw)
	if gw == 0 || !ok {
		return errf("no gateway process in sandbox %s's gateway cgroup", id)
	}
	before := up.requests.Load()
	if err := syscall.Kill(gw, syscall.SIGKILL); err != nil {
		return conformance.Outcome{Err: err}
	}
	// The trusted side notices at once and charges what the gateway held
	// open; the run goes on (the sandbox has no way out) until the
	// program ends.
	var lost []receipt
	waitFor(10*time.Second, func() bool {
		lost = nil
		rcs, err := receipts(ctx, e, st)
		for _, rc := range rcs {
			if rc.Identity.SandboxID == id && rc.Reason == "gateway_lost" {
				lost = append(lost, rc)
			}
		}
		return err != nil || len(lost) > 0 || ctx.Err() != nil
	})
	gwGone := !gwProc.alive()
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// Closing the program's stdin would end it anyway: cordon must end
	// the run first, which the outcome says (ended early).
	r, err := h.Finish(fctx)
	if err != nil {
		return conformance.Outcome{Err: err}
	}
	var o struct {
		Gateway *struct {
			EndedEarly    bool  `json:"ended_early"`
			LostCrossings int64 `json:"lost_crossings"`
		} `json:"gateway"`
	}
	_ = json.Unmarshal(r.Outcome, &o)
	ended, lostN := false, int64(-1)
	if o.Gateway != nil {
		ended, lostN = o.Gateway.EndedEarly, o.Gateway.LostCrossings
	}
	lostGot := fmt.Sprintf("%d gateway_lost receipts", len(lost))
	if len(lost) == 1 {
		lostGot += fmt.Sprintf(", %d output tokens", lost[0].Usage.OutputTokens)
	}
	after := up.requests.Load() - before
	return conformance.Outcome{Hint: "held: " + opJSON(h.Op), Facts: []record.Fact{
		{Name: "cordon's report of the run after its gateway was killed", Want: "the gateway ended early, 1 lost crossing", Got: fmt.Sprintf("exit %d, ended early %v, %d lost crossings", r.Code, ended, lostN),
			OK: ended && lostN == 1, Source: "cordon run's --json outcome (fd 3)"},
		{Name: "the open reservation", Want: "1 gateway_lost receipt, 256 output tokens", Got: lostGot,
			OK: len(lost) == 1 && lost[0].Usage.OutputTokens == 256, Source: "the store, via cordon receipts --json"},
		{Name: "requests the upstream received after the gateway was killed", Want: "0", Got: fmt.Sprint(after), OK: after == 0,
			Source: "the slow model upstream on the host, request count"},
		{Name: "the gateway before the kill", Want: "alive, the stream reached the upstream (1 request)",
			Got: fmt.Sprintf("pid %d alive, %d requests (after the kill: gone %v)", gw, before, gwGone), OK: before == 1 && gwGone,
			Source: "the host's /proc and the gateway's cgroup; the slow model upstream's request count", Control: true},
	}}
}
