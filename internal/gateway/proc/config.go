package proc

import (
	"encoding/json"
	"time"

	"github.com/cordon-project/cordon/internal/broker/egress"
	"github.com/cordon-project/cordon/internal/broker/ingress"
	"github.com/cordon-project/cordon/internal/broker/model"
	"github.com/cordon-project/cordon/internal/broker/tool"
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
	ListenFD       = 6 // the listener, Config.Listeners[0] (the ingress broker: one per route, from here on)
)

// ReadyTimeout bounds the gateway's start, including listing every tool
// server's tools.
const ReadyTimeout = 30 * time.Second

// Config is everything a broker process needs, sent on a pipe (never
// argv or the environment: it carries the custodied secrets). The
// privileged side fills in only what the process's broker uses: the model
// process gets the routes and their credentials, the tool process the
// tool servers and theirs, the egress process the allow rules and no
// secret, the state process neither.
type Config struct {
	// Broker is the one broker this process runs (model, egress, tool,
	// state); it matches Channels[0] and the process's argv[1].
	Broker   string            `json:"broker"`
	Identity crossing.Identity `json:"identity"`
	// Each broker's configuration, in its own type, as internal/config
	// built it.
	Model   model.Config      `json:"model"`
	Egress  egress.Config     `json:"egress"`
	Tool    tool.Config       `json:"tool"`
	Ingress ingress.Config    `json:"ingress"`
	Secrets map[string][]byte `json:"secrets"`
	// Channels are the brokers whose authority channels the process
	// gets, from FirstChannelFD in this order.
	Channels []string `json:"channels"`
	// Listeners are the listeners it gets after the channels, in this
	// order: "model", "egress", "tools", "state"; the ingress broker's
	// are its routes' names, in Ingress.Routes order.
	Listeners []string `json:"listeners"`
	Version   string   `json:"version,omitempty"`
	// Test carries the compromised-gateway hook's instructions in test
	// builds (compromise_on.go); production builds never set or read it.
	Test json.RawMessage `json:"test,omitempty"`
}
