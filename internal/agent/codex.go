package agent

import (
	_ "embed"
	"fmt"

	"github.com/cordon-project/cordon/internal/gateway"
)

//go:embed configs/codex.yaml
var codexConfig []byte

// Codex CLI (npm @openai/codex: a node wrapper around a native binary in
// the sibling package @openai/codex-linux-x64, hence the node_modules
// bind).
//
// Its state is CODEX_HOME, which is the agent home itself (Codex refuses
// a CODEX_HOME that does not exist, and cordon creates nothing there). Everything cordon needs is set
// with `-c` overrides on its command line, so cordon writes nothing into
// the agent's home: a model provider "cordon" at the model broker (Codex
// ignores OPENAI_BASE_URL) reading the placeholder key from
// OPENAI_API_KEY, /workspace trusted, analytics and plugins off (they
// reach chatgpt.com and github.com), and its server-side tools off (the
// model broker refuses hosted tools). Its own sandbox is turned off
// (sandbox_mode danger-full-access): it needs namespaces and seccomp of
// its own, which cordon's sandbox refuses, and cordon is the boundary. A
// user's own -c after these wins.
func init() {
	register(&Preset{
		Name:       "codex",
		Command:    "codex",
		Package:    "@openai/codex",
		Runtime:    "node",
		Config:     codexConfig,
		ConfigName: "examples/codex.yaml",
		Env:        []string{"CODEX_HOME=" + HomeTarget},
		Args:       codexArgs,
	})
}

func codexArgs() []string {
	provider := fmt.Sprintf(`model_providers.cordon={name="cordon",base_url="http://127.0.0.1:%d/v1",env_key="OPENAI_API_KEY",wire_api="responses"}`, gateway.ModelPort)
	var out []string
	for _, kv := range []string{
		`model_provider="cordon"`,
		provider,
		`sandbox_mode="danger-full-access"`,
		`projects."` + Workspace + `".trust_level="trusted"`,
		`analytics.enabled=false`,
		`features.plugins=false`,
		// Server-side tools the model broker refuses (it allows only
		// client tools the agent runs itself): sub-agents come as a
		// "namespace" tool and web search as a hosted "web_search".
		`features.multi_agent=false`,
		`web_search="disabled"`,
		`check_for_update_on_startup=false`,
	} {
		out = append(out, "-c", kv)
	}
	return out
}
