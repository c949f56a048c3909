package authority

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"
	"unicode/utf8"

	"github.com/cordon-project/cordon/internal/broker/state"
	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/denial"
	"github.com/cordon-project/cordon/internal/policy"
	"github.com/cordon-project/cordon/internal/store"
	"github.com/cordon-project/cordon/internal/telemetry"
)

// Root is what the sandbox's authority (internal/gateway) gives the state
// broker's trusted half: the sandbox's identity, policy decided with it
// as the principal, approvals, and the sandbox's bound on denial
// receipts. Implementations are safe for concurrent use.
type Root interface {
	Identity() crossing.Identity
	// Decide asks policy; a refusal is crossing.ErrPolicyDenied with the
	// decision that refused.
	Decide(ask crossing.Ask) (*crossing.PolicyDecision, error)
	// SkipApprovals: FULL_CONTROL_LAB, approval-required permits do not
	// wait.
	SkipApprovals() bool
	// UseApproval consumes the approval of the exact operation (digest),
	// or requests one showing shown; without a usable approval it
	// returns crossing.ErrApprovalPending or crossing.ErrApprovalDenied.
	UseApproval(ctx context.Context, d *crossing.PolicyDecision, action, target, digest string, shown any) (*crossing.ApprovalRef, error)
	// AdmitDenial takes a token of the denial-receipt rate; dropped is
	// how many were refused since the last one admitted.
	AdmitDenial(now time.Time) (dropped int64, ok bool)
	Logger() *slog.Logger
}

// Authority is the state broker's trusted half for one sandbox: it checks
// each operation again (the gateway process may be compromised), asks
// policy, applies it to the sandbox's own scope in the store and writes
// its receipt in the same transaction.
type Authority struct {
	Root  Root
	Store *store.Store
	// Policy bounds the scope; nil refuses every operation.
	Policy *Policy
	// ConfigDigest is the sandbox configuration's digest, recorded in
	// every receipt (policy explain --receipt compares it).
	ConfigDigest string
}

// Policy is the root side's configuration of the state broker:
// the bounds of the sandbox's scope (its tenant, workload and purpose).
// A quota or bound that is not positive refuses every write.
type Policy struct {
	QuotaBytes    int64 // keys and values the scope holds
	QuotaEntries  int64 // entries the scope holds
	MaxValueBytes int64 // one value; at most state.MaxValueBytesLimit
	// Retention removes an entry not written for this long; 0 keeps it.
	Retention time.Duration
}

// Scope is the store scope of a sandbox's identity: the scope is
// always the identity's, never anything the gateway sends.
func Scope(id crossing.Identity) store.StateScope {
	tenant := id.Tenant
	if tenant == "" {
		tenant = crossing.DefaultTenant
	}
	return store.StateScope{Tenant: tenant, Workload: id.Workload, Purpose: id.Purpose}
}

// Ask checks r as the broker does (the gateway may be compromised)
// and returns its policy question: the action, and the resource id — the
// key, or state.ScopeTarget for the whole scope.
func (sp *Policy) Ask(r state.Request) (string, string, error) {
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
	return "", "", fmt.Errorf("%w: unknown operation %q", state.ErrInvalid, clip(r.Op))
}

