package gateway

import (
	"fmt"
	"strings"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/policy"
)

// brokerAsks is the only policy question each budgeted broker may ask
// when it opens a crossing: a gateway cannot ask an easier one.
var brokerAsks = map[string]struct{ action, resource string }{
	"model":  {policy.ActionModelInvoke, "Model"},
	"egress": {policy.ActionEgressConnect, "Host"},
}

// DefaultTenant is the principal's tenant when the config names none.
const DefaultTenant = "default"

func (s *LedgerServer) policy() *policy.Set {
	if s.Policy == nil {
		return policy.Default()
	}
	return s.Policy
}

// request is the policy request for ask, with this sandbox's identity as
// the principal and the budget state after its latest crossing.
func (s *LedgerServer) request(ask crossing.Ask) policy.Request {
	s.mu.Lock()
	budget := s.last
	s.mu.Unlock()
	tenant := s.ID.Tenant
	if tenant == "" {
		tenant = DefaultTenant
	}
	return policy.Request{
		Workload: s.ID.Workload, Tenant: tenant, Purpose: s.ID.Purpose,
		Action:   ask.Action,
		Resource: policy.Resource{Type: ask.Resource, ID: ask.Target, Server: ask.Server},
		Context:  policy.Context{ArgumentDigest: ask.ArgumentDigest, Port: ask.Port, Budget: budget},
	}
}

// decide asks policy; a deny (or an evaluation error) is
// crossing.ErrPolicyDenied with the decision.
func (s *LedgerServer) decide(ask crossing.Ask) (*crossing.PolicyDecision, error) {
	allow, d := s.policy().Decide(s.request(ask))
	if !allow {
		return &d, fmt.Errorf("%w: %s", crossing.ErrPolicyDenied, explainDeny(d))
	}
	return &d, nil
}

// askPolicy decides a reserve's crossing. Reservations that open a
// crossing (every model request, every egress connection) must ask; the
// byte chunks of an open egress tunnel need not.
func (s *LedgerServer) askPolicy(req ledgerReq) (*crossing.PolicyDecision, error) {
	opens := req.Broker == "model" || req.Want.Connections > 0
	if req.Ask == nil {
		if opens {
			return nil, fmt.Errorf("%w: the crossing asked no policy question", crossing.ErrPolicyDenied)
		}
		return nil, nil
	}
	want := brokerAsks[req.Broker]
	if req.Ask.Action != want.action || req.Ask.Resource != want.resource {
		return nil, fmt.Errorf("%w: broker %s cannot ask about %s on %s", crossing.ErrPolicyDenied, req.Broker, req.Ask.Action, req.Ask.Resource)
	}
	return s.decide(*req.Ask)
}

// explainDeny says why policy denied, without policy text.
func explainDeny(d crossing.PolicyDecision) string {
	switch {
	case len(d.Errors) > 0:
		return "policy evaluation error: " + strings.Join(d.Errors, "; ")
	case len(d.Determining) > 0:
		return "forbidden by " + strings.Join(d.Determining, ", ")
	default:
		return "no policy permits it"
	}
}

// remember keeps an open reservation's decision and the budget state.
func (s *LedgerServer) remember(id int64, d *crossing.PolicyDecision, st crossing.BudgetState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = st
	if d == nil {
		delete(s.decided, id) // never a decision of an earlier reservation with this id
		return
	}
	if s.decided == nil {
		s.decided = map[int64]*crossing.PolicyDecision{}
	}
	s.decided[id] = d
}

// forget returns and drops the decision of a reservation being settled.
func (s *LedgerServer) forget(id int64) *crossing.PolicyDecision {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.decided[id]
	delete(s.decided, id)
	return d
}
