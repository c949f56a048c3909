package gateway

import (
	"fmt"
	"sync"

	"github.com/cordon-project/cordon/internal/broker/ingress"
	"github.com/cordon-project/cordon/internal/crossing"
)

// ingressGate binds the ingress broker's dials to the connections the
// authority admitted. The ingress broker process is unprivileged and
// relays bytes from the sandbox; were its dialer open to every declared
// port, a compromised process could connect into the sandbox with no
// policy decision, no budget and no receipt, to a route policy forbids,
// past max_concurrent, as often as it liked — each socket created by root
// in the sandbox's namespace. With the gate, each ingress connection the
// authority admits (policy ingress.connect on a declared route at that
// route's port, budgets.ingress_connections held, the route's
// max_concurrent not reached among the open ones) grants one dial of that
// port, taken by the checked dialer and withdrawn when the reservation
// settles or is charged as lost. A dial without one is refused.
type ingressGate struct {
	routes map[string]ingress.Route // by name

	mu sync.Mutex
	// tickets are the admitted connections not dialled yet: reservation
	// id → sandbox port.
	tickets map[int64]int
}

func newIngressGate(routes []ingress.Route) *ingressGate {
	g := &ingressGate{routes: map[string]ingress.Route{}, tickets: map[int64]int{}}
	for _, r := range routes {
		g.routes[r.Name] = r
	}
	return g
}

// grant lets reservation id's connection dial port once.
func (g *ingressGate) grant(id int64, port int) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.tickets[id] = port
}

// revoke withdraws reservation id's dial, if it was not used.
func (g *ingressGate) revoke(id int64) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.tickets, id)
}

// take uses one admitted connection's dial of port; false when none is
// waiting.
func (g *ingressGate) take(port int) bool {
	if g == nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for id, p := range g.tickets {
		if p == port {
			delete(g.tickets, id)
			return true
		}
	}
	return false
}

// checkIngress refuses an ingress.connect this sandbox does not declare:
// no route of that name, another port than the route's, or the route's
// max_concurrent connections already open (counted here, not only in
// the unprivileged process).
func (s *Authority) checkIngress(ask crossing.Ask) error {
	g := s.ingress
	if g == nil {
		return fmt.Errorf("%w: the sandbox declares no ingress route", crossing.ErrPolicyDenied)
	}
	r, ok := g.routes[ask.Target]
	if !ok {
		return fmt.Errorf("%w: no ingress route is named %q", crossing.ErrPolicyDenied, clipID(ask.Target))
	}
	if ask.Port != r.Port {
		return fmt.Errorf("%w: ingress route %s leads to port %d, not %d", crossing.ErrPolicyDenied, r.Name, r.Port, ask.Port)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, oc := range s.open {
		if oc.broker == ingress.Name && oc.main && oc.ask != nil && oc.ask.Target == r.Name {
			n++
		}
	}
	if r.MaxConcurrent > 0 && n >= r.MaxConcurrent {
		return fmt.Errorf("%w: ingress route %s has its max_concurrent (%d) connections open", crossing.ErrPolicyDenied, r.Name, r.MaxConcurrent)
	}
	return nil
}

// ingressReceipt holds an ingress receipt to what this side knows: the
// action is connect, the route one the sandbox declares and, for the
// receipt of an admitted connection (id, still open), the route the
// authority admitted — whatever the unprivileged process wrote.
func (s *Authority) ingressReceipt(rc *crossing.Receipt, id int64, settles bool) error {
	rc.Action = ingress.ReceiptAction
	if settles {
		s.mu.Lock()
		oc, ok := s.open[id]
		s.mu.Unlock()
		if ok && oc.ask != nil {
			rc.Target = oc.ask.Target
		}
	}
	if s.ingress == nil {
		return fmt.Errorf("%w: record: the sandbox declares no ingress route", crossing.ErrPolicyDenied)
	}
	if _, ok := s.ingress.routes[rc.Target]; !ok {
		return fmt.Errorf("%w: record: no ingress route is named %q", crossing.ErrPolicyDenied, clipID(rc.Target))
	}
	return nil
}
