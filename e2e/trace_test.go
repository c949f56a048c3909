package e2e

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/telemetry/telemetrytest"
	"github.com/cordon-project/cordon/internal/testkit"
)

// traceConfig is a config with the fake model upstream, a tool server
// offering echo, and an egress rule for allowed.test on port.
func traceConfig(t *testing.T, upstream, port, extra string) string {
	return gatewayConfig(t, upstream, fmt.Sprintf(`tools:
  - name: t
    command: [/tools/mcpserver]
    binds: [{source: %s, target: /tools}]
egress:
  allow:
    - host: allowed.test
      ports: [%s]
  unsafe_allow_ranges: ["127.0.0.1/32"]
  resolve:
    allowed.test: 127.0.0.1
%s`, probeDir, port, extra))
}

// traceScript is one scripted agent turn: a model call whose streamed
// answer is a tool_use of t__echo, the tool call through the tool
// broker, then an egress connection to the allowed host; then the
// program's environment, to show what reached it.
func traceScript(port string) string {
	return strings.Join([]string{
		`curl -sS --max-time 20 -H 'content-type: application/json' -d '{"model":"claude-trace","max_tokens":50,"stream":true,` +
			`"tools":[{"name":"t__echo","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"hi"}]}' "$ANTHROPIC_BASE_URL/v1/messages"; echo`,
		`/probe/mcpclient call t__echo '{"text":"from the tool"}'`,
		`curl -sS --max-time 10 http://allowed.test:` + port + `/; echo`,
		`echo "=== env"; /usr/bin/env`,
	}, "\n")
}

type tracedReceipt struct {
	ID      int64  `json:"id"`
	Broker  string `json:"broker"`
	Action  string `json:"action"`
	Target  string `json:"target"`
	TraceID string `json:"trace_id"`
	SpanID  string `json:"span_id"`
}

