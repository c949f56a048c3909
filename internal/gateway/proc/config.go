package proc

import (
	"time"

	"github.com/cordon-project/cordon/internal/broker/egress"
	"github.com/cordon-project/cordon/internal/broker/model"
	"github.com/cordon-project/cordon/internal/broker/tool"
	"github.com/cordon-project/cordon/internal/crossing"
)

// Argv0 makes the cordon binary act as the gateway process.
const Argv0 = "cordon-gateway"

// Fixed descriptors in the gateway process. After the channels come the
// listeners (Config.Listeners), then two pipes per stdio tool server.
const (
	ConfigFD       = 3 // pipe: one JSON Config, then EOF
	FirstChannelFD = 4 // SOCK_SEQPACKET authority channels, in Config.Channels order
)

// ReadyTimeout bounds the gateway's start, including listing every tool
// server's tools.
const ReadyTimeout = 30 * time.Second

// Config is everything the gateway process needs, sent on a pipe
// (never argv or the environment: it carries the custodied secrets).
type Config struct {
	Identity crossing.Identity `json:"identity"`
	// Each broker's configuration, in its own type, as internal/config
	// built it.
	Model   model.Config      `json:"model"`
	Egress  egress.Config     `json:"egress"`
	Tool    tool.Config       `json:"tool"`
	Secrets map[string][]byte `json:"secrets"`
	// Channels are the brokers whose authority channels the process
	// gets, from FirstChannelFD in this order.
	Channels []string `json:"channels"`
	// Listeners are the listeners it gets after the channels, in this
	// order: "model", "egress", "tools", "state".
	Listeners []string `json:"listeners"`
	Version   string   `json:"version,omitempty"`
}
