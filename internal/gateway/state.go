package gateway

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cordon-project/cordon/internal/broker/state"
	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/gateway/wire"
	"github.com/cordon-project/cordon/internal/policy"
	"github.com/cordon-project/cordon/internal/store"
)

// maxStateOps bounds the state operations the privileged side serves at
// once for one gateway.
const maxStateOps = 32

// StatePolicy is the privileged side's configuration of the state broker:
// the bounds of the sandbox's scope (its tenant, workload and purpose).
// A quota or bound that is not positive refuses every write.
type StatePolicy struct {
	QuotaBytes    int64 // keys and values the scope holds
	QuotaEntries  int64 // entries the scope holds
	MaxValueBytes int64 // one value; at most state.MaxValueBytesLimit
	// Retention removes an entry not written for this long; 0 keeps it.
	Retention time.Duration
}

// StateScope is the store scope of a sandbox's identity: the scope is
// always the identity's, never anything the gateway sends.
func StateScope(id crossing.Identity) store.StateScope {
	tenant := id.Tenant
	if tenant == "" {
		tenant = DefaultTenant
	}
	return store.StateScope{Tenant: tenant, Workload: id.Workload, Purpose: id.Purpose}
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
	out, err := s.stateOp(context.Background(), r)
	resp.StateResp = &out
	if err != nil {
		resp.Err, resp.Kind = err.Error(), wire.Kind(err)
	}
	return resp
}

// stateAsk checks r as the broker does (the gateway may be compromised)
// and returns its policy question: the action, and the resource id — the
// key, or state.ScopeTarget for the whole scope.
func (sp *StatePolicy) stateAsk(r state.Request) (string, string, error) {
	conds := 0
	for _, c := range []bool{r.IfMatch != 0, r.IfExists, r.IfAbsent} {
		if c {
			conds++
		}
	}
	if r.IfMatch < 0 || conds > 1 {
		return "", "", fmt.Errorf("%w: at most one version precondition", state.ErrInvalid)
	}
	if conds > 0 && r.Op != state.OpPut && r.Op != state.OpDelete || r.IfAbsent && r.Op != state.OpPut {
		return "", "", fmt.Errorf("%w: preconditions apply to put and delete", state.ErrInvalid)
	}
	if r.Op != state.OpPut && len(r.Value) > 0 {
		return "", "", fmt.Errorf("%w: only put carries a value", state.ErrInvalid)
	}
	switch r.Op {
	case state.OpGet, state.OpPut, state.OpDelete:
		if err := state.ValidKey(r.Key); err != nil {
			return "", "", err
		}
		if r.Prefix != "" || r.After != "" || r.Limit != 0 {
			return "", "", fmt.Errorf("%w: prefix, after and limit apply to list and export", state.ErrInvalid)
		}
		if r.Op == state.OpGet {
			return policy.ActionStateRead, r.Key, nil
		}
		return policy.ActionStateWrite, r.Key, nil
	case state.OpList, state.OpExport, state.OpReset:
		if r.Key != "" {
			return "", "", fmt.Errorf("%w: %s takes no key", state.ErrInvalid, r.Op)
		}
		if err := state.ValidCursor(r.Prefix); err != nil {
			return "", "", err
		}
		if err := state.ValidCursor(r.After); err != nil {
			return "", "", err
		}
		if r.Limit < 0 || r.Limit > state.MaxListLimit || r.Op != state.OpList && (r.Limit != 0 || r.Prefix != "") {
			return "", "", fmt.Errorf("%w: limit is 1 to %d, and only list takes a limit and a prefix", state.ErrInvalid, state.MaxListLimit)
		}
		if r.Op == state.OpReset {
			if r.After != "" {
				return "", "", fmt.Errorf("%w: reset takes no cursor", state.ErrInvalid)
			}
			return policy.ActionStateWrite, state.ScopeTarget, nil
		}
		return policy.ActionStateRead, state.ScopeTarget, nil
	}
	return "", "", fmt.Errorf("%w: unknown operation %q", state.ErrInvalid, clipID(r.Op))
}