// One scripted agent turn, traced: the model turn, the tool call it
// caused and the egress connection that tool call caused arrive at an
// in-process OTLP/HTTP receiver as one trace with those parent links;
// the lifecycle phases hang off the session; the receipts (read from the
// host) carry the same trace and span ids; no span holds the custodied
// key (which the upstream did receive) and no OTEL_* variable reaches
// the program.
func TestTraceAgentTurn(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	up := testkit.NewModelUpstream(t, fakeKey, "done")
	up.ToolName, up.ToolInput = "t__echo", `{"text":"from the tool"}`
	target := testkit.NewTarget(t, "allowed-host-body")
	recv := telemetrytest.NewReceiver(t)
	cfg := traceConfig(t, up.URL(), target.Port(), "")
	env := []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + recv.URL(), "OTEL_SERVICE_NAME=cordon-e2e",
		"OTEL_EXPORTER_OTLP_HEADERS=x-collector-token=tok-9d2e"}
	r := cordonEnv(t, env, st, "run", "--config", cfg, "--ro", probeDir+":/probe", "--", "/bin/sh", "-c", traceScript(target.Port()))
	if r.Code != 0 || !strings.Contains(r.Stdout, "toolu_e2e1") || !strings.Contains(r.Stdout, "from the tool") ||
		!strings.Contains(r.Stdout, "allowed-host-body") || target.Hits() != 1 {
		t.Fatalf("run = %d (target hits %d)\nstdout: %s\nstderr: %s", r.Code, target.Hits(), r.Stdout, r.Stderr)
	}
	// Positive control: the upstream got the real key from the broker.
	if seen := up.Seen(); len(seen) == 0 || seen[0].APIKey != fakeKey {
		t.Fatalf("the upstream did not receive the custodied key: %+v", seen)
	}
	_, progEnv, _ := strings.Cut(r.Stdout, "=== env")
	if strings.Contains(progEnv, "OTEL_") || strings.Contains(progEnv, "tok-9d2e") || !strings.Contains(progEnv, "ANTHROPIC_BASE_URL=") {
		t.Fatalf("the program's environment:\n%s", progEnv)
	}

	spans := recv.Spans()
	byName := map[string][]telemetrytest.Span{}
	byID := map[string]telemetrytest.Span{}
	for _, s := range spans {
		byName[s.Name] = append(byName[s.Name], s)
		byID[s.SpanID] = s
		if strings.Contains(s.Raw, fakeKey) || strings.Contains(s.Raw, "tok-9d2e") || strings.Contains(s.Raw, "from the tool") {
			t.Errorf("span %s carries a secret or a body: %q", s.Name, s.Raw)
		}
	}
	one := func(name string) telemetrytest.Span {
		t.Helper()
		if len(byName[name]) != 1 {
			t.Fatalf("%d %q spans, want 1; got %d spans: %v", len(byName[name]), name, len(spans), names(spans))
		}
		return byName[name][0]
	}
	session := one("session")
	for _, s := range spans {
		if s.TraceID != session.TraceID {
			t.Errorf("span %s in trace %s, the session's is %s", s.Name, s.TraceID, session.TraceID)
		}
		if s.Service != "cordon-e2e" {
			t.Errorf("span %s of service %q", s.Name, s.Service)
		}
	}
	if session.ParentID != "" || session.Attrs["cordon.workload"] != "e2e" || session.Attrs["cordon.sandbox.id"] == "" {
		t.Errorf("session span: %+v", session)
	}
	for _, phase := range []string{"provision", "start", "admission", "gateway"} {
		if p := one(phase); p.ParentID != session.SpanID {
			t.Errorf("%s's parent is %s, want the session", phase, p.ParentID)
		}
	}
	turn := one("model.turn")
	call := one("tool.call")
	egress := one("egress.connect")
	if turn.ParentID != session.SpanID || call.ParentID != turn.SpanID || egress.ParentID != call.SpanID {
		t.Errorf("causal chain: turn→%s (session %s), call→%s (turn %s), egress→%s (call %s)",
			turn.ParentID, session.SpanID, call.ParentID, turn.SpanID, egress.ParentID, call.SpanID)
	}
	for _, c := range []struct {
		s     telemetrytest.Span
		key   string
		value string
	}{
		{turn, "cordon.broker", "model"}, {turn, "cordon.model", "claude-trace"}, {turn, "cordon.decision", "allow"},
		{turn, "cordon.action", "model.invoke"},
		{call, "cordon.broker", "tool"}, {call, "cordon.tool.server", "t"}, {call, "cordon.tool.name", "echo"},
		{egress, "cordon.broker", "egress"}, {egress, "cordon.target", "allowed.test:" + target.Port()}, {egress, "cordon.decision", "allow"},
	} {
		if got := c.s.Attrs[c.key]; got != c.value {
			t.Errorf("%s %s = %q, want %q (attrs %v)", c.s.Name, c.key, got, c.value, c.s.Attrs)
		}
	}
	for _, s := range []telemetrytest.Span{turn, call} {
		if s.Attrs["cordon.receipt.id"] == "" && s.Name != "model.turn" {
			t.Errorf("%s has no receipt id: %v", s.Name, s.Attrs)
		}
	}
	// The receipts, read from the host, name the same trace and spans.
	rcs := receiptLines[tracedReceipt](t, st)
	want := map[string]string{"model": turn.SpanID, "tool": call.SpanID, "egress": egress.SpanID}
	for _, rc := range rcs {
		if rc.TraceID != session.TraceID {
			t.Errorf("receipt %d (%s) has trace id %q, want %s", rc.ID, rc.Broker, rc.TraceID, session.TraceID)
		}
		if w, ok := want[rc.Broker]; ok {
			if rc.SpanID != w {
				t.Errorf("receipt %d (%s) has span id %q, want %s", rc.ID, rc.Broker, rc.SpanID, w)
			}
			delete(want, rc.Broker)
		}
	}
	if len(want) != 0 {
		t.Errorf("no receipt of %v: %+v", want, rcs)
	}
	// Headers from OTEL_EXPORTER_OTLP_HEADERS reach the collector.
	if hs := recv.Headers(); len(hs) == 0 || hs[0].Get("x-collector-token") != "tok-9d2e" {
		t.Errorf("export headers: %v", hs)
	}
}

func names(spans []telemetrytest.Span) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name+"<"+s.ParentID+">"+s.SpanID)
	}
	return out
}

