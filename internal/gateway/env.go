package gateway

import "fmt"

// Ports of the gateway inside every sandbox, on 127.0.0.1. Below 1024 so
// the agent (no CAP_NET_BIND_SERVICE) cannot squat them.
const (
	ModelPort  = 80 // Model Access Broker: Anthropic, OpenAI and Gemini routes
	EgressPort = 81 // HTTP/HTTPS proxy (CONNECT and absolute-form)
	ToolsPort  = 82 // MCP (streamable HTTP) at /mcp: the tool broker
	StatePort  = 83 // managed state (HTTP) at /v1/state: the state broker
)

// Placeholder keys: clients refuse to start without a key, so the agent
// gets well-formed values that are worth nothing. The broker strips them
// and injects the real credential toward the declared upstream only.
const (
	PlaceholderAnthropicKey = "sk-ant-api03-cordon-placeholder-not-a-key-0000000000000000000000000000000000000000000000-AA"
	PlaceholderOpenAIKey    = "sk-cordon-placeholder-not-a-key"
	// PlaceholderGeminiKey has the shape of a Google API key (AIza…, 39
	// characters) so clients that check the shape accept it.
	PlaceholderGeminiKey = "AIzaCordonPlaceholderNotAKey00000000000"
)

// Env returns the variables that point the program at the gateway.
func Env() []string {
	model := fmt.Sprintf("http://127.0.0.1:%d", ModelPort)
	proxy := fmt.Sprintf("http://127.0.0.1:%d", EgressPort)
	noProxy := "127.0.0.1,localhost,::1"
	return []string{
		"ANTHROPIC_BASE_URL=" + model,
		"ANTHROPIC_API_KEY=" + PlaceholderAnthropicKey,
		"OPENAI_BASE_URL=" + model + "/v1",
		"OPENAI_API_KEY=" + PlaceholderOpenAIKey,
		// Gemini CLI and the @google/genai SDK append /v1beta themselves.
		"GOOGLE_GEMINI_BASE_URL=" + model,
		"GEMINI_API_KEY=" + PlaceholderGeminiKey,
		"HTTP_PROXY=" + proxy, "HTTPS_PROXY=" + proxy,
		"http_proxy=" + proxy, "https_proxy=" + proxy,
		"NO_PROXY=" + noProxy, "no_proxy=" + noProxy,
		"CORDON_MCP_URL=" + MCPURL(),
		"CORDON_STATE_URL=" + StateURL(),
	}
}

// MCPURL is the tool broker's MCP endpoint inside every sandbox.
func MCPURL() string { return fmt.Sprintf("http://127.0.0.1:%d/mcp", ToolsPort) }

// StateURL is the state broker's API root inside every sandbox.
func StateURL() string { return fmt.Sprintf("http://127.0.0.1:%d/v1/state", StatePort) }