// stateOp runs one state operation: checks, policy, then the store, which
// records the receipt in the operation's own transaction. A refusal is
// recorded as a denial (rate-limited like every denial).
func (s *Authority) stateOp(ctx context.Context, r state.Request) (state.Response, error) {
	start := time.Now()
	rc := crossing.Receipt{Time: start.UTC(), Identity: s.ID, Broker: state.Name, Action: r.Op, Target: state.ScopeTarget}
	var out state.Response
	deny := func(err error) (state.Response, error) {
		s.recordStateDenial(ctx, rc, start, err)
		return out, err
	}
	sp := s.State
	if sp == nil {
		return deny(fmt.Errorf("%w: this sandbox has no managed state", crossing.ErrPolicyDenied))
	}
	action, target, err := sp.stateAsk(r)
	if err != nil {
		return deny(err)
	}
	rc.Target = target
	d, err := s.decide(crossing.Ask{Action: action, Resource: "State", Target: target})
	rc.Policy = d
	if err != nil {
		return deny(err)
	}
	if d.ApprovalRequired && !s.skipApprovals() {
		ref, err := s.useApproval(ctx, d, action, target, stateDigest(s.ID, action, target, r), stateShown(r))
		out.Approval = ref
		if err != nil {
			return deny(err)
		}
		rc.Approval = ref.ID
	}
	rc.Decision, rc.Reason = crossing.Allow, r.Op+" "+target
	rc.Duration = time.Since(start) // to the store: the receipt is written in the operation's transaction
	sc := StateScope(s.ID)
	usage := func(u store.StateUsage) *state.Usage {
		return &state.Usage{Bytes: u.Bytes, Entries: u.Entries, QuotaBytes: sp.QuotaBytes, QuotaEntries: sp.QuotaEntries,
			MaxValueBytes: sp.MaxValueBytes, RetentionSeconds: int64(sp.Retention / time.Second)}
	}
	switch r.Op {
	case state.OpGet:
		var e store.StateEntry
		e, out.Receipt, err = s.Store.GetState(ctx, sc, r.Key, &rc)
		if err == nil {
			out.Entry = entryOf(e)
		}
	case state.OpPut:
		if limit := min(sp.MaxValueBytes, state.MaxValueBytesLimit); int64(len(r.Value)) > limit {
			out.Limit = limit
			return deny(fmt.Errorf("%w: %d bytes, the limit is %d", state.ErrTooLarge, len(r.Value), limit))
		}
		if sp.QuotaBytes <= 0 || sp.QuotaEntries <= 0 || sp.MaxValueBytes <= 0 {
			return deny(fmt.Errorf("%w: this scope has no quota", state.ErrQuota))
		}
		lim := store.StateLimits{QuotaBytes: sp.QuotaBytes, QuotaEntries: sp.QuotaEntries, Retention: sp.Retention}
		w := store.StateWrite{Key: r.Key, Value: r.Value, SandboxID: s.ID.SandboxID, IfMatch: r.IfMatch, IfExists: r.IfExists, IfAbsent: r.IfAbsent}
		var e store.StateEntry
		e, out.Created, out.Receipt, err = s.Store.PutState(ctx, sc, w, lim, &rc)
		if err == nil {
			out.Entry = entryOf(e)
		}
	case state.OpDelete:
		out.Receipt, err = s.Store.DeleteState(ctx, sc, r.Key, r.IfMatch, &rc)
	case state.OpList, state.OpExport:
		q := store.StateQuery{Prefix: r.Prefix, After: r.After, Limit: r.Limit}
		if r.Op == state.OpExport {
			q = store.StateQuery{After: r.After, Limit: state.ExportPageEntries, Values: true, MaxBytes: state.ExportPageBytes}
			out.Scope = &state.Scope{Tenant: sc.Tenant, Workload: sc.Workload, Purpose: sc.Purpose}
		} else if q.Limit == 0 {
			q.Limit = state.DefaultListLimit
		}
		var p store.StatePage
		p, out.Receipt, err = s.Store.ListState(ctx, sc, q, &rc)
		if err == nil {
			out.More, out.Usage = p.More, usage(p.Usage)
			out.Entries = make([]state.Entry, 0, len(p.Entries))
			for _, e := range p.Entries {
				out.Entries = append(out.Entries, *entryOf(e))
			}
		}
	case state.OpReset:
		out.Deleted, out.Receipt, err = s.Store.ResetState(ctx, sc, &rc)
	}
	var stale *store.StateStaleError
	var quota *store.StateQuotaError
	switch {
	case err == nil:
		if rc.Approval != "" && out.Receipt != 0 {
			if err := s.Store.SetApprovalReceipt(ctx, rc.Approval, out.Receipt); err != nil {
				s.log().Warn("link approval to its receipt", "approval", rc.Approval, "err", err)
			}
		}
		return out, nil
	case errors.Is(err, store.ErrStateNotFound):
		return deny(state.ErrNotFound)
	case errors.As(err, &stale):
		out.Current = stale.Current
		return deny(fmt.Errorf("%w: %s", state.ErrPrecondition, staleText(stale.Current)))
	case errors.As(err, &quota):
		out.Quota, out.Limit, out.Used, out.Needed = quota.Quota, quota.Limit, quota.Used, quota.Requested
		return deny(fmt.Errorf("%w: %s: the scope holds %d of %d, the write needs %d", state.ErrQuota, quota.Quota, quota.Used, quota.Limit, quota.Requested))
	}
	// The store failed: the crossing is refused, and nothing recorded
	// claims it happened.
	out = state.Response{}
	if !errors.Is(err, crossing.ErrUnavailable) {
		err = fmt.Errorf("%w: %v", crossing.ErrUnavailable, err)
	}
	return deny(err)
}

func staleText(current int64) string {
	if current == 0 {
		return "the entry does not exist"
	}
	return fmt.Sprintf("the entry is at version %d", current)
}

// recordStateDenial records a refused state operation, rate-limited like
// every denial; a store that cannot record it is logged.
func (s *Authority) recordStateDenial(ctx context.Context, rc crossing.Receipt, start time.Time, why error) {
	rc.Decision, rc.Reason, rc.Duration = crossing.Deny, why.Error(), time.Since(start)
	rc.RequestDigest, rc.ResultDigest, rc.BytesIn, rc.BytesOut = "", "", 0, 0
	dropped, ok := s.denials.admit(time.Now())
	if !ok {
		return
	}
	if dropped > 0 {
		rc.Reason += fmt.Sprintf(" (and %d more denials not recorded: rate limit)", dropped)
	}
	if _, err := s.Store.RecordReceipt(ctx, rc); err != nil {
		s.log().Warn("record state denial", "err", err)
	}
}

func entryOf(e store.StateEntry) *state.Entry {
	return &state.Entry{Key: e.Key, Version: e.Version, Size: e.Size, Created: e.Created, Updated: e.Updated, Expires: e.Expires,
		Value:      e.Value,
		Provenance: state.Provenance{SandboxID: e.SandboxID, Written: e.Updated, Receipt: e.ReceiptID, Trust: state.TrustAgent}}
}
