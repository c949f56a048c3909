package e2e

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/testkit"
	_ "modernc.org/sqlite"
)

// mcpfsDir is where scripts/test.sh installs the pinned upstream MCP
// server nobody here wrote: npm @modelcontextprotocol/server-filesystem.
func mcpfsDir(t *testing.T) string {
	d := os.Getenv("CORDON_TEST_MCPFS_DIR")
	if d == "" {
		d = "/opt/cordon-test/mcpfs"
	}
	testkit.RequireFile(t, filepath.Join(d, mcpfsEntry), "the filesystem MCP server is not installed (scripts/test.sh installs it)")
	return d
}

const mcpfsEntry = "node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"

// toolResultLine mirrors mcpclient's output line.
type toolResultLine struct {
	IsError bool           `json:"is_error"`
	Text    string         `json:"text"`
	Meta    map[string]any `json:"meta"`
}

func toolLines(t *testing.T, r result) []toolResultLine {
	t.Helper()
	var out []toolResultLine
	for _, l := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		var tl toolResultLine
		if json.Unmarshal([]byte(l), &tl) == nil && (tl.Text != "" || tl.Meta != nil) {
			out = append(out, tl)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no tool result: exit %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
	return out
}

// writeConfig writes a cordon/v1 config with body after the header.
func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "cordon.yaml")
	if err := os.WriteFile(p, []byte("version: cordon/v1\nworkload: tools-e2e\ntenant: acme\npurpose: testing\n"+body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// The real filesystem MCP server runs contained on the trusted side; the
// official Go SDK client in the agent's sandbox reaches it only through
// the tool broker: schema-checked, redacted, receipted, replay-safe.
func TestToolBrokerFilesystemServer(t *testing.T) {
	testkit.RequireRoot(t)
	fs := mcpfsDir(t)
	st := newStateDir(t)
	data := t.TempDir()
	os.WriteFile(filepath.Join(data, "hello.txt"), []byte("hello from the trusted side\n"), 0o644)
	os.WriteFile(filepath.Join(data, "leak.txt"), []byte("the key is "+fakeKey+"\n"), 0o644)
	keyFile := filepath.Join(t.TempDir(), "key")
	os.WriteFile(keyFile, []byte(fakeKey), 0o600)
	cfg := writeConfig(t, fmt.Sprintf(`secrets:
  k: {file: %s}
tools:
  - name: fs
    command: [/usr/bin/node, /opt/mcpfs/%s, /data]
    binds: [{source: %s, target: /opt/mcpfs}, {source: %s, target: /data}]
    allow: [read_text_file, list_directory]
`, keyFile, mcpfsEntry, fs, data))
	run := func(args ...string) result {
		return cordon(t, cordonBin, st, append([]string{"run", "--config", cfg, "--ro", probeDir + ":/probe", "--", "/probe/mcpclient"}, args...)...)
	}
	r := run("list")
	if r.Code != 0 || !strings.Contains(r.Stdout, "fs__read_text_file") || !strings.Contains(r.Stdout, "fs__list_directory") ||
		strings.Contains(r.Stdout, "write_file") || strings.Contains(r.Stdout, "move_file") {
		t.Fatalf("tools/list: exit %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
	got := toolLines(t, run("call", "fs__read_text_file", `{"path":"/data/hello.txt"}`, "key-1"))[0]
	if got.IsError || got.Text != "hello from the trusted side\n" || got.Meta["cordon.dev/untrusted"] != true {
		t.Fatalf("read: %+v", got)
	}
	// A retransmission with the same idempotency key (another run, even)
	// replays the original result and receipt.
	again := toolLines(t, run("call", "fs__read_text_file", `{"path":"/data/hello.txt"}`, "key-1"))[0]
	if again.Meta["cordon.dev/replay"] != true || again.Meta["cordon.dev/receipt"] != got.Meta["cordon.dev/receipt"] || again.Text != got.Text {
		t.Fatalf("replay: %+v, original %+v", again, got)
	}
	// The same JSON-RPC id twice in one MCP session: the second is a replay.
	rt := run("retransmit", "fs__read_text_file", `{"path":"/data/hello.txt"}`)
	lines := strings.Split(strings.TrimSpace(rt.Stdout), "\n")
	if len(lines) != 2 || strings.Contains(lines[0], "replay") || !strings.Contains(lines[1], `"cordon.dev/replay":true`) {
		t.Fatalf("retransmit:\n%s\nstderr: %s", rt.Stdout, rt.Stderr)
	}
	// Custodied values are redacted from tool results.
	leak := toolLines(t, run("call", "fs__read_text_file", `{"path":"/data/leak.txt"}`))[0]
	if strings.Contains(leak.Text, fakeKey) || !strings.Contains(leak.Text, "[REDACTED]") {
		t.Fatalf("secret in a tool result: %q", leak.Text)
	}
	// Schema violations and tools not offered are refused; nothing runs.
	bad := toolLines(t, run("call", "fs__read_text_file", `{"path":"/data/hello.txt","follow":true}`))[0]
	if !bad.IsError || !strings.Contains(bad.Text, "unknown field") {
		t.Fatalf("unknown field: %+v", bad)
	}
	r = run("call", "fs__write_file", `{"path":"/data/x","content":"y"}`)
	if _, err := os.Stat(filepath.Join(data, "x")); err == nil || (r.Code == 0 && !strings.Contains(r.Stdout, `"is_error":true`)) {
		t.Fatalf("a tool not offered ran: exit %d %s %s", r.Code, r.Stdout, r.Stderr)
	}
	// Executions: one per distinct call, replays did not run again.
	calls := cordon(t, cordonBin, st, "calls", "list", "--json")
	if n := strings.Count(calls.Stdout, `"key":"key:key-1"`); n != 1 {
		t.Fatalf("calls with key-1: %d\n%s", n, calls.Stdout)
	}
	rcs := cordon(t, cordonBin, st, "receipts", "--json", "--broker", "tool")
	if !strings.Contains(rcs.Stdout, `"result_digest":"sha256:`) || !strings.Contains(rcs.Stdout, `"policy":{"digest":"sha256:`) ||
		strings.Contains(rcs.Stdout, fakeKey) {
		t.Fatalf("tool receipts:\n%s", rcs.Stdout)
	}
}

// A tool server is itself contained: its own sandbox and lease, only its
// declared binds, its secret in its environment and never the agent's;
// an unanswered call is quarantined, never retried; big results withheld.
func TestToolServerContained(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	data := t.TempDir()
	os.Chown(data, 1000, 1000)
	os.WriteFile(filepath.Join(data, "in.txt"), []byte("bound input"), 0o644)
	secret := t.TempDir()
	os.WriteFile(filepath.Join(secret, "tok"), []byte("tool-token-5e3d9a"), 0o600)
	hostFile := filepath.Join(t.TempDir(), "host-only.txt")
	os.WriteFile(hostFile, []byte("host secret"), 0o644)
	cfg := writeConfig(t, fmt.Sprintf(`secrets:
  tok: {file: %s/tok}
tools:
  - name: t
    command: [/tools/mcpserver]
    binds: [{source: %s, target: /tools}, {source: %s, target: /data, writable: true}]
    secret_env: {TOOL_TOKEN: tok}
    timeout: 1s
`, secret, probeDir, data))
	call := func(tool, args string, extra ...string) toolResultLine {
		r := cordon(t, cordonBin, st, append([]string{"run", "--config", cfg, "--ro", probeDir + ":/probe", "--", "/probe/mcpclient", "call", tool, args}, extra...)...)
		return toolLines(t, r)[0]
	}
	// Positive control: the server reads its bind.
	if r := call("t__read", `{"path":"/data/in.txt"}`); r.IsError || r.Text != "bound input" {
		t.Fatalf("read of a bound file: %+v", r)
	}
	// Host files outside its binds do not exist for it.
	for _, p := range []string{hostFile, "/etc/shadow", "/root"} {
		if r := call("t__read", fmt.Sprintf(`{"path":%q}`, p)); !r.IsError || strings.Contains(r.Text, "host secret") {
			t.Fatalf("tool server read %s: %+v", p, r)
		}
	}
	// Its own user namespace on a leased range, not the host's ids.
	if r := call("t__read", `{"path":"/proc/self/uid_map"}`); r.IsError || strings.Contains(r.Text, "4294967295") || !strings.Contains(r.Text, "65536") {
		t.Fatalf("tool server uid_map: %+v", r)
	}
	// Writable bind: the write lands on the host; elsewhere it fails.
	if r := call("t__write", `{"path":"/data/out.txt"}`); r.IsError {
		t.Fatalf("write to the writable bind: %+v", r)
	}
	if b, _ := os.ReadFile(filepath.Join(data, "out.txt")); string(b) != "written\n" {
		t.Fatalf("out.txt = %q", b)
	}
	// Outside its binds the write fails, and the host's /usr (bound
	// read-only) is seen unchanged from outside.
	if r := call("t__write", `{"path":"/usr/out.txt"}`); !r.IsError {
		t.Fatalf("write outside the binds: %+v", r)
	}
	if _, err := os.Stat("/usr/out.txt"); err == nil {
		t.Fatal("the tool server wrote /usr/out.txt on the host")
	}
	// The server has its secret (the result shows it redacted); the agent's
	// environment does not.
	if r := call("t__env", `{"name":"TOOL_TOKEN"}`); r.Text != "[REDACTED]" {
		t.Fatalf("tool server secret_env: %+v", r)
	}
	ag := cordon(t, cordonBin, st, "run", "--config", cfg, "--", "/usr/bin/env")
	if strings.Contains(ag.Stdout, "tool-token-5e3d9a") || strings.Contains(ag.Stdout, "TOOL_TOKEN") {
		t.Fatalf("the agent sees the tool server's secret:\n%s", ag.Stdout)
	}
	// Big results are withheld.
	if r := call("t__big", `{"text":"x"}`); !r.IsError || !strings.Contains(r.Text, "withheld") {
		t.Fatalf("big result: %+v", clipLine(r))
	}
	// No answer within the timeout: quarantined, and a retransmission with
	// the same key is refused rather than run again.
	if r := call("t__sleep", `{"seconds":3}`, "slow-1"); !r.IsError || !strings.Contains(r.Text, "quarantined") {
		t.Fatalf("slow call: %+v", r)
	}
	if r := call("t__sleep", `{"seconds":3}`, "slow-1"); !r.IsError || !strings.Contains(r.Text, "quarantined") {
		t.Fatalf("retransmission of a quarantined call: %+v", r)
	}
	q := cordon(t, cordonBin, st, "calls", "list", "--state", "quarantined", "--json")
	var qc struct {
		ID    int64  `json:"id"`
		Tool  string `json:"tool"`
		State string `json:"state"`
	}
	if err := json.Unmarshal([]byte(strings.Split(strings.TrimSpace(q.Stdout), "\n")[0]), &qc); err != nil || qc.Tool != "sleep" {
		t.Fatalf("quarantined list: %s %v", q.Stdout, err)
	}
	rec := cordon(t, cordonBin, st, "calls", "reconcile", fmt.Sprint(qc.ID), "--note", "checked: it slept")
	if rec.Code != 0 {
		t.Fatalf("reconcile: %d %s", rec.Code, rec.Stderr)
	}
	if q := cordon(t, cordonBin, st, "calls", "list", "--state", "quarantined"); strings.Contains(q.Stdout, "sleep") {
		t.Fatalf("still quarantined after reconcile:\n%s", q.Stdout)
	}
	if r := cordon(t, cordonBin, st, "calls", "reconcile", "999999", "--note", "x"); r.Code != 125 {
		t.Fatalf("reconcile of an unknown call: %d", r.Code)
	}
}

func clipLine(r toolResultLine) toolResultLine {
	if len(r.Text) > 200 {
		r.Text = r.Text[:200] + "…"
	}
	return r
}

// Claude Code, configured with the gateway's MCP URL, calls a tool of the
// real filesystem server through the broker and answers with its result.
func TestAgentClaudeCodeMCP(t *testing.T) {
	testkit.RequireRoot(t)
	dir := claudeDir(t)
	fs := mcpfsDir(t)
	st := newStateDir(t)
	data := t.TempDir()
	os.WriteFile(filepath.Join(data, "note.txt"), []byte("the-tool-content-7731"), 0o644)
	up := testkit.NewModelUpstream(t, fakeKey, "unused")
	up.ToolName, up.ToolInput = "mcp__cordon__fs__read_text_file", `{"path":"/data/note.txt"}`
	cfg := gatewayConfig(t, up.URL(), fmt.Sprintf(`tools:
  - name: fs
    command: [/usr/bin/node, /opt/mcpfs/%s, /data]
    binds: [{source: %s, target: /opt/mcpfs}, {source: %s, target: /data}]
    allow: [read_text_file]
`, mcpfsEntry, fs, data))
	mcpConfig := `{"mcpServers":{"cordon":{"type":"http","url":"http://127.0.0.1:82/mcp"}}}`
	r := cordon(t, cordonBin, st, "run", "--config", cfg, "--ro", dir+":/opt/claude",
		"--env", "DISABLE_AUTOUPDATER=1", "--env", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"--env", "DISABLE_TELEMETRY=1", "--env", "DISABLE_ERROR_REPORTING=1",
		"--env", "ENABLE_TOOL_SEARCH=false", // offer MCP tools directly, not behind ToolSearch
		"--timeout", "110s", "--",
		"/opt/claude/node_modules/@anthropic-ai/claude-code/bin/claude.exe", "-p", "read the note", "--model", "claude-sonnet-4-5",
		"--mcp-config", mcpConfig, "--allowedTools", "mcp__cordon__fs__read_text_file")
	if r.Code != 0 || !strings.Contains(r.Stdout, "the-tool-content-7731") {
		t.Fatalf("claude -p with MCP = %d\nstdout: %s\nstderr: %s\nupstream saw: %+v\ntool results: %v", r.Code, r.Stdout, r.Stderr, up.Seen(), up.ToolResults())
	}
	rcs := cordon(t, cordonBin, st, "receipts", "--json", "--broker", "tool")
	if !strings.Contains(rcs.Stdout, `"target":"fs/read_text_file"`) || !strings.Contains(rcs.Stdout, `"decision":"allow"`) {
		t.Fatalf("no tool receipt:\n%s", rcs.Stdout)
	}
}

// A call that policy marks @approval("required") waits, bounded, for an
// operator on the host: it runs once approved (from outside the sandbox),
// and only that exact request; without a decision in time the agent gets
// a typed "approval pending" result. Nothing inside the sandbox approves.
func TestToolApprovalFlow(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	pol := filepath.Join(t.TempDir(), "p.cedar")
	os.WriteFile(pol, []byte(`
@id("read-freely")
permit(principal, action == Action::"tool.call", resource == Tool::"t/read");
@id("echo-needs-approval")
@approval("required")
permit(principal, action == Action::"tool.call", resource == Tool::"t/echo");
`), 0o644)
	cfg := writeConfig(t, fmt.Sprintf(`policy: [%s]
tools:
  - name: t
    command: [/tools/mcpserver]
    binds: [{source: %s, target: /tools}]
approvals: {wait: 40s, ttl: 5m}
`, pol, probeDir))
	// Only permitted tools are offered.
	r := cordon(t, cordonBin, st, "run", "--config", cfg, "--ro", probeDir+":/probe", "--", "/probe/mcpclient", "list")
	if got := strings.Fields(r.Stdout); len(got) != 2 || got[0] != "t__echo" || got[1] != "t__read" {
		t.Fatalf("offered tools: %q (stderr %s)", r.Stdout, r.Stderr)
	}
	done := make(chan result, 1)
	go func() {
		done <- cordon(t, cordonBin, st, "run", "--config", cfg, "--ro", probeDir+":/probe", "--", "/probe/mcpclient", "call", "t__echo", `{"text":"approved text"}`)
	}()
	// The operator sees the exact arguments, and approves from the host.
	var id string
	for i := 0; i < 100 && id == ""; i++ {
		l := cordon(t, cordonBin, st, "approvals", "list", "--json")
		var a struct {
			ID        string          `json:"id"`
			State     string          `json:"state"`
			Target    string          `json:"target"`
			Arguments json.RawMessage `json:"arguments"`
		}
		if json.Unmarshal([]byte(strings.Split(strings.TrimSpace(l.Stdout), "\n")[0]), &a) == nil && a.State == "pending" {
			if a.Target != "t/echo" || string(a.Arguments) != `{"text":"approved text"}` {
				t.Fatalf("approval shows %s %s", a.Target, a.Arguments)
			}
			id = a.ID
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if id == "" {
		t.Fatal("no pending approval appeared")
	}
	if f := cordon(t, cordonBin, st, "approvals", "approve", "apr_000000000000000000000000"); f.Code != 125 || !strings.Contains(f.Stderr, "not found") {
		t.Fatalf("forged approval id: %d %s", f.Code, f.Stderr)
	}
	if a := cordon(t, cordonBin, st, "approvals", "approve", id); a.Code != 0 {
		t.Fatalf("approve: %d %s", a.Code, a.Stderr)
	}
	got := toolLines(t, <-done)[0]
	if got.IsError || got.Text != "approved text" {
		t.Fatalf("approved call: %+v", got)
	}
	// Single use: approving it again is refused; the receipt names it.
	if a := cordon(t, cordonBin, st, "approvals", "approve", id); a.Code != 125 {
		t.Fatalf("second approve of %s: %d %s", id, a.Code, a.Stderr)
	}
	rcs := cordon(t, cordonBin, st, "receipts", "--json", "--broker", "tool")
	if !strings.Contains(rcs.Stdout, `"approval":"`+id+`"`) || !strings.Contains(rcs.Stdout, `"echo-needs-approval"`) {
		t.Fatalf("receipt without the approval:\n%s", rcs.Stdout)
	}
	// No decision within the wait: a typed pending result, nothing ran; the
	// request dies with its sandbox (revoked).
	short := writeConfig(t, fmt.Sprintf(`policy: [%s]
tools:
  - name: t
    command: [/tools/mcpserver]
    binds: [{source: %s, target: /tools}]
approvals: {wait: 1s}
`, pol, probeDir))
	p := toolLines(t, cordon(t, cordonBin, st, "run", "--config", short, "--ro", probeDir+":/probe", "--", "/probe/mcpclient", "call", "t__echo", `{"text":"later"}`))[0]
	status, _ := p.Meta["cordon.dev/status"].(map[string]any)
	if !p.IsError || status["status"] != "approval_pending" || !strings.HasPrefix(fmt.Sprint(status["approval_id"]), "apr_") {
		t.Fatalf("pending result: %+v", p)
	}
	l := cordon(t, cordonBin, st, "approvals", "list", "--all", "--json")
	if !strings.Contains(l.Stdout, fmt.Sprint(status["approval_id"])) || !strings.Contains(l.Stdout, `"revoked"`) {
		t.Fatalf("the pending approval of a stopped sandbox is not revoked:\n%s", l.Stdout)
	}
}

// Receipts of a real run are leaves of the signed Merkle log: the log
// verifies, a receipt has an inclusion proof, and editing a stored receipt
// afterwards (as someone with the database file would) is reported with
// its position.
func TestEvidenceLogVerifiesAndDetectsTampering(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	cfg := writeConfig(t, fmt.Sprintf(`tools:
  - name: t
    command: [/tools/mcpserver]
    binds: [{source: %s, target: /tools}]
`, probeDir))
	for _, txt := range []string{"one", "two", "three"} {
		toolLines(t, cordon(t, cordonBin, st, "run", "--config", cfg, "--ro", probeDir+":/probe", "--", "/probe/mcpclient", "call", "t__echo", fmt.Sprintf(`{"text":%q}`, txt)))
	}
	// Each run logs its signed session receipt first (odd ids), then the
	// call's receipt (even ids).
	v := cordon(t, cordonBin, st, "evidence", "verify")
	if v.Code != 0 || !strings.Contains(v.Stdout, "ok: 6 receipts") {
		t.Fatalf("verify: %d\n%s\n%s", v.Code, v.Stdout, v.Stderr)
	}
	if p := cordon(t, cordonBin, st, "evidence", "verify", "--receipt", "2"); p.Code != 0 || !strings.Contains(p.Stdout, "proof of receipt 2: ok") {
		t.Fatalf("proof: %d\n%s\n%s", p.Code, p.Stdout, p.Stderr)
	}
	db, err := sql.Open("sqlite", filepath.Join(st, "cordon.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT name FROM sqlite_master WHERE type = 'trigger'`)
	if err != nil {
		t.Fatal(err)
	}
	var triggers []string
	for rows.Next() {
		var n string
		rows.Scan(&n)
		triggers = append(triggers, n)
	}
	rows.Close()
	for _, n := range triggers {
		if _, err := db.Exec(`DROP TRIGGER "` + n + `"`); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(`UPDATE receipts SET body = replace(body, '"decision":"allow"', '"decision":"deny"') WHERE id = 2`); err != nil {
		t.Fatal(err)
	}
	v = cordon(t, cordonBin, st, "evidence", "verify")
	if v.Code == 0 || !strings.Contains(v.Stdout+v.Stderr, "receipt 2") {
		t.Fatalf("tampered receipt not reported: %d\n%s\n%s", v.Code, v.Stdout, v.Stderr)
	}
}

// SIGKILL of cordon while a call waits for approval and another is in
// flight: after gc (or the next run) the approval is revoked — it can never
// authorise a later sandbox — and the call in flight is quarantined.
func TestToolCrossingsReleasedAfterKill(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	pol := filepath.Join(t.TempDir(), "p.cedar")
	os.WriteFile(pol, []byte(`
@id("sleep") permit(principal, action == Action::"tool.call", resource == Tool::"t/sleep");
@id("echo-needs-approval") @approval("required")
permit(principal, action == Action::"tool.call", resource == Tool::"t/echo");
`), 0o644)
	cfg := writeConfig(t, fmt.Sprintf(`policy: [%s]
tools:
  - name: t
    command: [/tools/mcpserver]
    binds: [{source: %s, target: /tools}]
    timeout: 60s
approvals: {wait: 60s}
`, pol, probeDir))
	start := func(args ...string) *exec.Cmd {
		cmd := exec.Command(cordonBin, append([]string{"--state-dir", st, "run", "--config", cfg, "--ro", probeDir + ":/probe", "--", "/probe/mcpclient"}, args...)...)
		cmd.Env = []string{"PATH=/usr/bin:/bin"}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	waiting := start("call", "t__echo", `{"text":"rm -rf prod"}`)
	sleeping := start("call", "t__sleep", `{"seconds":50}`, "sleep-key")
	var pending, started bool
	for i := 0; i < 150 && !(pending && started); i++ {
		time.Sleep(200 * time.Millisecond)
		pending = strings.Contains(cordon(t, cordonBin, st, "approvals", "list", "--json").Stdout, `"pending"`)
		started = strings.Contains(cordon(t, cordonBin, st, "calls", "list", "--state", "started").Stdout, "t/sleep")
	}
	if !pending || !started {
		t.Fatalf("pending approval %v, started call %v", pending, started)
	}
	for _, c := range []*exec.Cmd{waiting, sleeping} {
		c.Process.Kill() // SIGKILL, by the PID we started
		c.Wait()
	}
	if r := cordon(t, cordonBin, st, "gc"); r.Code != 0 {
		t.Fatalf("gc: %d %s", r.Code, r.Stderr)
	}
	l := cordon(t, cordonBin, st, "approvals", "list", "--all", "--json")
	if strings.Contains(l.Stdout, `"pending"`) || !strings.Contains(l.Stdout, `"revoked"`) {
		t.Fatalf("approval of a killed sandbox not revoked:\n%s", l.Stdout)
	}
	q := cordon(t, cordonBin, st, "calls", "list", "--state", "quarantined")
	if !strings.Contains(q.Stdout, "t/sleep") {
		t.Fatalf("call in flight at the kill not quarantined:\n%s", q.Stdout)
	}
}
