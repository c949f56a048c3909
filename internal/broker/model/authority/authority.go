package authority

import (
	"fmt"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/policy"
	"github.com/cordon-project/cordon/internal/store"
)

// Half is the model broker's trusted half. The budget, the reservation,
// the receipt and the approval store are the sandbox's authority's
// (internal/gateway), shared with the egress broker; what is the model
// broker's own is here: the one policy question it may ask, and what an
// approval of a model call is bound to and shows.
type Half struct{}

// Action and Resource are the only policy question a model crossing asks.
const (
	Action   = policy.ActionModelInvoke
	Resource = "Model"
)

// Check refuses any policy question but a model.invoke on a Model.
func (Half) Check(ask crossing.Ask) error {
	if ask.Action != Action || ask.Resource != Resource {
		return fmt.Errorf("%w: broker model cannot ask about %s on %s", crossing.ErrPolicyDenied, ask.Action, ask.Resource)
	}
	return nil
}

// maxOperation bounds the operation name shown to an approver.
const maxOperation = 40

// Approval is what an approval of the model call ask is bound to (digest:
// the sandbox, the model, the API operation and the request body's
// digest) and what the approver is shown. A call that does not name its
// request digest and operation cannot wait for an approval.
func (Half) Approval(id crossing.Identity, ask crossing.Ask, _ *crossing.PolicyDecision) (string, any, error) {
	if !store.ValidDigest(ask.RequestDigest) || ask.Operation == "" || len(ask.Operation) > maxOperation {
		return "", nil, fmt.Errorf("%w: a model call that needs approval must name its request digest and operation", crossing.ErrPolicyDenied)
	}
	digest := crossing.ApprovalDigest(id, ask.Action, ask.Target, struct {
		Operation string `json:"operation"`
		Digest    string `json:"request_digest"`
	}{ask.Operation, ask.RequestDigest})
	shown := struct {
		Model     string `json:"model"`
		Operation string `json:"operation"`
		Digest    string `json:"request_digest"`
		Bytes     int64  `json:"request_bytes"`
	}{ask.Target, ask.Operation, ask.RequestDigest, ask.RequestBytes}
	return digest, shown, nil
}
