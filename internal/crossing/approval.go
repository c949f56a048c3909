package crossing

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// DefaultTenant is the principal's tenant when the config names none.
const DefaultTenant = "default"

// ApprovalDigest binds an approval to one exact crossing: the tenant,
// the workload and the sandbox that asked, the action, the resource and
// the request (each action's exact request: a model request's operation
// and body digest, an egress connection's port, a state operation's key, value
// digest and preconditions).
func ApprovalDigest(id Identity, action, target string, request any) string {
	tenant := id.Tenant
	if tenant == "" {
		tenant = DefaultTenant
	}
	b, _ := json.Marshal(struct {
		Action   string `json:"action"`
		Request  any    `json:"request"`
		Sandbox  string `json:"sandbox"`
		Target   string `json:"target"`
		Tenant   string `json:"tenant"`
		Workload string `json:"workload"`
	}{action, request, id.SandboxID, target, tenant, id.Workload})
	return digest(b)
}

// digest is "sha256:<hex>" of b.
func digest(b []byte) string {
	h := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(h[:])
}
