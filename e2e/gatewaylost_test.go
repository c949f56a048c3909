package e2e

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/testkit"
)

// slowUpstream is an Anthropic Messages upstream whose streams send a
// delta every 100ms until released (or 30s): a stream in flight for as
// long as a test needs. started gets one value per request.
type slowUpstream struct {
	srv     *httptest.Server
	started chan struct{}
	release chan struct{}
}

func newSlowUpstream(t *testing.T) *slowUpstream {
	u := &slowUpstream{started: make(chan struct{}, 16), release: make(chan struct{})}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/messages" || r.Header.Get("x-api-key") != fakeKey {
			http.Error(w, `{"type":"error"}`, http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		testkit.SSE(w, "message_start", map[string]any{"type": "message_start", "message": map[string]any{"id": "msg_slow", "type": "message", "role": "assistant",
			"model": "claude-test-1", "content": []any{}, "stop_reason": nil, "usage": map[string]any{"input_tokens": 12, "output_tokens": 1}}})
		testkit.SSE(w, "content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
		select {
		case u.started <- struct{}{}:
		default:
		}
		deadline := time.After(30 * time.Second)
	loop:
		for {
			select {
			case <-u.release:
				break loop
			case <-deadline:
				break loop
			case <-r.Context().Done():
				return
			case <-time.After(100 * time.Millisecond):
				testkit.SSE(w, "content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": "tok "}})
			}
		}
		testkit.SSE(w, "content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
		testkit.SSE(w, "message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "end_turn", "stop_sequence": nil},
			"usage": map[string]any{"output_tokens": 7}})
		testkit.SSE(w, "message_stop", map[string]any{"type": "message_stop"})
	}))
	t.Cleanup(u.srv.Close)
	return u
}

// gatewayPidOf is the gateway process of sandbox id, found in its own
// cgroup (<mount>/cordon/<id>--gw) from the host.
func gatewayPidOf(t *testing.T, id string) int {
	t.Helper()
	return gatewayPidIn(t, id+"--gw")
}

// startCmd starts a prepared cordon command like startCordon does (files
// for stdout and stderr, killed at cleanup).
func startCmd(t *testing.T, cmd *exec.Cmd) *cordonProc {
	t.Helper()
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	dir := t.TempDir()
	p := &cordonProc{cmd: cmd, done: make(chan struct{})}
	var err error
	if p.out, err = os.Create(filepath.Join(dir, "stdout")); err != nil {
		t.Fatal(err)
	}
	if p.err, err = os.Create(filepath.Join(dir, "stderr")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.out.Close(); p.err.Close() })
	cmd.Stdout, cmd.Stderr = p.out, p.err
	p.outcome = outcomeFD(t, cmd)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %v: %v", cmd.Args, err)
	}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// gatewayOutcome is the "gateway" part of cordon run --json.
type gatewayOutcome struct {
	MemoryLimitBytes int64 `json:"memory_limit_bytes"`
	PidsLimit        int64 `json:"pids_limit"`
	OOMKills         int64 `json:"oom_kills"`
	EndedEarly       bool  `json:"ended_early"`
	LostCrossings    int64 `json:"lost_crossings"`
}

func gatewayOutcomeOf(t *testing.T, r result) gatewayOutcome {
	t.Helper()
	var o struct {
		Gateway *gatewayOutcome `json:"gateway"`
	}
	if err := json.Unmarshal([]byte(r.OutcomeJSON), &o); err != nil || o.Gateway == nil {
		t.Fatalf("no gateway outcome in cordon run --json (%v): %s", err, r.OutcomeJSON)
	}
	return *o.Gateway
}

type receiptLine struct {
	Broker   string `json:"broker"`
	Decision string `json:"decision"`
	Reason   string `json:"reason"`
	Identity struct {
		SandboxID string `json:"sandbox_id"`
	} `json:"identity"`
	Usage struct {
		OutputTokens int64 `json:"output_tokens"`
	} `json:"usage"`
}

func receiptsOf(t *testing.T, st string) []receiptLine {
	return receiptLines[receiptLine](t, st)
}

