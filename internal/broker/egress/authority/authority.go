package authority

import (
	"fmt"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/policy"
)

// Half is the egress broker's trusted half. The budget, the reservation,
// the receipt and the approval store are the sandbox's authority's
// (internal/gateway), shared with the model broker; what is the egress
// broker's own is here: the one policy question it may ask, and what an
// approval of a connection is bound to and shows.
type Half struct{}

// Action and Resource are the only policy question an egress crossing
// asks.
const (
	Action   = policy.ActionEgressConnect
	Resource = "Host"
)

// Check refuses any policy question but an egress.connect to a Host.
func (Half) Check(ask crossing.Ask) error {
	if ask.Action != Action || ask.Resource != Resource {
		return fmt.Errorf("%w: broker egress cannot ask about %s on %s", crossing.ErrPolicyDenied, ask.Action, ask.Resource)
	}
	return nil
}

// Approval is what an approval of the connection ask is bound to (the
// sandbox, the host and the port) and what the approver is shown,
// including how much it covers: one connection, or with
// @approval_scope("sandbox") every connection to the host and port until
// the sandbox stops.
func (Half) Approval(id crossing.Identity, ask crossing.Ask, d *crossing.PolicyDecision) (string, any, error) {
	digest := crossing.ApprovalDigest(id, ask.Action, ask.Target, struct {
		Port int `json:"port"`
	}{ask.Port})
	scope := "one connection"
	if d != nil && d.ApprovalScope == policy.ApprovalScopeSandbox {
		scope = "every connection to this host and port from this sandbox until it stops or the approval is revoked"
	}
	shown := struct {
		Host  string `json:"host"`
		Port  int    `json:"port"`
		Scope string `json:"covers"`
	}{ask.Target, ask.Port, scope}
	return digest, shown, nil
}