// Do runs one state operation: checks, policy, then the store, which
// records the receipt in the operation's own transaction. A refusal is
// recorded as a denial (rate-limited like every denial).
func (s *Authority) Do(ctx context.Context, r state.Request) (state.Response, error) {
	start := time.Now()
	id := s.Root.Identity()
	rc := crossing.Receipt{Time: start.UTC(), Identity: id, Broker: state.Name, Action: r.Op, Target: state.ScopeTarget, ConfigDigest: s.ConfigDigest}
	telemetry.StampFrom(ctx, &rc) // the root side's span of this operation
	var out state.Response
	deny := func(err error) (state.Response, error) {
		s.recordDenial(ctx, rc, start, err)
		return out, err
	}
	sp := s.Policy
	if sp == nil {
		return deny(fmt.Errorf("%w: this sandbox has no managed state", crossing.ErrPolicyDenied))
	}
	action, target, err := sp.Ask(r)
	if err != nil {
		return deny(err)
	}
	rc.Target = target
	d, err := s.Root.Decide(crossing.Ask{Action: action, Resource: "State", Target: target})
	rc.Policy = d
	if err != nil {
		return deny(err)
	}
	if d.ApprovalRequired && !s.Root.SkipApprovals() {
		ref, err := s.Root.UseApproval(ctx, d, action, target, digestOf(id, action, target, r), shownOf(r))
		out.Approval = ref
		if err != nil {
			return deny(err)
		}
		rc.Approval = ref.ID
	}
	rc.Decision, rc.Reason = crossing.Allow, r.Op+" "+target
	rc.Duration = time.Since(start) // to the store: the receipt is written in the operation's transaction
	sc := Scope(id)
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
		w := store.StateWrite{Key: r.Key, Value: r.Value, SandboxID: id.SandboxID, IfMatch: r.IfMatch, IfExists: r.IfExists, IfAbsent: r.IfAbsent}
		var e store.StateEntry
		e, out.Created, out.Receipt, err = s.Store.PutState(ctx, sc, w, lim, &rc)
		if err == nil {
			out.Entry = entryOf(e)
		}
	case state.OpDelete:
		out.Receipt, err = s.Store.DeleteState(ctx, sc, r.Key, r.IfMatch, &rc)
	case state.OpList, state.OpExport:
		err = s.list(ctx, sc, sp, r, &rc, &out)
	case state.OpReset:
		out.Deleted, out.Receipt, err = s.Store.ResetState(ctx, sc, &rc)
	}
	if err == nil {
		if rc.Approval != "" && out.Receipt != 0 {
			if err := s.Store.SetApprovalReceipt(ctx, rc.Approval, out.Receipt); err != nil {
				s.Root.Logger().Warn("link approval to its receipt", "approval", rc.Approval, "err", err)
			}
		}
		return out, nil
	}
	return deny(refusalOf(err, &out))
}

// list runs a list or an export page into out.
func (s *Authority) list(ctx context.Context, sc store.StateScope, sp *Policy, r state.Request, rc *crossing.Receipt, out *state.Response) error {
	q := store.StateQuery{Prefix: r.Prefix, After: r.After, Limit: r.Limit}
	if r.Op == state.OpExport {
		q = store.StateQuery{After: r.After, Limit: state.ExportPageEntries, Values: true, MaxBytes: state.ExportPageBytes}
		out.Scope = &state.Scope{Tenant: sc.Tenant, Workload: sc.Workload, Purpose: sc.Purpose}
	} else if q.Limit == 0 {
		q.Limit = state.DefaultListLimit
	}
	p, receipt, err := s.Store.ListState(ctx, sc, q, rc)
	out.Receipt = receipt
	if err != nil {
		return err
	}
	out.More = p.More
	out.Usage = &state.Usage{Bytes: p.Usage.Bytes, Entries: p.Usage.Entries, QuotaBytes: sp.QuotaBytes, QuotaEntries: sp.QuotaEntries,
		MaxValueBytes: sp.MaxValueBytes, RetentionSeconds: int64(sp.Retention / time.Second)}
	out.Entries = make([]state.Entry, 0, len(p.Entries))
	for _, e := range p.Entries {
		out.Entries = append(out.Entries, *entryOf(e))
	}
	return nil
}

// refusalOf is the typed refusal of a store error, with its details in
// out. A store that failed refuses the crossing as unavailable, and out
// is emptied: nothing recorded claims it happened.
func refusalOf(err error, out *state.Response) error {
	var stale *store.StateStaleError
	var quota *store.StateQuotaError
	switch {
	case errors.Is(err, store.ErrStateNotFound):
		return state.ErrNotFound
	case errors.As(err, &stale):
		out.Current = stale.Current
		return fmt.Errorf("%w: %s", state.ErrPrecondition, staleText(stale.Current))
	case errors.As(err, &quota):
		out.Quota, out.Limit, out.Used, out.Needed = quota.Quota, quota.Limit, quota.Used, quota.Requested
		return fmt.Errorf("%w: %s: the scope holds %d of %d, the write needs %d", state.ErrQuota, quota.Quota, quota.Used, quota.Limit, quota.Requested)
	}
	*out = state.Response{}
	if !errors.Is(err, crossing.ErrUnavailable) {
		err = fmt.Errorf("%w: %v", crossing.ErrUnavailable, err)
	}
	return err
}

