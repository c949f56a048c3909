//go:build cordon_testhooks

package gateway

import (
	"encoding/json"
	"os"
	"strings"
)

// compromiseEnv names the "compromised gateway" test hook's instructions
// in the environment of a test build's cordon (never read by production
// builds): a JSON proc.Compromise for one broker process.
const compromiseEnv = "CORDON_TEST_COMPROMISE"

// compromiseFor returns the hook's instructions for broker, with the
// other broker processes' pids filled in, or nil.
func compromiseFor(broker string, pids map[string]int) json.RawMessage {
	raw := os.Getenv(compromiseEnv)
	if raw == "" || !strings.Contains(raw, `"`+broker+`"`) {
		return nil
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(raw), &m); err != nil || m["broker"] != broker {
		return nil
	}
	peers := map[string]int{}
	for b, pid := range pids {
		if b != broker {
			peers[b] = pid
		}
	}
	m["peers"] = peers
	b, _ := json.Marshal(m)
	return b
}
