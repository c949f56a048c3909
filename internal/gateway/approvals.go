package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/gateway/wire"
	"github.com/cordon-project/cordon/internal/policy"
	"github.com/cordon-project/cordon/internal/store"
)

// Approvals of model calls, egress connections and state operations.
//
// Policy decides here, on the privileged side, whether a crossing needs
// an operator's approval; the gateway process (which parses agent bytes
// and may be compromised) only carries the answer. A reservation that
// opens a crossing policy holds for approval is served outside the
// authority's batch (the approval is its own store transaction): the budget
// is reserved, then the approval of that exact crossing is consumed —
// or, when there is none, requested, the reservation released, and the
// crossing refused with crossing.ErrApprovalPending until an operator
// approves it with `cordon approvals` or the console. Tool calls keep
// their own flow (tool.go), with the same store and guarantees.

// skipApprovals: FULL_CONTROL_LAB — approval-required permits do not
// wait (the receipt's policy decision still says approval_required).
func (s *Authority) skipApprovals() bool { return s.Tools != nil && s.Tools.SkipApprovals }

// approvalTTL is how long an approval request stays open, and how long
// an approval can be used once given.
func (s *Authority) approvalTTL() time.Duration {
	if s.Tools != nil && s.Tools.ApprovalTTL > 0 {
		return s.Tools.ApprovalTTL
	}
	return DefaultApprovalTTL
}

// needsApproval reports whether an authority request opens a crossing policy
// holds for an approval: such a reserve is served by reserveApproved.
func (s *Authority) needsApproval(req call) bool {
	if req.Op != "reserve" || req.Ask == nil || s.skipApprovals() {
		return false
	}
	d, err := s.askPolicy(req)
	return err == nil && d != nil && d.ApprovalRequired
}

// reserveApproved serves a reserve whose crossing needs an approval:
// reserve the budget, then use the approval of the exact crossing; when
// there is none, release the budget and refuse.
func (s *Authority) reserveApproved(req call) reply {
	resp := reply{ID: req.ID}
	ctx := context.Background()
	fail := func(err error) reply {
		resp.Err, resp.Kind = err.Error(), wire.Kind(err)
		return resp
	}
	// It opens a crossing like any reserve (its own transaction, outside
	// the batch): it counts against the crossing rate and takes a slot of
	// the receipt budget (crossbudget.go) before any store work, held
	// until it settles. A sandbox-scoped egress approval covers many
	// connections: without this each went past both bounds.
	if err := s.admitOpen(true, req.Broker); err != nil {
		return fail(err)
	}
	if err := s.admitCrossing(true, s.recordNow); err != nil {
		return fail(err)
	}
	opened := false
	defer func() {
		if !opened {
			s.receipts.end(false)
		}
	}()
	d, err := s.askPolicy(req)
	resp.Res.Policy = d
	if err != nil {
		return fail(err)
	}
	ask := *req.Ask
	half, ok := meteredHalves[req.Broker]
	if !ok {
		return fail(fmt.Errorf("%w: %s cannot wait for approval here", crossing.ErrPolicyDenied, ask.Action))
	}
	digest, shown, err := half.Approval(s.ID, ask, d)
	if err != nil {
		return fail(err)
	}
	res, st, err := s.Store.Reserve(ctx, s.ID, req.Broker, req.Want, req.Streams, s.Budget)
	resp.State = st
	if err != nil {
		return fail(err)
	}
	res.Policy = d
	if d.ApprovalRequired && !s.skipApprovals() {
		ref, err := s.useApproval(ctx, d, ask.Action, ask.Target, digest, shown)
		if err != nil {
			// Nothing crosses: the budget goes back.
			if _, serr := s.Store.Settle(ctx, res, crossing.Amount{}, s.Budget); serr != nil {
				s.log().Warn("release the reservation of a crossing waiting for approval", "err", serr)
			}
			resp.Res = crossing.Reservation{Policy: d, Approval: ref}
			return fail(err)
		}
		res.Approval = ref
		s.grant(res.ID, ref.ID)
	}
	resp.Res = res
	s.remember(res.ID, d, st)
	s.opened(res.ID, req.Broker, req.Ask, true)
	opened = true
	return resp
}

