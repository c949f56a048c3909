package gateway

import (
	"errors"
	"fmt"
	"time"

	"github.com/cordon-project/cordon/internal/broker/ingress"
	"github.com/cordon-project/cordon/internal/broker/state"
	"github.com/cordon-project/cordon/internal/broker/tool"
	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/denial"
)

// The metered operations (model, egress; record also for the tool
// broker's refusals), served in the batch against authorityOps.

// reserve holds budget for one crossing after policy allowed it; the
// reservation's policy decision is set in resp also when refused.
func (s *Authority) reserve(ops authorityOps, req call, resp *reply) error {
	if req.Broker != "model" && req.Broker != "egress" && req.Broker != "ingress" {
		return fmt.Errorf("unknown broker %q", req.Broker)
	}
	// Every reservation takes a receipt slot (crossbudget.go): a
	// crossing writes its receipt when it settles, and any reservation
	// left open by a gateway that dies is receipted as lost — an egress
	// tunnel's byte chunks too, or a compromised gateway could hold (and
	// lose) unbounded many. A crossing that opens (main) also counts
	// against the crossing rate; the byte chunks of an open tunnel do not.
	main := opensCrossing(req)
	if err := s.admitOpen(main, req.Broker); err != nil {
		return err
	}
	if err := s.admitCrossing(main, ops.Record); err != nil {
		return err
	}
	d, err := s.askPolicyIn(req, ops.BudgetState)
	if err != nil {
		resp.Res.Policy = d
		s.receipts.end(false)
		return err
	}
	if d != nil && d.ApprovalRequired && !s.skipApprovals() {
		// Decided differently from needsApproval a moment ago (a policy
		// reading context.budget): never let it through here.
		resp.Res.Policy = d
		s.receipts.end(false)
		return fmt.Errorf("%w: the crossing needs an approval; retry it", crossing.ErrUnavailable)
	}
	resp.Res, resp.State, err = ops.Reserve(s.ID, req.Broker, req.Want, req.Streams, s.Budget)
	if err != nil {
		s.receipts.end(false)
		return err
	}
	resp.Res.Policy = d
	s.remember(resp.Res.ID, d, resp.State)
	s.opened(resp.Res.ID, req.Broker, req.Ask, main)
	return nil
}

// opensCrossing reports whether a reservation opens a crossing (every
// model request, every egress or ingress connection) rather than hold
// the bytes of one already open.
func opensCrossing(req call) bool {
	return req.Broker == "model" || req.Want.Connections > 0 || req.Want.IngressConnections > 0
}

// settle settles a reservation without a receipt (a byte chunk, or a
// crossing whose receipt comes in a record).
func (s *Authority) settle(ops authorityOps, req call) (crossing.BudgetState, error) {
	if req.Res == nil {
		return crossing.BudgetState{}, errors.New("settle without a reservation")
	}
	r := *req.Res
	r.Identity, r.Broker = s.ID, req.Broker // the store settles only the channel's broker's
	if err := s.ownReservation(req.Broker, r.ID); err != nil {
		return crossing.BudgetState{}, err
	}
	st, err := ops.SettleRecord(r, req.Used, s.Budget, nil)
	if err != nil {
		return st, err
	}
	// Nothing of the reservation stays keyed by its id: the store reuses
	// a settled reservation's id, and a later reservation must not
	// inherit its decision or approval. (An egress connection's record
	// names its approval by id: grants.byID.)
	s.forget(r.ID)
	s.unbindGrant(r.ID)
	switch held, main := s.closed(r.ID); {
	case main:
		s.receipts.settled() // its receipt comes in a record
		s.owe(req.Broker)
		s.Trace.Settled(r.ID, req.Broker)
	case held:
		s.receipts.end(false) // a byte chunk: no receipt
	}
	return st, nil
}

// settleRecord settles a reservation and records its crossing's receipt
// in one commit, with the decision and approval this side holds.
func (s *Authority) settleRecord(ops authorityOps, req call) (crossing.BudgetState, error) {
	if req.Res == nil || req.Receipt == nil {
		return crossing.BudgetState{}, errors.New("settle_record without a reservation and a receipt")
	}
	r := *req.Res
	r.Identity, r.Broker = s.ID, req.Broker // the store settles only the channel's broker's
	if err := s.ownReservation(req.Broker, r.ID); err != nil {
		return crossing.BudgetState{}, err
	}
	rc := *req.Receipt
	if rc.Broker != req.Broker {
		// As record: a channel writes its own broker's receipts only (a
		// tool or state receipt comes only from their trusted halves).
		return crossing.BudgetState{}, fmt.Errorf("%w: settle_record: a %s receipt on the %s broker's channel", crossing.ErrPolicyDenied, clipID(rc.Broker), req.Broker)
	}
	if err := validDecision(rc.Decision); err != nil {
		return crossing.BudgetState{}, err
	}
	s.boundTime(&rc)
	rc.Identity = s.ID
	rc.CallKey, rc.ResultDigest = "", "" // a tool call's, set by tool_end only
	if req.Broker == ingress.Name {
		if err := s.ingressReceipt(&rc, r.ID, true); err != nil {
			return crossing.BudgetState{}, err
		}
	}
	rc.Policy = s.forget(r.ID)
	rc.Approval = s.settledGrant(r.ID) // only an approval this side used
	s.denied(&rc)
	sp := s.Trace.Take(r.ID, req.Broker)
	sp.Stamp(&rc)
	st, err := ops.SettleRecord(r, req.Used, s.Budget, &rc)
	sp.End(&rc, rc.ID, err) // the store set rc.ID when it recorded the receipt
	if err != nil {
		return st, err
	}
	s.logDenial(rc.ID, rc)
	if held, _ := s.closed(r.ID); held {
		s.receipts.end(true)
	} else {
		s.receipts.wrote() // a reservation of an earlier gateway
	}
	return st, nil
}

