package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/testkit"
)

// codexDir is where scripts/test.sh installs the pinned Codex CLI (npm
// @openai/codex@0.169.0); CORDON_TEST_CODEX_DIR overrides.
func codexDir(t *testing.T) string {
	d := os.Getenv("CORDON_TEST_CODEX_DIR")
	if d == "" {
		d = "/opt/cordon-test/codex"
	}
	testkit.RequireFile(t, filepath.Join(d, "node_modules/@openai/codex/bin/codex.js"), "Codex CLI is not installed (scripts/test.sh installs it)")
	return d
}

// codexUpstream is a fake OpenAI that makes Codex run one shell command
// (its exec_command tool) writing a file in the workspace.
func codexUpstream(t *testing.T, answer, file string) *testkit.ModelUpstream {
	up := testkit.NewModelUpstream(t, fakeKey, answer)
	up.ToolName = "exec_command"
	up.ToolInput = `{"cmd":"echo written-by-codex > /workspace/` + file + `"}`
	return up
}

// One-shot: `cordon run --agent codex -- exec …` points Codex at the
// broker with -c overrides (it ignores OPENAI_BASE_URL), its own sandbox
// off; its shell tool writes a file in the workspace (checked on the
// host) and the key stays outside. A second run sees the first run's
// sessions in --agent-home.
func TestAgentCodexOneShot(t *testing.T) {
	testkit.RequireRoot(t)
	dir := codexDir(t)
	st := newStateDir(t)
	up := codexUpstream(t, "unused", "one-shot.txt")
	cfg := gatewayConfig(t, up.URL(), "")
	home, ws := agentHome(t), workspace(t)
	r := cordon(t, cordonBin, st, "run", "--agent", "codex", "--agent-path", dir, "--agent-home", home, "--workspace", ws,
		"--config", cfg, "--timeout", "120s", "--", "exec", "--skip-git-repo-check", "-m", "gpt-5", "write the file")
	if r.Code != 0 || !strings.Contains(r.Stdout, "the tool said") {
		t.Fatalf("cordon run --agent codex -- exec = %d\nstdout: %s\nstderr: %s\nupstream saw: %+v", r.Code, r.Stdout, r.Stderr, up.Seen())
	}
	b, err := os.ReadFile(filepath.Join(ws, "one-shot.txt"))
	if err != nil || strings.TrimSpace(string(b)) != "written-by-codex" {
		t.Fatalf("the file Codex's shell tool wrote, read on the host: %q %v", b, err)
	}
	checkUpstreamKey(t, up, "/v1/responses")
	checkNoKey(t, home)
	sessions, _ := filepath.Glob(filepath.Join(home, "sessions", "*", "*", "*", "*.jsonl"))
	if len(sessions) == 0 {
		t.Fatalf("no Codex session under %s/sessions after the first run", home)
	}
	// State survives: `exec resume --last` continues the first session.
	up.ToolName = "" // the first run has ended: no request is in flight
	before := len(up.Seen())
	r = cordon(t, cordonBin, st, "run", "--agent", "codex", "--agent-path", dir, "--agent-home", home, "--workspace", ws,
		"--config", cfg, "--timeout", "120s", "--", "exec", "--skip-git-repo-check", "-m", "gpt-5", "resume", "--last", "again")
	if r.Code != 0 {
		t.Fatalf("second run: %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
	most := up.MostMessages(before, "/v1/responses")
	if most < 4 {
		t.Fatalf("the resumed session's request carried %d input items, want the first run's too (>= 4)", most)
	}
}

// Interactive: Codex's UI comes up in a real terminal with no login or
// trust screen; a typed prompt goes to the model broker, which admits
// Codex's TUI tools (a Responses "namespace" of client functions,
// mcp__codex_tui, beside exec_command); the fake model calls
// exec_command, Codex runs it (its approval prompt, if it asks, is
// answered with Enter as a person would), the command writes a file in
// the workspace, read on the host, and the answer carrying the
// command's output shows on screen. The key is in neither Codex's
// environment nor any file of its home.
func TestAgentCodexInteractive(t *testing.T) {
	testkit.RequireRoot(t)
	dir := codexDir(t)
	st := newStateDir(t)
	up := codexUpstream(t, "unused", "interactive.txt")
	up.ToolInput = `{"cmd":"echo written-by-codex > /workspace/interactive.txt && echo wrote-it"}`
	cfg := gatewayConfig(t, up.URL(), "")
	home, ws := agentHome(t), workspace(t)
	x := testkit.NewTmux(t, 120, 40, nil, cordonBin, "--state-dir", st, "run", "--agent", "codex", "--agent-path", dir,
		"--agent-home", home, "--workspace", ws, "--config", cfg, "--timeout", "120s", "--", "-m", "gpt-5")
	screen := x.WaitFor(`Ask Codex to do anything|for shortcuts`, 60*time.Second)
	for _, bad := range []string{"Sign in", "Do you trust", "allow Codex to work", "Welcome to Codex"} {
		if strings.Contains(screen, bad) {
			t.Fatalf("first screen shows %q:\n%s", bad, screen)
		}
	}
	pid := descendantRunning(x.PID(), filepath.Join(dir, "node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex"))
	if pid == 0 {
		t.Fatal("no Codex process below the terminal")
	}
	checkAgentEnv(t, pid, "OPENAI_API_KEY")
	// Typed text and an Enter delivered together are a paste to the TUI
	// (the Enter a newline): press Enter once the text is on screen.
	x.Keys(true, "write the file please")
	x.WaitFor(`write the file please`, 30*time.Second)
	time.Sleep(200 * time.Millisecond)
	x.Keys(false, "Enter")
	screen = x.WaitFor(`the tool said|(?i)would you like to run|not allowed through cordon`, 60*time.Second)
	for i := 0; i < 10 && !strings.Contains(screen, "the tool said") && !strings.Contains(screen, "not allowed"); i++ {
		time.Sleep(time.Second) // the dialog takes keys once drawn
		if strings.Contains(strings.ToLower(x.Screen()), "would you like to run") {
			t.Log("Codex asked before running the command; answered Enter")
			x.Keys(false, "Enter")
		}
		screen = x.Screen()
	}
	if strings.Contains(screen, "not allowed through cordon") {
		t.Fatalf("the model broker refused Codex's interactive request:\n%s", screen)
	}
	screen = x.WaitFor(`the tool said`, 60*time.Second)
	b, err := os.ReadFile(filepath.Join(ws, "interactive.txt"))
	if err != nil || strings.TrimSpace(string(b)) != "written-by-codex" {
		t.Fatalf("the file Codex wrote, read on the host: %q %v\nscreen:\n%s", b, err, screen)
	}
	if !strings.Contains(screen, "wrote-it") {
		t.Errorf("the answer on screen does not carry the command's output:\n%s", screen)
	}
	if res := up.ToolResults(); len(res) == 0 || !strings.Contains(strings.Join(res, ""), "wrote-it") {
		t.Errorf("tool results the model got: %q", res)
	}
	namespace := false
	for _, s := range up.Seen() {
		namespace = namespace || slices.Contains(s.Tools, "mcp__codex_tui")
	}
	if !namespace {
		t.Errorf("no request offered Codex's TUI namespace (mcp__codex_tui): the test no longer covers it: %+v", up.Seen())
	}
	checkUpstreamKey(t, up, "/v1/responses")
	checkNoKey(t, home)
	checkNoKey(t, ws)
	x.Type("/quit")
	time.Sleep(300 * time.Millisecond)
	x.Keys(false, "Enter")
	x.WaitExit(30 * time.Second)
}