// useApproval uses the approval of the exact crossing digest names:
// consumes it (or, for a sandbox-scoped egress approval, holds it for
// the sandbox's life). Without one it requests one (shown to the
// operator as shown) and fails with crossing.ErrApprovalPending; a
// denial fails with crossing.ErrApprovalDenied.
func (s *Authority) useApproval(ctx context.Context, d *crossing.PolicyDecision, action, target, digest string, shown any) (*crossing.ApprovalRef, error) {
	use := s.Store.ConsumeApproval
	if d.ApprovalScope == policy.ApprovalScopeSandbox && action == policy.ActionEgressConnect {
		use = s.Store.HoldApproval
	}
	a, err := use(ctx, s.ID.Workload, digest)
	switch {
	case err == nil:
		return refOf(a), nil
	case errors.Is(err, store.ErrApprovalDenied):
		return refOf(a), fmt.Errorf("%w: approval %s was denied", crossing.ErrApprovalDenied, a.ID)
	case errors.Is(err, store.ErrApprovalNotFound), errors.Is(err, store.ErrApprovalPending):
		args, err := json.Marshal(shown)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", crossing.ErrUnavailable, err)
		}
		// The sandbox's pending requests are counted in the request's own
		// transaction: concurrent crossings cannot all pass the count.
		a, err = s.Store.RequestApprovalLimited(ctx, store.Approval{Workload: s.ID.Workload, SandboxID: s.ID.SandboxID,
			Action: action, Target: target, Digest: digest, Arguments: args}, s.approvalTTL(), MaxPendingApprovals)
		var limit *store.ApprovalLimitError
		if errors.As(err, &limit) {
			return nil, fmt.Errorf("%w: %v", crossing.ErrApprovalDenied, limit)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %v", crossing.ErrUnavailable, err)
		}
		return refOf(a), fmt.Errorf("%w: approval %s waits for an operator (expires %s)", crossing.ErrApprovalPending,
			a.ID, a.Expires.UTC().Format(time.RFC3339))
	}
	return nil, fmt.Errorf("%w: %v", crossing.ErrUnavailable, err)
}

func refOf(a store.Approval) *crossing.ApprovalRef {
	return &crossing.ApprovalRef{ID: a.ID, State: a.State, Expires: a.Expires}
}

// grants are the approvals this side used for open crossings, so that
// the crossing's receipt — which the gateway writes — names the approval
// only when this side used it: by reservation (settle_record) and by
// approval id (record, for egress, whose receipt follows its settlement).
type grants struct {
	mu    sync.Mutex
	byRes map[int64]string
	byID  map[string]int
}

// maxGrants bounds the grants kept; past it a receipt does not name its
// approval (the approval still records its use).
const maxGrants = 4096

func (s *Authority) grant(res int64, id string) {
	g := &s.approvals
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.byRes == nil {
		g.byRes, g.byID = map[int64]string{}, map[string]int{}
	}
	if len(g.byRes) >= maxGrants || len(g.byID) >= maxGrants {
		return
	}
	g.byRes[res] = id
	g.byID[id]++
}

// settledGrant returns and drops the approval of a reservation being
// settled with its receipt.
func (s *Authority) settledGrant(res int64) string {
	g := &s.approvals
	g.mu.Lock()
	defer g.mu.Unlock()
	id, ok := g.byRes[res]
	if !ok {
		return ""
	}
	delete(g.byRes, res)
	g.drop(id)
	return id
}

// unbindGrant drops the reservation's side of a grant when it is settled
// without its receipt (egress): its record finds the grant by approval
// id, and a later reservation reusing the id must not name it.
func (s *Authority) unbindGrant(res int64) {
	g := &s.approvals
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.byRes, res)
}

// recordedGrant reports whether a receipt the gateway records may name
// approval id: this side used it for a crossing not yet receipted.
func (s *Authority) recordedGrant(id string) bool {
	if id == "" {
		return false
	}
	g := &s.approvals
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.byID[id] == 0 {
		return false
	}
	g.drop(id)
	for r, x := range g.byRes {
		if x == id {
			delete(g.byRes, r)
			break
		}
	}
	return true
}

func (g *grants) drop(id string) {
	if g.byID[id]--; g.byID[id] <= 0 {
		delete(g.byID, id)
	}
}
