package authority

import (
	"fmt"

	"github.com/cordon-project/cordon/internal/broker/ingress"
	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/policy"
)

// Half is the ingress broker's trusted half.
type Half struct{}

// Action and Resource are the only policy question an ingress crossing
// asks.
const (
	Action   = policy.ActionIngressConnect
	Resource = ingress.Resource
)

// Check refuses any policy question but an ingress.connect on a Route.
func (Half) Check(ask crossing.Ask) error {
	if ask.Action != Action || ask.Resource != Resource {
		return fmt.Errorf("%w: broker ingress cannot ask about %s on %s", crossing.ErrPolicyDenied, ask.Action, ask.Resource)
	}
	return nil
}

// Approval binds an approval of a connection to the sandbox, the route
// and the port, and shows them: one approval admits one connection.
func (Half) Approval(id crossing.Identity, ask crossing.Ask, _ *crossing.PolicyDecision) (string, any, error) {
	digest := crossing.ApprovalDigest(id, ask.Action, ask.Target, struct {
		Port int `json:"port"`
	}{ask.Port})
	shown := struct {
		Route  string `json:"route"`
		Port   int    `json:"port"`
		Covers string `json:"covers"`
	}{ask.Target, ask.Port, "one inbound connection"}
	return digest, shown, nil
}
