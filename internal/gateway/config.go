package gateway

import "github.com/cordon-project/cordon/internal/gateway/proc"

// ChildConfig is the gateway process's configuration: each broker's own
// configuration type (internal/broker/<name>.Config), as internal/config
// built it, the identity, the custodied secrets and the descriptors'
// layout.
type ChildConfig = proc.Config
