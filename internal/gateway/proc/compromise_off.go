//go:build !cordon_testhooks

package proc

import (
	"encoding/json"
	"log/slog"

	"github.com/cordon-project/cordon/internal/gateway/dial"
)

// compromise is the "compromised gateway" test hook; production builds
// have none and ignore the field.
func compromise(string, json.RawMessage, *dial.Client, *slog.Logger) {}

// skipNetFilter: production builds never leave the filter out.
func skipNetFilter(string, json.RawMessage) bool { return false }
