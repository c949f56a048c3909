package agent

import (
	_ "embed"
	"encoding/json"
)

//go:embed configs/gemini.yaml
var geminiConfig []byte

// GeminiDefaultModel is the model the Gemini preset asks for unless the
// user names one (-m, or --env GEMINI_MODEL=…): without one the CLI
// routes automatically, first asking a small model for a JSON complexity
// score.
const GeminiDefaultModel = "gemini-2.5-pro"

// Gemini CLI (npm @google/gemini-cli: bundle/gemini.js, run by node).
//
// Its state is GEMINI_CLI_HOME/.gemini, in the agent home. Three
// settings have no flag or variable, so the preset seeds
// .gemini/settings.json when absent (Seed: exclusively, never through a
// symlink): API-key auth (else it exits 41, "Invalid auth method"), no
// usage statistics (play.googleapis.com), no update checks
// (registry.npmjs.org). A system settings file cordon owns
// (GEMINI_CLI_SYSTEM_SETTINGS_PATH) would need no write into the home,
// but the CLI skips one not owned by uid 0 as it sees it, and host root
// is not mapped into the sandbox's user namespace. The gateway already
// sets GOOGLE_GEMINI_BASE_URL and the placeholder GEMINI_API_KEY. The
// model is GEMINI_MODEL (-m wins over it). The workspace is trusted
// (GEMINI_CLI_TRUST_WORKSPACE, the variable form of --skip-trust), the
// CLI does not relaunch itself, and its own sandbox (docker, podman,
// runsc, lxc or sandbox-exec, which cordon's sandbox could not start) is
// off: GEMINI_SANDBOX=false, which wins over the tools.sandbox setting;
// cordon is the boundary.
func init() {
	register(&Preset{
		Name:       "gemini",
		Command:    "gemini",
		Package:    "@google/gemini-cli",
		Runtime:    "node",
		Config:     geminiConfig,
		ConfigName: "examples/gemini-cli.yaml",
		Env: []string{
			"GEMINI_CLI_HOME=" + HomeTarget,
			"GEMINI_CLI_TRUST_WORKSPACE=true",
			"GEMINI_SANDBOX=false",
			"GEMINI_CLI_NO_RELAUNCH=true",
			"GEMINI_MODEL=" + GeminiDefaultModel,
			"COLORTERM=truecolor",
		},
		Args:  func() []string { return nil },
		Seeds: []SeedFile{{Path: ".gemini/settings.json", Data: geminiSettings}},
	})
}

// geminiSettings is the seed of GEMINI_CLI_HOME/.gemini/settings.json.
func geminiSettings() ([]byte, error) {
	return json.MarshalIndent(map[string]any{
		"security": map[string]any{"auth": map[string]any{"selectedType": "gemini-api-key"}},
		"privacy":  map[string]any{"usageStatisticsEnabled": false},
		"general":  map[string]any{"enableAutoUpdate": false, "enableAutoUpdateNotification": false},
	}, "", "  ")
}
