package gateway

import (
	"context"
	"fmt"
	"time"

	"github.com/cordon-project/cordon/internal/broker/ingress"
	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/store"
)

// A crossing the gateway opened but never settled — because the gateway
// process was killed (the kernel's OOM killer, a crash) or its authority
// connection dropped — has an outcome this side did not observe: a model
// stream may already have reached the agent in full. It is charged its
// whole reservation and receipted with reason store.ReasonGatewayLost,
// exactly like a stream the agent abandoned. Nothing of it is ever
// dropped: the same charge is made by the daemon's and `cordon gc`'s
// reclamation when cordon itself died (store.ReleaseCrossings).

// openCrossing is what this side knows of an open reservation, for the
// receipt of a lost crossing.
type openCrossing struct {
	broker string
	ask    *crossing.Ask
	// main: it opens a crossing (a model call, an egress connection),
	// whose receipt may come in a record after a plain settle; otherwise
	// it is an egress tunnel's byte chunk, which writes no receipt of its
	// own. Every open reservation holds a slot of the receipt budget: a
	// lost one is receipted.
	main bool
}

// maxOpenReservations bounds the reservations one sandbox holds open at
// once. Each open reservation is a row every later reservation and
// settlement of the workload sums in the store's write transaction (the
// lock every sandbox of a daemon shares), so what a gateway holds must be
// bounded apart from the receipt budget: held open and never settled,
// 20000 reservations cost 100 s of that lock. A legitimate gateway holds
// one per model call in flight and two per egress connection (the
// connection and its current byte chunk).
const maxOpenReservations = 4096

// admitOpen refuses a reservation the sandbox may not hold now: past
// maxOpenReservations (crossing.ErrBudgetExceeded), or a byte chunk
// (!main) of broker beyond one per open connection of the same broker —
// the egress and ingress brokers' meters reserve a chunk only inside a
// connection and hold one at a time (crossing.ErrPolicyDenied). Reservations served at once
// outside the batch (reserveApproved) may pass it together: the bound
// is exceeded by at most maxToolOps.
func (s *Authority) admitOpen(main bool, broker string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	bound := s.maxOpen
	if bound <= 0 {
		bound = maxOpenReservations
	}
	if len(s.open) >= bound {
		return fmt.Errorf("%w: open reservations: this sandbox holds %d, the bound", crossing.ErrBudgetExceeded, len(s.open))
	}
	if main {
		return nil
	}
	conns, chunks := 0, 0
	for _, oc := range s.open {
		switch {
		case oc.broker != broker:
		case oc.main:
			conns++
		default:
			chunks++
		}
	}
	if chunks >= conns {
		return fmt.Errorf("%w: an %s byte chunk needs an open connection to hold it (%d connections hold %d chunks)", crossing.ErrPolicyDenied, clipID(broker), conns, chunks)
	}
	return nil
}

// opened notes an open reservation (a reserve that succeeded); it holds
// the receipt slot admitCrossing took for it.
func (s *Authority) opened(id int64, broker string, ask *crossing.Ask, main bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open == nil {
		s.open = map[int64]openCrossing{}
	}
	s.open[id] = openCrossing{broker: broker, ask: ask, main: main}
	if main {
		s.Trace.Opened(id, broker, ask)
	}
	if broker == ingress.Name && main && ask != nil {
		s.ingress.grant(id, ask.Port) // its one dial into the sandbox
	}
}

// openedBy is the broker whose channel opened reservation id; false when
// this Authority did not open it.
func (s *Authority) openedBy(id int64) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	oc, ok := s.open[id]
	return oc.broker, ok
}

// closed forgets a reservation being settled; held: it held a receipt
// slot (a reservation of this gateway's), main: as in openCrossing.
func (s *Authority) closed(id int64) (held, main bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	oc, ok := s.open[id]
	delete(s.open, id)
	s.ingress.revoke(id)
	return ok, ok && oc.main
}

// chargeLost charges every reservation the sandbox still holds in full,
// each with a gateway_lost receipt carrying what this side knew of it.
// Call it only once the gateway process has ended and its authority
// connection has been read to the end: then nothing can settle them.
func (s *Authority) chargeLost(ctx context.Context) ([]store.LostCrossing, error) {
	lost, err := s.Store.ChargeReservations(ctx, s.ID.SandboxID, s.Budget, func(rc *crossing.Receipt, r crossing.Reservation) {
		rc.Identity = s.ID
		// The crossing's span ends with the lost receipt (ended at
		// once: the store's id is not known here).
		sp := s.Trace.Take(r.ID, r.Broker)
		defer func() {
			sp.Stamp(rc)
			sp.End(rc, 0, nil)
		}()
		s.mu.Lock()
		oc, ok := s.open[r.ID]
		delete(s.open, r.ID)
		s.ingress.revoke(r.ID)
		d := s.decided[r.ID]
		delete(s.decided, r.ID)
		s.mu.Unlock()
		if !ok || oc.broker != r.Broker {
			return // a reservation of an earlier gateway of this sandbox
		}
		s.receipts.end(false) // counted below
		rc.Policy = d
		if oc.ask != nil {
			rc.Action, rc.Target = oc.ask.Action, oc.ask.Target
		}
	})
	for range lost {
		s.receipts.wrote()
	}
	return lost, err
}

// lostTimeout bounds the charge of a lost gateway's crossings.
const lostTimeout = 30 * time.Second