// record records one receipt of the channel's broker, with only the
// fields this side lets the gateway set.
func (s *Authority) record(ops authorityOps, req call) error {
	if req.Receipt == nil {
		return errors.New("record without a receipt")
	}
	rc := *req.Receipt
	rc.Identity = s.ID
	if err := validDecision(rc.Decision); err != nil {
		return err
	}
	s.boundTime(&rc)
	switch {
	case rc.Broker != req.Broker:
		// A channel records its own broker's receipts only.
		return fmt.Errorf("%w: record: a %s receipt on the %s broker's channel", crossing.ErrPolicyDenied, clipID(rc.Broker), req.Broker)
	case rc.Broker == state.Name:
		// The privileged side writes every state receipt itself.
		return errors.New("record: state receipts come only from state operations")
	case rc.Broker == tool.Name && rc.Decision == crossing.Allow:
		// A tool call is recorded allowed only by tool_end, from the call
		// this side began.
		return errors.New("record: an allowed tool receipt comes only from tool_end")
	case rc.Broker == ingress.Name:
		if err := s.ingressReceipt(&rc, 0, false); err != nil {
			return err
		}
	}
	// Fields only this side may set (tool_end, settle_record); an
	// approval only when this side used it for an open crossing.
	if rc.Decision != crossing.Allow || !s.recordedGrant(rc.Approval) {
		rc.Approval = ""
	}
	rc.CallKey, rc.ResultDigest = "", ""
	rc.Rule, rc.ConfigDigest = "", s.ConfigDigest // a denial's rule is named below
	if rc.Policy != nil {
		rc.Policy.Digest = s.policy().Digest() // what decided is this side's set
		if rc.Decision == crossing.Deny && denial.Classify(rc) == denial.KindCedarForbid {
			s.checkClaimedForbids(rc.Policy)
		}
	}
	// The crossing's span (internal/telemetry), made once the receipt
	// is to be written (a dropped denial makes none): its ids in the
	// receipt, ended with what the receipt says.
	var (
		id  int64
		err error
	)
	write := func() {
		sp := s.Trace.ForRecord(&rc)
		sp.Stamp(&rc)
		id, err = ops.Record(rc)
		sp.End(&rc, id, err)
	}
	if rc.Decision != crossing.Allow {
		// A refusal's receipt needs a slot of the receipt budget; past
		// the bound it is counted, not written.
		if s.admitCrossing(false, ops.Record) != nil {
			return nil
		}
		dropped, ok := s.denials.admit(time.Now())
		if !ok {
			s.receipts.end(false)
			return nil
		}
		if dropped > 0 {
			rc.Reason += fmt.Sprintf(" (and %d more denials not recorded: rate limit)", dropped)
		}
		s.denied(&rc)
		write()
		s.receipts.end(err == nil)
		if err == nil {
			s.logDenial(id, rc)
		}
		return err
	}
	// An allowed crossing's receipt is always written: it takes the slot
	// its crossing held until it settled. One no crossing settled (only a
	// compromised gateway sends it, or a settle that failed) needs a slot
	// of its own and a token of the crossing rate, like the crossing it
	// claims: past either bound it is refused.
	if !s.paid(req.Broker) || !s.receipts.takePending() {
		if err = s.admitCrossing(true, ops.Record); err != nil {
			return err
		}
	}
	write()
	s.receipts.end(err == nil)
	return err
}

// ownReservation refuses to settle, on one broker's channel, a
// reservation another broker's channel opened: each broker settles only
// its own crossings.
func (s *Authority) ownReservation(broker string, id int64) error {
	if by, ok := s.openedBy(id); ok && by != broker {
		return fmt.Errorf("%w: reservation %d is the %s broker's, not the %s broker's", crossing.ErrPolicyDenied, id, by, broker)
	}
	return nil
}

// validDecision refuses a receipt whose decision is neither allow nor
// deny: the gateway's text would otherwise be recorded as a denial's
// decision (an escape sequence on the operator's terminal, a "Deny"
// that receipts --decision deny never lists).
func validDecision(d string) error {
	if d != crossing.Allow && d != crossing.Deny {
		return fmt.Errorf("%w: a receipt's decision is allow or deny, not %q", crossing.ErrPolicyDenied, clipID(d))
	}
	return nil
}

// timeSlack is how much earlier than this side began serving a
// crossing's recorded start may be (clocks read in two processes).
const timeSlack = time.Minute

// boundTime keeps a broker's receipt time (its crossing's start) only
// between this side beginning to serve and now; any other is now. The
// store indexes the time and receipts --since selects on it: a broker's
// receipt dated 2001 or 2100 would be missed by every "since" question.
func (s *Authority) boundTime(rc *crossing.Receipt) {
	now := time.Now()
	if rc.Time.After(now) || rc.Time.Before(s.served.Add(-timeSlack)) {
		rc.Time = now.UTC()
	}
}

// checkClaimedForbids keeps a broker's claim that forbids denied its
// crossing (a receipt whose rule would be "forbidden by") only if each
// is a forbid of this side's set: the rule named
// from it (and the suggestion to narrow or remove that forbid) reaches
// the operator. Any other claim becomes an evaluation error naming it,
// which names no forbid and suggests nothing.
func (s *Authority) checkClaimedForbids(d *crossing.PolicyDecision) {
	set := s.policy()
	for _, id := range d.Determining {
		if !set.Forbids(id) {
			d.Errors = append(d.Errors, fmt.Sprintf("the gateway named policies that are not forbids of this set as determining: %q", d.Determining))
			d.Determining = nil
			return
		}
	}
}