// receiptLines runs `cordon receipts --json` with filter (e.g. --broker
// ingress) and decodes each line into T: the crossings' receipts, without
// the evidence broker's (each session's signed containment receipt,
// docs/session-receipts.md) unless filter asks for them.
func receiptLines[T any](t *testing.T, st string, filter ...string) []T {
	t.Helper()
	r := cordon(t, cordonBin, st, append([]string{"receipts", "--json"}, filter...)...)
	if r.Code != 0 {
		t.Fatalf("cordon receipts --json %v = %d\n%s", filter, r.Code, r.Stderr)
	}
	evidence := slices.Contains(filter, "evidence")
	var out []T
	for _, l := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		if l == "" {
			continue
		}
		var b struct{ Broker string }
		if json.Unmarshal([]byte(l), &b) == nil && b.Broker == "evidence" && !evidence {
			continue
		}
		var rc T
		if err := json.Unmarshal([]byte(l), &rc); err != nil {
			t.Fatalf("receipt line %q: %v", l, err)
		}
		out = append(out, rc)
	}
	return out
}

// A gateway killed during a stream the agent already received (here by
// its pid, from the host: the OOM killer or a crash look the same) does
// not let the crossing escape accounting: its whole reservation is
// charged, a gateway_lost receipt records it, and the next call the
// charged budget cannot hold is refused. Control: before the loss the
// same call passes twice (a settled call charges what was used).
func TestGatewayLostIsCharged(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	up := newSlowUpstream(t)
	// sdkclient asks max_tokens 256: one reservation of 256 output
	// tokens fits a budget of 400, two do not.
	cfg := gatewayConfig(t, up.srv.URL, "budgets:\n  output_tokens: 400\n")
	call := []string{"run", "--config", cfg, "--ro", probeDir + ":/probe", "--", "/probe/sdkclient", "anthropic-stream", "claude-test-1", "hi"}

	// Control: two settled calls pass (7 tokens each are charged).
	close(up.release)
	for i := 0; i < 2; i++ {
		if r := cordon(t, cordonBin, st, call...); r.Code != 0 {
			t.Fatalf("control call %d = %d\nstdout: %s\nstderr: %s", i, r.Code, r.Stdout, r.Stderr)
		}
	}
	up.release = make(chan struct{})
	for len(up.started) > 0 {
		<-up.started
	}

	p := startCordon(t, st, runOpts{}, append([]string{"run", "--json"}, call[1:]...)...)
	id, _ := waitSandboxRunning(t, p, st, "sdkclient")
	gw := gatewayPidOf(t, id)
	select {
	case <-up.started:
	case <-time.After(30 * time.Second):
		t.Fatalf("the stream never started\nstderr: %s", p.stderr())
	}
	time.Sleep(300 * time.Millisecond) // deltas reach the agent
	if err := syscall.Kill(gw, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	r := p.wait(t, time.Minute)
	if !strings.Contains(logText(r), "ended unexpectedly") {
		t.Errorf("cordon's stderr and run log do not report the lost gateway:\n%s", logText(r))
	}
	if g := gatewayOutcomeOf(t, r); !g.EndedEarly || g.LostCrossings != 1 {
		t.Errorf("gateway outcome = %+v, want ended early with 1 lost crossing", g)
	}
	var lost []receiptLine
	for _, rc := range receiptsOf(t, st) {
		if rc.Identity.SandboxID == id && rc.Reason == "gateway_lost" {
			lost = append(lost, rc)
		}
	}
	if len(lost) != 1 || lost[0].Broker != "model" || lost[0].Usage.OutputTokens != 256 {
		t.Fatalf("gateway_lost receipts of %s = %+v, want one model receipt charging the 256 reserved output tokens", id, lost)
	}
	// 14 used + 256 charged: another 256 is over the budget of 400.
	close(up.release)
	r = cordon(t, cordonBin, st, call...)
	if r.Code == 0 || !strings.Contains(strings.ToLower(r.Stdout+r.Stderr), "budget") {
		t.Fatalf("the call after the lost one = %d, want refused by the budget\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
	requireNoResidue(t, st)
}

// gatewayPidIn is the gateway process among the pids of cgroup name.
func gatewayPidIn(t *testing.T, name string) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for _, pid := range cgroupProcsOf(name) {
			if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline"); err == nil && strings.HasPrefix(string(b), "cordon-gateway") {
				return pid
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no gateway process in cgroup %s", name)
	return 0
}

// The agent streams a model answer with curl (small) and fills /tmp
// (tmpfs, charged to the sandbox's memory cgroup) until the OOM killer
// acts. The gateway runs in its own cgroup: the kills happen in the
// sandbox's group (its oom_kill count rises), the trusted side sees its
// gateway alive to the end of the program (not ended early, no OOM kill in
// the gateway's group), and the crossing is receipted and charged.
// Positive control (test build, the gateway placed in the sandbox's
// cgroups as before): the same attack makes the OOM killer pick the
// gateway, the largest process there — and the crossing is still charged
// in full, as gateway_lost.
func TestGatewaySurvivesSandboxOOM(t *testing.T) {
	testkit.RequireRoot(t)
	const attack = `curl -sSN --max-time 60 -H 'content-type: application/json' ` +
		`-d '{"model":"claude-test-1","max_tokens":256,"stream":true,"messages":[{"role":"user","content":"hi"}]}' ` +
		`http://127.0.0.1:80/v1/messages >/dev/null & sleep 2; dd if=/dev/zero of=/tmp/fill bs=1M count=400; wait; sleep 1`
	for _, tc := range []struct {
		name     string
		bin      string
		extra    []string
		ownGroup bool // the gateway is in <id>--gw
	}{
		{"own cgroup", cordonBin, nil, true},
		{"control: in the sandbox's cgroup", hooksBin, []string{"--test-skip-layer", "gateway-cgroup"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newStateDir(t)
			up := newSlowUpstream(t)
			cfg := gatewayConfig(t, up.srv.URL, "")
			cmd := exec.Command(tc.bin, append(append([]string{"--state-dir", st}, tc.extra...), "run", "--json", "--config", cfg,
				"--memory", "64M", "--tmp-size", "512M", "--", "/bin/sh", "-c", attack)...)
			p := startCmd(t, cmd)
			id, _ := waitSandboxRunning(t, p, st, "curl")
			group := id + "--gw"
			if !tc.ownGroup {
				group = id
			}
			gw := gatewayPidIn(t, group)
			select {
			case <-up.started:
			case <-time.After(30 * time.Second):
				t.Fatalf("the stream never started\nstderr: %s", p.stderr())
			}
			oomFile := filepath.Join("/sys/fs/cgroup/memory/cordon", id, "memory.oom_control")
			var kills int64
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && kills == 0; time.Sleep(10 * time.Millisecond) {
				b, err := os.ReadFile(oomFile)
				if err != nil {
					t.Logf("read %s: %v", oomFile, err)
					break
				}
				for _, l := range strings.Split(string(b), "\n") {
					if f := strings.Fields(l); len(f) == 2 && f[0] == "oom_kill" {
						kills, _ = strconv.ParseInt(f[1], 10, 64)
					}
				}
			}
			if kills == 0 {
				t.Fatalf("no OOM kill in the sandbox's memory cgroup (%s): the attack did not happen\nstderr: %s", oomFile, p.stderr())
			}
			if !tc.ownGroup {
				for end := time.Now().Add(20 * time.Second); alive(gw) && time.Now().Before(end); {
					time.Sleep(10 * time.Millisecond)
				}
				if alive(gw) {
					t.Fatalf("control: the gateway (pid %d) in the sandbox's cgroup survived its OOM killer (%d kills): the attack proves nothing", gw, kills)
				}
			}
			close(up.release)
			r := p.wait(t, time.Minute)
			g := gatewayOutcomeOf(t, r)
			lost := strings.Contains(logText(r), "ended unexpectedly")
			if tc.ownGroup && (lost || g.EndedEarly || g.OOMKills != 0 || g.MemoryLimitBytes != 256<<20 || g.PidsLimit != 1024) {
				t.Errorf("gateway outcome %+v, lost %v; want it alive to the end in its own group (256MiB, 1024 tasks), no OOM kill there\nstderr: %s", g, lost, r.Stderr)
			}
			if !tc.ownGroup && (!lost || !g.EndedEarly || g.LostCrossings != 1) {
				t.Errorf("control: gateway outcome %+v, lost %v; want it ended early with its stream lost\nstderr: %s", g, lost, r.Stderr)
			}
			var model []receiptLine
			for _, rc := range receiptsOf(t, st) {
				if rc.Identity.SandboxID == id && rc.Broker == "model" {
					model = append(model, rc)
				}
			}
			if len(model) != 1 || model[0].Usage.OutputTokens == 0 || !tc.ownGroup && model[0].Reason != "gateway_lost" {
				t.Fatalf("model receipts of %s = %+v, want the stream receipted and charged (gateway_lost in the control)", id, model)
			}
			requireNoResidue(t, st)
		})
	}
}

// cordon itself SIGKILLed during a stream: the gateway dies with it
// (parent-death signal) and nobody settles the reservation then. The next
// `cordon gc` reclaims the sandbox and charges the reservation in full
// with a gateway_lost receipt, durably: the next call the charged budget
// cannot hold is refused.
func TestGatewayLostAfterCordonKilled(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	up := newSlowUpstream(t)
	cfg := gatewayConfig(t, up.srv.URL, "budgets:\n  output_tokens: 400\n")
	call := []string{"run", "--config", cfg, "--ro", probeDir + ":/probe", "--", "/probe/sdkclient", "anthropic-stream", "claude-test-1", "hi"}
	p := startCordon(t, st, runOpts{}, call...)
	id, _ := waitSandboxRunning(t, p, st, "sdkclient")
	gw := gatewayPidOf(t, id)
	select {
	case <-up.started:
	case <-time.After(30 * time.Second):
		t.Fatalf("the stream never started\nstderr: %s", p.stderr())
	}
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	p.wait(t, 5*time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for alive(gw) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if alive(gw) {
		t.Fatalf("the gateway (pid %d) outlived cordon", gw)
	}
	for _, rc := range receiptsOf(t, st) {
		if rc.Identity.SandboxID == id {
			t.Fatalf("a receipt of %s before reclaim: %+v (the control: nothing settled it)", id, rc)
		}
	}
	if rep := runGC(t, st); !slices.Contains(rep.Reclaimed, id) {
		t.Fatalf("cordon gc reclaimed %v, want %s", rep.Reclaimed, id)
	}
	var lost []receiptLine
	for _, rc := range receiptsOf(t, st) {
		if rc.Identity.SandboxID == id && rc.Reason == "gateway_lost" {
			lost = append(lost, rc)
		}
	}
	if len(lost) != 1 || lost[0].Usage.OutputTokens != 256 {
		t.Fatalf("gateway_lost receipts of %s after gc = %+v, want one charging 256 output tokens", id, lost)
	}
	if d := cgroupDirsOf(id + "--gw"); len(d) != 0 {
		t.Errorf("the gateway's cgroup dirs %v remain after gc", d)
	}
	close(up.release)
	r := cordon(t, cordonBin, st, call...)
	if r.Code == 0 || !strings.Contains(strings.ToLower(r.Stdout+r.Stderr), "budget") {
		t.Fatalf("the call after the lost one = %d, want refused by the budget\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
	requireNoResidue(t, st)
}

// The daemon SIGKILLed during a stream of one of its sandboxes: the
// sandbox lives on, its gateway died with the daemon. When the restarted
// daemon adopts the sandbox and reopens its gateway, the reservation the
// old gateway left open is charged in full (gateway_lost), and the next
// call the charged budget cannot hold is refused.
func TestDaemonRestartChargesLostCrossings(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	d := startDaemon(t, st)
	up := newSlowUpstream(t)
	cfg := gatewayConfig(t, up.srv.URL, "budgets:\n  output_tokens: 400\n")
	d.createStart("gw", "--config", cfg, "--", "/bin/sleep", "1000")
	id := d.ls()["gw"].ID
	stream := `curl -sS --max-time 60 -H 'content-type: application/json' -d '{"model":"claude-test-1","max_tokens":256,"stream":true,"messages":[{"role":"user","content":"hi"}]}' http://127.0.0.1:80/v1/messages`
	if r := d.cli("sandbox", "exec", "gw", "--", "/bin/sh", "-c", stream+" >/dev/null 2>&1 </dev/null &"); r.Code != 0 {
		t.Fatalf("exec: %d %s", r.Code, r.Stderr)
	}
	select {
	case <-up.started:
	case <-time.After(30 * time.Second):
		t.Fatal("the stream never started")
	}
	d.kill()
	d.start()
	var lost []receiptLine
	for _, rc := range receiptsOf(t, st) {
		if rc.Identity.SandboxID == id && rc.Reason == "gateway_lost" {
			lost = append(lost, rc)
		}
	}
	if len(lost) != 1 || lost[0].Usage.OutputTokens != 256 {
		t.Fatalf("gateway_lost receipts of %s after the daemon restart = %+v, want one charging 256 output tokens", id, lost)
	}
	close(up.release)
	r := d.cli("sandbox", "exec", "gw", "--", "/bin/sh", "-c", stream)
	if !strings.Contains(strings.ToLower(r.Stdout), "budget") {
		t.Fatalf("the call after the lost one: %d %s %s; want refused by the budget", r.Code, r.Stdout, r.Stderr)
	}
}
