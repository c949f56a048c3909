package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/agent"
	"github.com/cordon-project/cordon/internal/gateway"
	"github.com/cordon-project/cordon/internal/testkit"
)

// geminiDir is where scripts/test.sh installs the pinned Gemini CLI (npm
// @google/gemini-cli@0.61.0); CORDON_TEST_GEMINI_DIR overrides.
func geminiDir(t *testing.T) string {
	d := os.Getenv("CORDON_TEST_GEMINI_DIR")
	if d == "" {
		d = "/opt/cordon-test/gemini"
	}
	testkit.RequireFile(t, filepath.Join(d, geminiEntry), "Gemini CLI is not installed (scripts/test.sh installs it)")
	return d
}

// geminiEntry is the CLI's entry point under its install directory.
const geminiEntry = "node_modules/@google/gemini-cli/bundle/gemini.js"

// geminiConfig is a cordon config with one Gemini route to upstream,
// allowing gemini-2.5-* only, its key from GEMINI_API_KEY in cordon's own
// environment, as in examples/gemini.yaml: the sandbox's variable of the
// same name must be the placeholder.
func geminiConfig(t *testing.T, upstream string) string {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf(`version: cordon/v1
workload: e2e
tenant: acme
purpose: testing
models:
  - name: gemini
    api: gemini
    upstream: %s
    credential: gemini-key
    models: ["gemini-2.5-*"]
secrets:
  gemini-key: {env: GEMINI_API_KEY}
`, upstream)
	p := filepath.Join(dir, "cordon.yaml")
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// geminiHome is a workspace holding the CLI's home (GEMINI_CLI_HOME=
// /workspace/home): settings.json selects API-key auth (else the CLI
// exits 41, "Invalid auth method"), turns usage statistics off (else it
// calls play.googleapis.com) and update checks off (registry.npmjs.org).
func geminiHome(t *testing.T) string {
	t.Helper()
	ws := workspace(t)
	dot := filepath.Join(ws, "home", ".gemini")
	if err := os.MkdirAll(dot, 0o755); err != nil {
		t.Fatal(err)
	}
	settings := `{"security":{"auth":{"selectedType":"gemini-api-key"}},"privacy":{"usageStatisticsEnabled":false},` +
		`"general":{"enableAutoUpdate":false,"enableAutoUpdateNotification":false},"tools":{"sandbox":false}}`
	if err := os.WriteFile(filepath.Join(dot, "settings.json"), []byte(settings), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(ws, "home"), dot, filepath.Join(dot, "settings.json")} {
		if err := os.Chown(p, wsOwner, wsOwner); err != nil {
			t.Fatal(err)
		}
	}
	return ws
}

// A real agent: Gemini CLI runs one-shot (-p) inside the sandbox; its
// requests reach the fake Gemini upstream only through the broker, with
// the real key injected as x-goog-api-key; what the agent can see (its
// environment, its home) holds the placeholder, never the key; receipts
// are recorded; and a model outside the route's list is refused by the
// broker, the upstream never seeing it.
func TestAgentGeminiCLI(t *testing.T) {
	testkit.RequireRoot(t)
	dir := geminiDir(t)
	st := newStateDir(t)
	const answer = "cordon-gemini-answer-7"
	up := testkit.NewModelUpstream(t, fakeKey, answer)
	cfg := geminiConfig(t, up.URL())
	ws := geminiHome(t)
	run := func(model, prompt string) result {
		return cordonGemini(t, st, "run", "--config", cfg, "--workspace", ws,
			"--ro", dir+":/opt/gemini",
			"--env", "GEMINI_CLI_HOME=/workspace/home", "--env", "GEMINI_SANDBOX=false",
			"--env", "GEMINI_CLI_NO_RELAUNCH=true", "--env", "NO_COLOR=1",
			"--timeout", "120s", "--",
			"/bin/sh", "-c", `cd /workspace && /usr/bin/node /opt/gemini/`+geminiEntry+` --skip-trust -m "$0" -p "$1" </dev/null; rc=$?; `+
				`echo "=== env"; env; exit $rc`,
			model, prompt)
	}
	r := run("gemini-2.5-flash", "say the magic words")
	out, env, _ := strings.Cut(r.Stdout, "=== env")
	if r.Code != 0 || !strings.Contains(out, answer) {
		t.Fatalf("gemini -p in the sandbox = %d\nstdout: %s\nstderr: %s\nupstream saw: %+v", r.Code, r.Stdout, r.Stderr, up.Seen())
	}
	var generate int
	for _, s := range up.Seen() {
		if strings.Contains(s.Path, ":streamGenerateContent") || strings.Contains(s.Path, ":generateContent") {
			generate++
		}
		if s.GoogKey != fakeKey || strings.Contains(s.Query, "key=") || s.Auth != "" {
			t.Errorf("upstream request %s?%s carried x-goog-api-key %q, Authorization %q: want the custodied key only", s.Path, s.Query, s.GoogKey, s.Auth)
		}
		if s.Model != "gemini-2.5-flash" {
			t.Errorf("upstream request %s for model %q", s.Path, s.Model)
		}
	}
	if generate == 0 {
		t.Fatalf("the upstream saw no generateContent request: %+v", up.Seen())
	}
	// What the agent saw: the placeholder, never the key (its environment
	// and everything it printed; its home is checked from the host below).
	if !strings.Contains(env, "GEMINI_API_KEY="+gateway.PlaceholderGeminiKey) || !strings.Contains(env, "GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:80\n") {
		t.Errorf("the agent's environment lacks the placeholder or the base URL:\n%s", env)
	}
	if strings.Contains(r.Stdout+r.Stderr, fakeKey) {
		t.Errorf("the agent's environment or output holds the key")
	}
	// From the host: nothing the CLI wrote in its home holds the key (the
	// control: it did write there, beside settings.json).
	var written []string
	_ = filepath.WalkDir(filepath.Join(ws, "home"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			written = append(written, strings.TrimPrefix(p, ws))
			if b, _ := os.ReadFile(p); strings.Contains(string(b), fakeKey) {
				t.Errorf("%s holds the key", p)
			}
		}
		return nil
	})
	if len(written) < 2 {
		t.Errorf("the CLI wrote nothing in its home: %v", written)
	}
	t.Logf("the CLI's home holds %v", written)

	rc := cordon(t, cordonBin, st, "receipts", "--json", "--broker", "model")
	if rc.Code != 0 || !strings.Contains(rc.Stdout, "gemini.") || !strings.Contains(rc.Stdout, "gemini-2.5-flash") {
		t.Fatalf("receipts = %d, want gemini receipts:\n%s\n%s", rc.Code, rc.Stdout, rc.Stderr)
	}
	if strings.Contains(rc.Stdout, fakeKey) {
		t.Errorf("receipts hold the key")
	}
	allowed := geminiReceipts(t, rc.Stdout, "allow")
	if eg := cordon(t, cordonBin, st, "receipts", "--json", "--broker", "egress"); strings.Contains(eg.Stdout, "connect") {
		t.Logf("the CLI tried other destinations (refused by egress):\n%s", eg.Stdout)
	}
	t.Logf("upstream saw %d requests, %d allowed gemini receipts", len(up.Seen()), allowed)

	// A model outside the allow-list: the broker refuses, the upstream
	// never sees it, the agent reports the broker's error.
	before := len(up.Seen())
	r = run("gemini-1.5-pro", "say the magic words")
	out, _, _ = strings.Cut(r.Stdout, "=== env")
	if r.Code == 0 || strings.Contains(out, answer) {
		t.Errorf("gemini with a model outside the list = %d\nstdout: %s", r.Code, r.Stdout)
	}
	if !strings.Contains(r.Stdout+r.Stderr, "is not allowed for this workload") {
		t.Errorf("the agent did not report the broker's refusal:\nstdout: %s\nstderr: %s", r.Stdout, r.Stderr)
	}
	t.Logf("refused run = %d: %s", r.Code, strings.TrimSpace(out+r.Stderr))
	for _, s := range up.Seen()[before:] {
		t.Errorf("the upstream saw %s for model %q", s.Path, s.Model)
	}
	rc = cordon(t, cordonBin, st, "receipts", "--json", "--broker", "model")
	if denied := geminiReceipts(t, rc.Stdout, "deny"); denied == 0 || geminiReceipts(t, rc.Stdout, "allow") != allowed {
		t.Errorf("receipts after the refused run: %d denials (want > 0), allows %d → %d:\n%s", denied, allowed, geminiReceipts(t, rc.Stdout, "allow"), rc.Stdout)
	}
}