func staleText(current int64) string {
	if current == 0 {
		return "the entry does not exist"
	}
	return fmt.Sprintf("the entry is at version %d", current)
}

// recordStateDenial records a refused state operation, rate-limited like
// every denial; a store that cannot record it is logged.
func (s *Authority) recordDenial(ctx context.Context, rc crossing.Receipt, start time.Time, why error) {
	rc.Decision, rc.Reason, rc.Duration = crossing.Deny, why.Error(), time.Since(start)
	rc.RequestDigest, rc.ResultDigest, rc.BytesIn, rc.BytesOut = "", "", 0, 0
	dropped, ok := s.Root.AdmitDenial(time.Now())
	if !ok {
		return
	}
	if dropped > 0 {
		rc.Reason += fmt.Sprintf(" (and %d more denials not recorded: rate limit)", dropped)
	}
	rc.Rule = denial.Rule(rc, 0)
	id, err := s.Store.RecordReceipt(ctx, rc)
	if err != nil {
		s.Root.Logger().Warn("record state denial", "err", err)
		return
	}
	denial.Log(s.Root.Logger(), id, rc)
}

func entryOf(e store.StateEntry) *state.Entry {
	return &state.Entry{Key: e.Key, Version: e.Version, Size: e.Size, Created: e.Created, Updated: e.Updated, Expires: e.Expires,
		Value:      e.Value,
		Provenance: state.Provenance{SandboxID: e.SandboxID, Written: e.Updated, Receipt: e.ReceiptID, Trust: state.TrustAgent}}
}

// digestOf binds a state operation's approval to the exact operation:
// its key (or the scope), the operation, the digest of the value written
// and every precondition and listing bound.
func digestOf(id crossing.Identity, action, target string, r state.Request) string {
	return crossing.ApprovalDigest(id, action, target, exactOf(r))
}

type exactRequest struct {
	Op          string `json:"operation"`
	Key         string `json:"key,omitempty"`
	ValueDigest string `json:"value_digest,omitempty"`
	ValueBytes  int    `json:"value_bytes,omitempty"`
	IfMatch     int64  `json:"if_match,omitempty"`
	IfExists    bool   `json:"if_exists,omitempty"`
	IfAbsent    bool   `json:"if_absent,omitempty"`
	Prefix      string `json:"prefix,omitempty"`
	After       string `json:"after,omitempty"`
	Limit       int    `json:"limit,omitempty"`
}

func exactOf(r state.Request) exactRequest {
	x := exactRequest{Op: r.Op, Key: r.Key, IfMatch: r.IfMatch, IfExists: r.IfExists, IfAbsent: r.IfAbsent,
		Prefix: r.Prefix, After: r.After, Limit: r.Limit}
	if r.Op == state.OpPut {
		x.ValueDigest, x.ValueBytes = digest(r.Value), len(r.Value)
	}
	return x
}

// maxShownValue bounds the value of a put shown to an approver as text.
const maxShownValue = 4 << 10

// shownOf is what the approver reads: the exact operation, and a put's
// value when it is short UTF-8 text.
func shownOf(r state.Request) any {
	x := struct {
		exactRequest
		Value *string `json:"value,omitempty"`
	}{exactRequest: exactOf(r)}
	if r.Op == state.OpPut && len(r.Value) <= maxShownValue && utf8.Valid(r.Value) {
		v := string(r.Value)
		x.Value = &v
	}
	return x
}

// digest is "sha256:<hex>" of b.
func digest(b []byte) string {
	h := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(h[:])
}

// clip bounds an identifier echoed in an error.
func clip(id string) string {
	if len(id) > 40 {
		return id[:40] + "…"
	}
	return id
}
