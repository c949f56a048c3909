package agent

import (
	_ "embed"
	"encoding/json"

	"github.com/cordon-project/cordon/internal/gateway"
)

//go:embed configs/claude-code.yaml
var claudeConfig []byte

// Claude Code (npm @anthropic-ai/claude-code; a native executable).
//
// Its state is HOME/.claude.json and HOME/.claude/; HOME is the agent
// home. The one seed file, .claude.json, is what its first interactive
// run would otherwise ask for: onboarding done, /workspace trusted, the
// placeholder key approved (so no "use this API key?" prompt; the key
// is worth nothing, the broker holds the real one), auto-update off.
// Completing onboarding also skips its first-run connectivity check to
// api.anthropic.com, which the sandbox (no egress) would fail. Telemetry,
// error reporting, update checks and the plugin marketplace's automatic
// install (a fetch from github.com) are off through its environment.
// Its own sandbox (the "sandbox" setting) is off by default and stays
// off: cordon is the boundary.
func init() {
	register(&Preset{
		Name:       "claude",
		Command:    "claude",
		Package:    "@anthropic-ai/claude-code",
		Config:     claudeConfig,
		ConfigName: "examples/claude-code.yaml",
		Env: []string{
			"DISABLE_AUTOUPDATER=1",
			"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
			"DISABLE_TELEMETRY=1",
			"DISABLE_ERROR_REPORTING=1",
			"CLAUDE_CODE_DISABLE_OFFICIAL_MARKETPLACE_AUTOINSTALL=1",
		},
		Args:  func() []string { return nil },
		Seeds: []SeedFile{{Path: ".claude.json", Data: claudeState}},
	})
}

// claudeState is the seed of HOME/.claude.json.
func claudeState() ([]byte, error) {
	key := gateway.PlaceholderAnthropicKey
	return json.MarshalIndent(map[string]any{
		"hasCompletedOnboarding": true,
		"autoUpdates":            false,
		"customApiKeyResponses":  map[string]any{"approved": []string{key[len(key)-20:]}, "rejected": []string{}},
		"projects": map[string]any{Workspace: map[string]any{
			"hasTrustDialogAccepted":        true,
			"hasCompletedProjectOnboarding": true,
		}},
	}, "", "  ")
}