// geminiReceipts counts the gemini.* receipts with a decision in the
// output of `cordon receipts --json` (one JSON object per line, or an
// array).
func geminiReceipts(t *testing.T, out, decision string) int {
	t.Helper()
	type receipt struct {
		Action   string `json:"action"`
		Decision string `json:"decision"`
	}
	var all []receipt
	if err := json.Unmarshal([]byte(out), &all); err != nil {
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			var r receipt
			if json.Unmarshal([]byte(line), &r) == nil {
				all = append(all, r)
			}
		}
	}
	n := 0
	for _, r := range all {
		if strings.HasPrefix(r.Action, "gemini.") && r.Decision == decision {
			n++
		}
	}
	return n
}

// Gemini CLI's own tools run inside the boundary: the fake model calls
// run_shell_command (the CLI runs it with -y), the command writes a file in
// the workspace, which the host sees, the tool's output goes back to the
// model through the broker, and the receipt lists the call as untrusted.
func TestAgentGeminiCLITool(t *testing.T) {
	testkit.RequireRoot(t)
	dir := geminiDir(t)
	st := newStateDir(t)
	up := testkit.NewModelUpstream(t, fakeKey, "done")
	up.ToolName = "run_shell_command"
	up.ToolInput = `{"command":"echo gemini-tool-ran > /workspace/tool-out.txt && echo wrote-it"}`
	cfg := geminiConfig(t, up.URL())
	ws := geminiHome(t)
	r := cordonGemini(t, st, "run", "--config", cfg, "--workspace", ws, "--ro", dir+":/opt/gemini",
		"--env", "GEMINI_CLI_HOME=/workspace/home", "--env", "GEMINI_SANDBOX=false", "--env", "GEMINI_CLI_NO_RELAUNCH=true",
		"--timeout", "120s", "--",
		"/bin/sh", "-c", `cd /workspace && exec /usr/bin/node /opt/gemini/`+geminiEntry+` --skip-trust -y -m gemini-2.5-flash -p "write the file" </dev/null`)
	if r.Code != 0 || !strings.Contains(r.Stdout, "the tool said:") {
		t.Fatalf("gemini -y -p = %d\nstdout: %s\nstderr: %s\nupstream saw: %+v", r.Code, r.Stdout, r.Stderr, up.Seen())
	}
	b, err := os.ReadFile(filepath.Join(ws, "tool-out.txt"))
	if err != nil || strings.TrimSpace(string(b)) != "gemini-tool-ran" {
		t.Errorf("the tool's file in the workspace = %q, %v", b, err)
	}
	if res := up.ToolResults(); len(res) == 0 || !strings.Contains(strings.Join(res, ""), "wrote-it") {
		t.Errorf("tool results the model got: %q", res)
	}
	rc := cordon(t, cordonBin, st, "receipts", "--json", "--broker", "model")
	if !strings.Contains(rc.Stdout, "tool_use:run_shell_command") {
		t.Errorf("no receipt lists the tool call:\n%s", rc.Stdout)
	}
}

