package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/testkit"
)

// claudeDir is where scripts/test.sh installs the pinned Claude Code
// (npm @anthropic-ai/claude-code@2.1.328); CORDON_TEST_CLAUDE_DIR overrides.
func claudeDir(t *testing.T) string {
	d := os.Getenv("CORDON_TEST_CLAUDE_DIR")
	if d == "" {
		d = "/opt/cordon-test/claude"
	}
	bin := filepath.Join(d, "node_modules/@anthropic-ai/claude-code/bin/claude.exe")
	testkit.RequireFile(t, bin, "Claude Code is not installed (scripts/test.sh installs it)")
	return d
}

// A real agent: Claude Code runs `claude -p` inside the sandbox; its
// requests reach the fake Anthropic upstream only through the broker, with
// the real key injected, and the key is nowhere in the agent's view.
func TestAgentClaudeCode(t *testing.T) {
	testkit.RequireRoot(t)
	dir := claudeDir(t)
	st := newStateDir(t)
	const answer = "cordon-contained-answer-42"
	up := testkit.NewModelUpstream(t, fakeKey, answer)
	cfg := gatewayConfig(t, up.URL(), "")
	r := cordon(t, cordonBin, st, "run", "--config", cfg, "--ro", dir+":/opt/claude",
		"--env", "DISABLE_AUTOUPDATER=1", "--env", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"--env", "DISABLE_TELEMETRY=1", "--env", "DISABLE_ERROR_REPORTING=1",
		"--timeout", "90s", "--",
		"/opt/claude/node_modules/@anthropic-ai/claude-code/bin/claude.exe", "-p", "say the magic words", "--model", "claude-sonnet-4-5")
	if r.Code != 0 || !strings.Contains(r.Stdout, answer) {
		t.Fatalf("claude -p in the sandbox = %d\nstdout: %s\nstderr: %s\nupstream saw: %+v", r.Code, r.Stdout, r.Stderr, up.Seen())
	}
	var messages int
	for _, s := range up.Seen() {
		if s.Path == "/v1/messages" {
			messages++
		}
		if s.APIKey != fakeKey {
			t.Errorf("upstream request %s carried x-api-key %q, want the custodied key", s.Path, s.APIKey)
		}
	}
	if messages == 0 {
		t.Fatalf("the upstream saw no /v1/messages request: %+v", up.Seen())
	}
}
