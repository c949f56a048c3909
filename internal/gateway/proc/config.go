package proc

import (
	"encoding/json"
	"time"

	"github.com/cordon-project/cordon/internal/crossing"
)

// Argv0 makes the cordon binary act as a broker process; its first
// argument names the broker (Config.Broker).
const Argv0 = "cordon-gateway"

// Fixed descriptors in a broker process. After the authority channel
// comes the checked dialer's channel, then the listener, then (tool
// broker only) two pipes per stdio tool server.
const (
	ConfigFD       = 3 // pipe: one JSON Config, then EOF
	FirstChannelFD = 4 // SOCK_SEQPACKET authority channels, in Config.Channels order (one: its broker's)
	DialFD         = 5 // SOCK_SEQPACKET channel to the privileged side's checked dialer (internal/gateway/dial)
	ListenFD       = 6 // the listener, Config.Listeners[0]
)

// ReadyTimeout bounds the gateway's start, including listing every tool
// server's tools.
const ReadyTimeout = 30 * time.Second

// Route is a model route as the gateway process receives it.
type Route struct {
	Name       string   `json:"name"`
	API        string   `json:"api"`
	Upstream   string   `json:"upstream"`
	Credential string   `json:"credential"`
	Models     []string `json:"models"`
}

// ModelLimits bound model requests and responses.
type ModelLimits struct {
	MaxRequestBytes      int64    `json:"max_request_bytes"`
	MaxResponseBytes     int64    `json:"max_response_bytes"`
	MaxAttachments       int      `json:"max_attachments"`
	MaxAttachmentBytes   int64    `json:"max_attachment_bytes"`
	AllowedMIME          []string `json:"allowed_mime"`
	MaxConcurrentStreams int64    `json:"max_concurrent_streams"`
}

// EgressRule is one allowed host with its ports.
type EgressRule struct {
	Host  string `json:"host"`
	Ports []int  `json:"ports"`
}

// Egress is the egress broker's configuration.
type Egress struct {
	Allow             []EgressRule        `json:"allow"`
	UnsafeAllowRanges []string            `json:"unsafe_allow_ranges"`
	Resolve           map[string][]string `json:"resolve"`
}

// ToolServer is one upstream MCP server as the gateway process gets it.
type ToolServer struct {
	Name    string        `json:"name"`
	Allow   []string      `json:"allow,omitempty"`
	Timeout time.Duration `json:"timeout,omitempty"`
	// Stdio: the server runs in its own sandbox; the gateway speaks to it
	// over two pipes (StartOptions.ToolPipes).
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

// ToolLimits bound MCP traffic.
type ToolLimits struct {
	MaxFrameBytes    int           `json:"max_frame_bytes,omitempty"`
	MaxArgumentBytes int           `json:"max_argument_bytes,omitempty"`
	MaxResultBytes   int           `json:"max_result_bytes,omitempty"`
	ApprovalWait     time.Duration `json:"approval_wait,omitempty"`
}

// Config is everything a broker process needs, sent on a pipe (never
// argv or the environment: it carries the custodied secrets). The
// privileged side fills in only what the process's broker uses: the model
// process gets the routes and their credentials, the tool process the
// tool servers and theirs, the egress process the allow rules and no
// secret, the state process neither.
type Config struct {
	// Broker is the one broker this process runs (model, egress, tool,
	// state); it matches Channels[0] and the process's argv[1].
	Broker     string            `json:"broker"`
	Identity   crossing.Identity `json:"identity"`
	Routes     []Route           `json:"routes"`
	Limits     ModelLimits       `json:"limits"`
	Egress     Egress            `json:"egress"`
	Tools      []ToolServer      `json:"tools,omitempty"`
	ToolLimits ToolLimits        `json:"tool_limits"`
	Secrets    map[string][]byte `json:"secrets"`
	// Channels are the brokers whose authority channels the process
	// gets, from FirstChannelFD in this order.
	Channels []string `json:"channels"`
	// Listeners are the listeners it gets after the channels, in this
	// order: "model", "egress", "tools", "state".
	Listeners []string `json:"listeners"`
	Version   string   `json:"version,omitempty"`
	// Test carries the compromised-gateway hook's instructions in test
	// builds (compromise_on.go); production builds never set or read it.
	Test json.RawMessage `json:"test,omitempty"`
}