// cordonGemini runs cordon as cordon() does, with the Gemini key in
// cordon's own environment (where geminiConfig's secret reads it).
func cordonGemini(t *testing.T, state string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cordonBin, append([]string{"--state-dir", state}, args...)...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "GEMINI_API_KEY=" + fakeKey}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	_ = cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("cordon %v: did not finish in 2 minutes", args)
	}
	return parseResult(cmd.ProcessState.ExitCode(), out.String(), errb.String(), "")
}

// checkGeminiEnv reads the running CLI's environment from the host: the
// placeholder key, never the custodied one, HOME and GEMINI_CLI_HOME at
// the agent home, and the CLI's own sandbox off.
func checkGeminiEnv(t *testing.T, pid int) {
	t.Helper()
	env, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "environ"))
	if err != nil {
		t.Fatalf("read the agent's environment: %v", err)
	}
	if strings.Contains(string(env), fakeKey) {
		t.Errorf("the custodied key is in the agent's environment")
	}
	vars := strings.Split(string(env), "\x00")
	for _, want := range []string{"GEMINI_API_KEY=" + gateway.PlaceholderGeminiKey, "HOME=/agent-home", "GEMINI_CLI_HOME=/agent-home", "GEMINI_SANDBOX=false"} {
		if !slices.Contains(vars, want) {
			t.Errorf("the agent's environment lacks %s: %q", want, vars)
		}
	}
}

// checkGeminiUpstream: every request the upstream saw carried the
// custodied key as x-goog-api-key (never the placeholder, never ?key=),
// for model; at least one generateContent.
func checkGeminiUpstream(t *testing.T, up *testkit.ModelUpstream, from int, model string) {
	t.Helper()
	n := 0
	for _, s := range up.Seen()[from:] {
		if strings.Contains(s.Path, "enerateContent") {
			n++
		}
		if s.GoogKey != fakeKey || strings.Contains(s.Query, "key=") || s.Auth != "" {
			t.Errorf("upstream request %s carried x-goog-api-key %q, query %q: want the custodied key only", s.Path, s.GoogKey, s.Query)
		}
		if s.Model != model {
			t.Errorf("upstream request %s for model %q, want %q", s.Path, s.Model, model)
		}
	}
	if n == 0 {
		t.Fatalf("the upstream saw no generateContent request: %+v", up.Seen()[from:])
	}
}

