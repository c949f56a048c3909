package tool

import "time"

// Config is the tool broker's configuration as the gateway process gets
// it: internal/config builds it from the file (config.Config.ToolConfig).
type Config struct {
	Servers []ServerConfig `json:"servers,omitempty"`
	Limits  Limits         `json:"limits"`
	// ApprovalWait is how long a call waits for an approval before it is
	// answered as pending (Options.ApprovalWait).
	ApprovalWait time.Duration `json:"approval_wait,omitempty"`
}

// ServerConfig is one upstream MCP server as the gateway process gets it.
type ServerConfig struct {
	Name    string        `json:"name"`
	Allow   []string      `json:"allow,omitempty"`
	Timeout time.Duration `json:"timeout,omitempty"`
	// Stdio: the server runs in its own sandbox; the gateway speaks to it
	// over two pipes handed to the gateway process.
	Stdio bool `json:"stdio,omitempty"`
	// URL of a remote streamable-HTTP server; Credential names the secret
	// sent to it as a bearer token.
	URL        string `json:"url,omitempty"`
	Credential string `json:"credential,omitempty"`
	// SecretEnv names the secrets a stdio server holds (its secret_env):
	// the tool broker process gets their values to redact them from the
	// server's results.
	SecretEnv []string `json:"secret_env,omitempty"`
}
