package gateway

import (
	"github.com/cordon-project/cordon/internal/broker/egress"
	egressauthority "github.com/cordon-project/cordon/internal/broker/egress/authority"
	"github.com/cordon-project/cordon/internal/broker/ingress"
	ingressauthority "github.com/cordon-project/cordon/internal/broker/ingress/authority"
	"github.com/cordon-project/cordon/internal/broker/model"
	modelauthority "github.com/cordon-project/cordon/internal/broker/model/authority"

	"context"
	"fmt"
	"strings"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/policy"
	"github.com/cordon-project/cordon/internal/store"
)

// meteredHalf is the trusted half of a metered broker (model, egress):
// the one policy question it may ask, and what an approval of one of its
// crossings is bound to and shows.
type meteredHalf interface {
	Check(ask crossing.Ask) error
	Approval(id crossing.Identity, ask crossing.Ask, d *crossing.PolicyDecision) (digest string, shown any, err error)
}

// meteredHalves are the metered brokers' trusted halves, by broker.
var meteredHalves = map[string]meteredHalf{
	model.Name:   modelauthority.Half{},
	egress.Name:  egressauthority.Half{},
	ingress.Name: ingressauthority.Half{},
}

// DefaultTenant is the principal's tenant when the config names none.
const DefaultTenant = crossing.DefaultTenant

func (s *Authority) policy() *policy.Set {
	if s.Policy == nil {
		return policy.Default()
	}
	return s.Policy
}

// budgetReader reads the workload's budget now: the store, or the
// batch's transaction a reservation is decided in.
type budgetReader func(workload string, b store.Budget) (crossing.BudgetState, error)

// request is the policy request for ask, with this sandbox's identity as
// the principal and, when a policy reads context.budget, the workload's
// budget now (every sandbox of the workload, every action), read from
// the store: never a state this sandbox saw earlier.
func (s *Authority) request(ask crossing.Ask, read budgetReader) (policy.Request, error) {
	var budget crossing.BudgetState
	if s.policy().ReadsBudget() {
		if read == nil {
			read = func(w string, b store.Budget) (crossing.BudgetState, error) {
				return s.Store.BudgetState(context.Background(), w, b)
			}
		}
		var err error
		if budget, err = read(s.ID.Workload, s.Budget); err != nil {
			return policy.Request{}, fmt.Errorf("%w: read the budget for policy: %v", crossing.ErrUnavailable, err)
		}
	}
	tenant := s.ID.Tenant
	if tenant == "" {
		tenant = DefaultTenant
	}
	return policy.Request{
		Workload: s.ID.Workload, Tenant: tenant, Purpose: s.ID.Purpose,
		Action:   ask.Action,
		Resource: policy.Resource{Type: ask.Resource, ID: ask.Target, Server: ask.Server},
		Context:  policy.Context{ArgumentDigest: ask.ArgumentDigest, Port: ask.Port, Budget: budget},
	}, nil
}

// budgetOnce reads the budget from the store at most once: for many
// questions asked together.
func (s *Authority) budgetOnce() budgetReader {
	var (
		done bool
		st   crossing.BudgetState
		err  error
	)
	return func(w string, b store.Budget) (crossing.BudgetState, error) {
		if !done {
			st, err = s.Store.BudgetState(context.Background(), w, b)
			done = true
		}
		return st, err
	}
}

// decide asks policy; a deny (or an evaluation error) is
// crossing.ErrPolicyDenied with the decision. A budget that cannot be
// read is crossing.ErrUnavailable: refused, never decided without it.
func (s *Authority) decide(ask crossing.Ask) (*crossing.PolicyDecision, error) {
	return s.decideIn(ask, nil)
}

func (s *Authority) decideIn(ask crossing.Ask, read budgetReader) (*crossing.PolicyDecision, error) {
	r, err := s.request(ask, read)
	if err != nil {
		return &crossing.PolicyDecision{Digest: s.policy().Digest(), Errors: []string{err.Error()}}, err
	}
	allow, d := s.policy().Decide(r)
	if !allow {
		return &d, fmt.Errorf("%w: %s", crossing.ErrPolicyDenied, explainDeny(d))
	}
	return &d, nil
}

// maxAskField bounds each string of a reserve's policy question: a host
// name is at most 253 bytes, a model id, route name or digest shorter
// than this.
const maxAskField = 2048

// askPolicy decides a reserve's crossing. Reservations that open a
// crossing (every model request, every egress connection) must ask; the
// byte chunks of an open egress tunnel need not.
func (s *Authority) askPolicy(req call) (*crossing.PolicyDecision, error) {
	return s.askPolicyIn(req, nil)
}

func (s *Authority) askPolicyIn(req call, read budgetReader) (*crossing.PolicyDecision, error) {
	opens := opensCrossing(req)
	if req.Ask == nil {
		if opens {
			return nil, fmt.Errorf("%w: the crossing asked no policy question", crossing.ErrPolicyDenied)
		}
		return nil, nil
	}
	half, ok := meteredHalves[req.Broker]
	if !ok {
		return nil, fmt.Errorf("%w: broker %s asks no policy question here", crossing.ErrPolicyDenied, clipID(req.Broker))
	}
	if a := req.Ask; max(len(a.Action), len(a.Resource), len(a.Target), len(a.Server), len(a.ArgumentDigest), len(a.RequestDigest), len(a.Operation)) > maxAskField {
		// This side keeps the ask of every open reservation (and the
		// trace its span): a compromised broker's may fill a message.
		return nil, fmt.Errorf("%w: a policy question with a field over %d bytes", crossing.ErrPolicyDenied, maxAskField)
	}
	if err := half.Check(*req.Ask); err != nil {
		return nil, err
	}
	if req.Broker == ingress.Name {
		if err := s.checkIngress(*req.Ask); err != nil {
			return nil, err
		}
	}
	return s.decideIn(*req.Ask, read)
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

// remember keeps an open reservation's decision.
func (s *Authority) remember(id int64, d *crossing.PolicyDecision, _ crossing.BudgetState) {
	// Under the lock in every case: remember runs in the batch goroutine
	// and in reserveApproved's at once (TestRememberConcurrentWithoutDecision).
	s.mu.Lock()
	defer s.mu.Unlock()
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
func (s *Authority) forget(id int64) *crossing.PolicyDecision {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.decided[id]
	delete(s.decided, id)
	return d
}
