package gateway

import (
	"context"
	"encoding/json"

	"github.com/cordon-project/cordon/internal/broker/state"
	stateauthority "github.com/cordon-project/cordon/internal/broker/state/authority"
	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/gateway/wire"
	"github.com/cordon-project/cordon/internal/store"
	"github.com/cordon-project/cordon/internal/telemetry"
	"golang.org/x/sync/semaphore"
)

// maxStateOps bounds the state operations the privileged side serves at
// once for one gateway.
const maxStateOps = 32

// StatePolicy is the root side's configuration of the state broker
// (internal/broker/state/authority).
type StatePolicy = stateauthority.Policy

// StateScope is the store scope of a sandbox's identity: the scope is
// always the identity's, never anything the gateway sends.
func StateScope(id crossing.Identity) store.StateScope { return stateauthority.Scope(id) }

// stateHalf is the state broker's trusted half of this sandbox.
func (s *Authority) stateHalf() *stateauthority.Authority {
	s.halvesOnce.Do(s.initHalves)
	return s.stateAuth
}

func (s *Authority) handleState(req call) reply {
	resp := reply{ID: req.ID}
	// Every state operation writes one receipt (or a rate-limited
	// denial): it needs a slot of the receipt budget (crossbudget.go).
	if err := s.admitCrossing(true, s.recordNow); err != nil {
		resp.Err, resp.Kind = err.Error(), wire.Kind(err)
		return resp
	}
	defer s.receipts.end(true) // a denial the bucket dropped still counts: conservative
	var r state.Request
	if req.State != nil {
		r = *req.State
	}
	r.Op = req.Op[len("state_"):] // the op is the message's, whatever the payload says
	// The operation's span: its ids go into the receipt the trusted half
	// writes (telemetry.StampFrom).
	sp := s.Trace.Start(state.Name)
	out, err := s.stateHalf().Do(telemetry.With(context.Background(), sp), r)
	decision := crossing.Allow
	if err != nil {
		decision = crossing.Deny
	}
	sp.End(&crossing.Receipt{Decision: decision, Action: r.Op, Target: state.ScopeTarget}, out.Receipt, nil)
	resp.StateResp = &out
	if err != nil {
		resp.Err, resp.Kind = err.Error(), wire.Kind(err)
	}
	return resp
}

// stateChannel is the state broker's channel: every op is a state
// operation, served on its own in its own transaction with its receipt
// (its trusted half refuses, and receipts, an op it does not know). It
// has no metered operations: the trusted half writes every state
// receipt itself.
var stateChannel = channel{
	op: func(op string) (string, bool) {
		switch op {
		case crossing.OpReserve, crossing.OpSettle, crossing.OpSettleRecord, crossing.OpRecord:
			return "", false
		}
		return "state_" + op, true
	},
	decode: func(req *call, body []byte) error {
		req.State = new(state.Request)
		return json.Unmarshal(body, req.State)
	},
	encode: func(_ call, resp reply) any {
		if resp.StateResp != nil {
			return resp.StateResp
		}
		return nil
	},
	alone: func(s *Authority, _ call) (func(call) reply, *semaphore.Weighted, string) {
		return s.handleState, s.stateOps, "state operations"
	},
}