// Export is off by default: with no telemetry section and no OTEL_*
// variable nothing connects to the receiver, yet the receipts carry
// trace ids. OTEL_TRACES_EXPORTER=none overrides an endpoint. A receiver
// that is down, or one that never answers, costs the run at most the
// bounded flush.
func TestTraceExportOffAndDown(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	up := testkit.NewModelUpstream(t, fakeKey, "done")
	target := testkit.NewTarget(t, "allowed-host-body")
	recv := telemetrytest.NewReceiver(t)
	cfg := traceConfig(t, up.URL(), target.Port(), "")
	script := `curl -sS --max-time 10 http://allowed.test:` + target.Port() + `/`
	run := func(cfg string, env ...string) (result, time.Duration) {
		start := time.Now()
		r := cordonEnv(t, env, st, "run", "--config", cfg, "--", "/bin/sh", "-c", script)
		if r.Code != 0 || !strings.Contains(r.Stdout, "allowed-host-body") {
			t.Fatalf("run %v = %d\nstdout: %s\nstderr: %s", env, r.Code, r.Stdout, r.Stderr)
		}
		return r, time.Since(start)
	}
	_, base := run(cfg)
	run(cfg, "OTEL_TRACES_EXPORTER=none", "OTEL_EXPORTER_OTLP_ENDPOINT="+recv.URL())
	if n := recv.Accepted(); n != 0 {
		t.Fatalf("export off: the receiver accepted %d connections", n)
	}
	rcs := receiptLines[tracedReceipt](t, st, "--broker", "egress")
	if len(rcs) != 2 || len(rcs[0].TraceID) != 32 || len(rcs[0].SpanID) != 16 || rcs[0].TraceID == rcs[1].TraceID {
		t.Fatalf("receipts without export: %+v", rcs)
	}
	// Control: the same run with the config's section exports.
	on := traceConfig(t, up.URL(), target.Port(), "telemetry:\n  traces:\n    endpoint: "+recv.URL()+"\n")
	run(on)
	if recv.Accepted() == 0 || len(recv.Spans()) == 0 {
		t.Fatalf("export on: %d connections, %d spans", recv.Accepted(), len(recv.Spans()))
	}
	// A receiver that is down (a closed port) and one that accepts and
	// never answers.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String()
	ln.Close()
	hang, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hang.Close()
	go func() {
		for {
			c, err := hang.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	for _, ep := range []string{down, "http://" + hang.Addr().String()} {
		_, d := run(cfg, "OTEL_EXPORTER_OTLP_ENDPOINT="+ep)
		// Bound: the session's flush and the provider's shutdown, each at
		// most telemetry.ExportTimeout (2 s), plus slack for a loaded host.
		if d > base+8*time.Second {
			t.Errorf("receiver %s: the run took %v, %v without export", ep, d, base)
		}
	}
}

// A daemon whose own environment turns export on traces its sandboxes:
// one trace from the gateway's start to the sandbox's removal, the model
// turn and the egress connection it caused (no tool call: the egress
// goes under the turn), and the receipts name that trace. The telemetry
// section of the client's configuration is ignored: nothing reaches the
// endpoint it names (a client must not pick where the root side sends).
func TestTraceDaemonSandbox(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	up := testkit.NewModelUpstream(t, fakeKey, "done")
	target := testkit.NewTarget(t, "allowed-host-body")
	recv := telemetrytest.NewReceiver(t)
	// The client's configuration names an endpoint of its own: the
	// daemon (root) must not send anything there — only where its own
	// environment says (recv, the control).
	clients := telemetrytest.NewReceiver(t)
	cfg := gatewayConfig(t, up.URL(), fmt.Sprintf(`egress:
  allow:
    - host: allowed.test
      ports: [%s]
  unsafe_allow_ranges: ["127.0.0.1/32"]
  resolve:
    allowed.test: 127.0.0.1
telemetry:
  traces:
    endpoint: %s
`, target.Port(), clients.URL()))
	d := startDaemon(t, st)
	// The daemon again, with the OTEL_* variables in its environment
	// (the harness starts it with PATH only): a wrapper that sets them
	// and execs the same binary.
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	wrapper := filepath.Join(dir, "cordon-otel")
	if err := os.WriteFile(wrapper, []byte("#!/bin/sh\nOTEL_EXPORTER_OTLP_ENDPOINT="+recv.URL()+" exec "+hooksBin+" \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	d.kill()
	d.bin = wrapper
	d.start()
	d.createStart("traced", "--config", cfg, "--", "/bin/sleep", "1000")
	script := `curl -sS --max-time 20 -H 'content-type: application/json' -d '{"model":"claude-d","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}' "$ANTHROPIC_BASE_URL/v1/messages"; echo; ` +
		`curl -sS --max-time 10 http://allowed.test:` + target.Port() + `/; echo; env`
	r := d.cli("sandbox", "exec", "traced", "--", "/bin/sh", "-c", script)
	if !strings.Contains(r.Stdout, "done") || !strings.Contains(r.Stdout, "allowed-host-body") || strings.Contains(r.Stdout, "OTEL_") {
		t.Fatalf("exec = %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
	if r := d.cli("sandbox", "rm", "traced"); r.Code != 0 {
		t.Fatalf("rm: %s", r.Stderr)
	}
	var spans []telemetrytest.Span
	waitFor(t, func() bool {
		spans = recv.Spans()
		for _, s := range spans {
			if s.Name == "session" {
				return true
			}
		}
		return false
	}, "the daemon sandbox's session span")
	if n := clients.Accepted(); n != 0 {
		t.Errorf("the daemon connected %d times to the endpoint the client's configuration named", n)
	}
	by := map[string]telemetrytest.Span{}
	for _, s := range spans {
		by[s.Name] = s
		if strings.Contains(s.Raw, fakeKey) {
			t.Errorf("span %s carries the key", s.Name)
		}
	}
	session, turn, egress := by["session"], by["model.turn"], by["egress.connect"]
	if turn.ParentID != session.SpanID || egress.ParentID != turn.SpanID || turn.TraceID != session.TraceID || egress.TraceID != session.TraceID {
		t.Fatalf("daemon trace links: %v", names(spans))
	}
	for _, rc := range receiptLines[tracedReceipt](t, st) {
		if (rc.Broker == "model" || rc.Broker == "egress") && rc.TraceID != session.TraceID {
			t.Errorf("receipt %d (%s): trace %q, want %s", rc.ID, rc.Broker, rc.TraceID, session.TraceID)
		}
	}
}