// geminiSessions are the session files the CLI keeps in home.
func geminiSessions(home string) []string {
	var out []string
	_ = filepath.WalkDir(filepath.Join(home, ".gemini", "tmp"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.Contains(p, "/chats/") {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// One command: `cordon run --agent gemini -- -p …` finds the install,
// seeds the settings the CLI needs (API-key auth) in the agent home, and
// its request reaches the fake upstream through the broker for the
// preset's default model with the custodied key; the user's -m wins.
// Positive control: with the seeded settings replaced by an empty file
// (the agent's own, left alone by the seed), the CLI refuses to start
// for want of an auth method, so the seed is what makes it work.
func TestAgentGeminiPresetOneShot(t *testing.T) {
	testkit.RequireRoot(t)
	dir := geminiDir(t)
	st := newStateDir(t)
	const answer = "gemini-preset-answer-31"
	up := testkit.NewModelUpstream(t, fakeKey, answer)
	cfg := geminiConfig(t, up.URL())
	home, ws := agentHome(t), workspace(t)
	run := func(args ...string) result {
		return cordonGemini(t, st, append([]string{"run", "--agent", "gemini", "--agent-path", dir, "--agent-home", home,
			"--workspace", ws, "--config", cfg, "--timeout", "120s", "--"}, args...)...)
	}
	r := run("-p", "say the magic words")
	if r.Code != 0 || !strings.Contains(r.Stdout, answer) {
		t.Fatalf("cordon run --agent gemini -- -p = %d\nstdout: %s\nstderr: %s\nupstream saw: %+v", r.Code, r.Stdout, r.Stderr, up.Seen())
	}
	checkGeminiUpstream(t, up, 0, agent.GeminiDefaultModel)
	checkNoKey(t, home)
	checkNoKey(t, ws)
	if strings.Contains(r.Stderr, "can trap a host user") {
		t.Errorf("the trap scan reported what the CLI left in its home or the workspace:\n%s", r.Stderr)
	}
	settings := filepath.Join(home, ".gemini", "settings.json")
	b, err := os.ReadFile(settings)
	if err != nil || !strings.Contains(string(b), `"gemini-api-key"`) || !strings.Contains(string(b), `"usageStatisticsEnabled": false`) {
		t.Fatalf("seeded settings.json = %q, %v", b, err)
	}
	if fi, err := os.Lstat(settings); err != nil || fi.Sys().(*syscall.Stat_t).Uid != uint32(wsOwner) {
		t.Errorf("settings.json %v %v: want it owned by the home's owner %d", fi, err, wsOwner)
	}
	rc := cordon(t, cordonBin, st, "receipts", "--json", "--broker", "model")
	if geminiReceipts(t, rc.Stdout, "allow") == 0 || strings.Contains(rc.Stdout, fakeKey) {
		t.Errorf("receipts: want allowed gemini receipts without the key:\n%s", rc.Stdout)
	}

	// The user's -m wins over the preset's default.
	before := len(up.Seen())
	r = run("-m", "gemini-2.5-flash", "-p", "say the magic words")
	if r.Code != 0 || !strings.Contains(r.Stdout, answer) {
		t.Fatalf("with -m: %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
	checkGeminiUpstream(t, up, before, "gemini-2.5-flash")

	// Control: the agent's own settings.json (here empty) is never
	// replaced, and without the auth setting the CLI does not start.
	if err := os.WriteFile(settings, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	before = len(up.Seen())
	r = run("-p", "say the magic words")
	if r.Code != 41 || strings.Contains(r.Stdout, answer) {
		t.Fatalf("with the auth setting removed = %d (want 41, the CLI's \"Invalid auth method\"): %s %s", r.Code, r.Stdout, r.Stderr)
	}
	if b, _ := os.ReadFile(settings); string(b) != "{}" {
		t.Errorf("cordon replaced the agent's settings.json: %q", b)
	}
	if n := len(up.Seen()) - before; n != 0 {
		t.Errorf("the upstream saw %d requests from a CLI without auth", n)
	}
	t.Logf("without the auth setting: %d %s", r.Code, strings.TrimSpace(r.Stderr))
}

// Interactive, in a real terminal: the UI comes up with no auth, theme
// or trust dialog; a typed prompt makes the fake model call
// run_shell_command; the CLI asks before running it and the test answers
// the dialog with Enter ("Allow once"), as a person would; the command
// writes a file in the workspace, read on the host; the tool's output
// goes back through the broker and the answer shows on screen. The key
// is in neither the CLI's environment (/proc/PID/environ, read from the
// host) nor any file of its home or the workspace. A second run resumes
// the session from the agent home: its request carries the first turns.
func TestAgentGeminiInteractive(t *testing.T) {
	testkit.RequireRoot(t)
	dir := geminiDir(t)
	st := newStateDir(t)
	up := testkit.NewModelUpstream(t, fakeKey, "unused")
	up.ToolName = "run_shell_command"
	up.ToolInput = `{"command":"echo written-by-gemini > /workspace/made-by-gemini.txt && echo wrote-it"}`
	cfg := geminiConfig(t, up.URL())
	home, ws := agentHome(t), workspace(t)
	x := testkit.NewTmux(t, 120, 40, []string{"GEMINI_API_KEY=" + fakeKey}, cordonBin, "--state-dir", st, "run", "--agent", "gemini",
		"--agent-path", dir, "--agent-home", home, "--workspace", ws, "--config", cfg, "--timeout", "180s")
	screen := x.WaitFor(`Type your message`, 90*time.Second)
	for _, bad := range []string{"authenticate", "Select Theme", "Do you trust", "Invalid auth", "Sign in"} {
		if strings.Contains(screen, bad) {
			t.Fatalf("first screen shows %q:\n%s", bad, screen)
		}
	}
	pid := descendantRunning(x.PID(), "node")
	if pid == 0 {
		t.Fatal("no Gemini CLI (node) process below the terminal")
	}
	if cl, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline")); !strings.Contains(string(cl), geminiEntry) {
		t.Fatalf("the node below the terminal runs %q, not the CLI", cl)
	}
	checkGeminiEnv(t, pid)
	x.Keys(true, "write the file please")
	// An Enter within 30 ms of typed text is a newline to the CLI (its
	// paste guard), and a loaded relay may deliver both at once: press it
	// only once the text is on screen.
	x.WaitFor(`> write the file please`, 30*time.Second)
	time.Sleep(500 * time.Millisecond)
	x.Keys(false, "Enter")
	// The CLI asks before it runs a shell command: answer as a person
	// would (Enter takes the first choice, "Allow once").
	screen = x.WaitFor(`(?i)allow once|the tool said`, 90*time.Second)
	asked := false
	for i := 0; i < 10 && !strings.Contains(screen, "the tool said"); i++ {
		time.Sleep(time.Second) // the dialog takes keys once drawn
		if strings.Contains(strings.ToLower(x.Screen()), "allow once") {
			asked = true
			x.Keys(false, "Enter")
		}
		screen = x.Screen()
	}
	screen = x.WaitFor(`the tool said:`, 60*time.Second)
	if !asked {
		t.Errorf("the CLI ran the shell command without asking (its approval mode is the user's, default: ask):\n%s", screen)
	}
	if !strings.Contains(screen, "Output: wrote-it") {
		t.Errorf("the answer on screen does not carry the tool's output:\n%s", screen)
	}
	b, err := os.ReadFile(filepath.Join(ws, "made-by-gemini.txt"))
	if err != nil || strings.TrimSpace(string(b)) != "written-by-gemini" {
		t.Fatalf("the file the CLI's shell tool wrote, read on the host: %q %v\nscreen:\n%s", b, err, screen)
	}
	if res := up.ToolResults(); len(res) == 0 || !strings.Contains(strings.Join(res, ""), "wrote-it") {
		t.Errorf("tool results the model got: %q", res)
	}
	checkGeminiUpstream(t, up, 0, agent.GeminiDefaultModel)
	checkNoKey(t, home)
	checkNoKey(t, ws)
	x.Type("/quit")
	time.Sleep(300 * time.Millisecond)
	x.Keys(false, "Enter")
	x.WaitExit(30 * time.Second)

	// State survives: the session is in the agent home, and a second
	// (one-shot) run resumes it, so its request carries the first turns.
	if s := geminiSessions(home); len(s) == 0 {
		t.Fatalf("no session under %s/.gemini/tmp after the first run", home)
	}
	up.ToolName = "" // the first run has ended: no request is in flight
	before := len(up.Seen())
	r := cordonGemini(t, st, "run", "--agent", "gemini", "--agent-path", dir, "--agent-home", home, "--workspace", ws,
		"--config", cfg, "--timeout", "120s", "--", "--resume", "latest", "-p", "again")
	if r.Code != 0 {
		t.Fatalf("second run: %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
	most := up.MostMessages(before, "enerateContent")
	if most < 4 {
		t.Fatalf("the resumed session's request carried %d contents, want the first run's turns too (>= 4)", most)
	}
}
