package authority

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cordon-project/cordon/internal/broker/tool"
	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/policy"
	"github.com/cordon-project/cordon/internal/store"
	"github.com/cordon-project/cordon/internal/telemetry"
)

// Root is what the sandbox's authority (internal/gateway) gives the tool
// broker's trusted half: the sandbox's identity and policy decided with
// it as the principal. Implementations are safe for concurrent use.
type Root interface {
	Identity() crossing.Identity
	// Decide asks policy; a refusal is crossing.ErrPolicyDenied with the
	// decision that refused.
	Decide(ask crossing.Ask) (*crossing.PolicyDecision, error)
	// DecideEach returns a Decide for a list of questions that reads the
	// budget (for policies that read it) once.
	DecideEach() func(ask crossing.Ask) (*crossing.PolicyDecision, error)
	Logger() *slog.Logger
}

// Authority is the tool broker's trusted half for one sandbox: which
// tools are offered, policy on each call with its argument digest,
// replay protection, approvals bound to the exact call, the call limit,
// and the write-ahead record and receipt of every call in the store.
type Authority struct {
	Root   Root
	Store  *store.Store
	Policy *Policy
}

// Policy is the root side's configuration of the tool broker.
type Policy struct {
	// Servers are the configured upstream names.
	Servers map[string]bool
	// Allow holds each server's tool globs from the config (none: all):
	// checked here too, so a compromised gateway cannot reach a tool the
	// config does not offer.
	Allow map[string][]string
	// MaxArgumentBytes bounds a call's canonical arguments (0: the tool
	// broker's default).
	MaxArgumentBytes int
	// CallLimit bounds the workload's tool calls per Window (0: no
	// limit; a zero Window counts every call ever made).
	CallLimit int64
	Window    time.Duration
	// ApprovalTTL is how long an approval request stays open, and how
	// long an approval can be used once given.
	ApprovalTTL time.Duration
	// SkipApprovals: FULL_CONTROL_LAB — approval-required permits do not
	// wait (the receipt's policy decision still says approval_required).
	SkipApprovals bool
}

// Filter reports which of refs the configuration offers and policy lets
// the workload call (asked with no arguments), reading the budget once.
func (s *Authority) Filter(refs []tool.Ref) []bool {
	allowed := make([]bool, len(refs))
	decide := s.Root.DecideEach()
	for i, r := range refs {
		if s.Policy.Offered(r.Server, r.Tool) {
			_, err := decide(Ask(r.Server, r.Tool, ""))
			allowed[i] = err == nil
		}
	}
	return allowed
}

// Offered reports whether the config offers server's tool name.
func (tp *Policy) Offered(server, name string) bool {
	return tp.Servers[server] && tool.Allowed(tp.Allow[server], name)
}

// maxKeyBytes bounds a replay key ("key:" or "rpc:SESSION:" and the id).
const maxKeyBytes = 320

// Ask is the policy question of calling server's tool name with
// arguments of digest (none: whether it may be called at all).
func Ask(server, name, digest string) crossing.Ask {
	return crossing.Ask{Action: policy.ActionToolCall, Resource: "Tool", Target: server + "/" + name, Server: server, ArgumentDigest: digest}
}

// requestDigest binds an approval to the exact request: the tenant, the
// workload and the sandbox that asked, the tool and its canonical
// arguments. An approval is good for that sandbox only (and is revoked
// when it stops).
func requestDigest(id crossing.Identity, target string, canon []byte) string {
	b, _ := json.Marshal(struct {
		Arguments json.RawMessage `json:"arguments"`
		Sandbox   string          `json:"sandbox"`
		Tenant    string          `json:"tenant"`
		Tool      string          `json:"tool"`
		Workload  string          `json:"workload"`
	}{canon, id.SandboxID, id.Tenant, target, id.Workload})
	return tool.Digest(b)
}

// MaxPendingApprovals bounds a sandbox's approval requests waiting for a
// human at once.
const MaxPendingApprovals = 16

// Begin: policy, replay check, approval, budget, write-ahead record.
// A retransmission never consumes an approval (the replay check comes
// first when policy requires one), and a call is recorded as started
// before anything is sent. Without an approval, the replay check and the
// record are one transaction.
func (s *Authority) Begin(ctx context.Context, in tool.Begin) (tool.Began, error) {
	id := s.Root.Identity()
	if !s.Policy.Offered(in.Server, in.Tool) {
		return tool.Began{}, fmt.Errorf("%w: the configuration offers no tool %q of server %q", crossing.ErrPolicyDenied, clip(in.Tool), clip(in.Server))
	}
	maxArgs := s.Policy.MaxArgumentBytes
	if maxArgs <= 0 {
		maxArgs = tool.DefaultMaxArgumentBytes
	}
	if len(in.Arguments) > maxArgs || len(in.Key) > maxKeyBytes {
		return tool.Began{}, fmt.Errorf("%w: arguments or key over their bounds", crossing.ErrPolicyDenied)
	}
	canon, err := tool.Canonical(in.Arguments)
	if err != nil {
		return tool.Began{}, fmt.Errorf("%w: arguments: %v", crossing.ErrPolicyDenied, err)
	}
	argDigest := tool.Digest(canon)
	target := in.Server + "/" + in.Tool
	d, err := s.Root.Decide(Ask(in.Server, in.Tool, argDigest))
	if err != nil {
		return tool.Began{Policy: d}, err
	}
	var approval string
	if d.ApprovalRequired && !s.Policy.SkipApprovals {
		if in.Key != "" {
			old, err := s.Store.LookupToolCall(ctx, id.Workload, in.Key)
			switch {
			case err == nil:
				return replayOf(old, in, argDigest)
			case !errors.Is(err, store.ErrCallNotFound):
				return tool.Began{}, err
			}
		}
		reqDigest := requestDigest(id, target, canon)
		a, err := s.Store.ConsumeApproval(ctx, id.Workload, reqDigest)
		switch {
		case err == nil:
			approval = a.ID
		case errors.Is(err, store.ErrApprovalDenied):
			return tool.Began{Policy: d}, fmt.Errorf("%w: approval %s was denied", tool.ErrDenied, a.ID)
		case errors.Is(err, store.ErrApprovalNotFound), errors.Is(err, store.ErrApprovalPending):
			// The cap is counted in the request's own transaction.
			a, err = s.Store.RequestApprovalLimited(ctx, store.Approval{Workload: id.Workload, SandboxID: id.SandboxID,
				Action: policy.ActionToolCall, Target: target, Digest: reqDigest, Arguments: canon}, s.Policy.ApprovalTTL, MaxPendingApprovals)
			var limit *store.ApprovalLimitError
			if errors.As(err, &limit) {
				return tool.Began{Policy: d}, fmt.Errorf("%w: %v", tool.ErrDenied, limit)
			}
			if err != nil {
				return tool.Began{Policy: d}, fmt.Errorf("%w: %v", crossing.ErrUnavailable, err)
			}
			return tool.Began{Status: tool.StatusApprovalPending, Policy: d, Approval: &tool.Approval{ID: a.ID, Expires: a.Expires}}, nil
		default:
			return tool.Began{Policy: d}, fmt.Errorf("%w: %v", crossing.ErrUnavailable, err)
		}
	}
	var since time.Time
	if w := s.Policy.Window; w > 0 {
		// The same windows as the other budgets (store.Budget).
		secs := max(int64(w/time.Second), 1)
		since = time.Unix(time.Now().Unix()/secs*secs, 0)
	}
	c, err := s.Store.BeginToolCall(ctx, store.ToolCall{Workload: id.Workload, SandboxID: id.SandboxID, Key: in.Key,
		Server: in.Server, Tool: in.Tool, Digest: argDigest, Arguments: canon, Approval: approval, Policy: d}, s.Policy.CallLimit, since)
	var exists *store.CallExistsError
	if errors.As(err, &exists) {
		return replayOf(exists.Call, in, argDigest)
	}
	if err != nil {
		return tool.Began{Policy: d}, err
	}
	return tool.Began{Status: tool.StatusGo, Call: c.ID, Policy: d, ApprovalID: approval}, nil
}

// replayOf answers a call whose key was seen before.
func replayOf(old store.ToolCall, in tool.Begin, argDigest string) (tool.Began, error) {
	switch {
	case old.Digest != argDigest || old.Server != in.Server || old.Tool != in.Tool:
		return tool.Began{}, fmt.Errorf("%w (call %d)", tool.ErrKeyReused, old.ID)
	case old.State == store.CallStarted:
		return tool.Began{}, fmt.Errorf("%w (call %d)", tool.ErrInProgress, old.ID)
	case old.State != store.CallDone:
		return tool.Began{}, fmt.Errorf("%w (call %d); an operator must reconcile it: cordon calls list", tool.ErrQuarantined, old.ID)
	}
	return tool.Began{Status: tool.StatusReplay, Call: old.ID, Policy: old.Policy, Result: old.Result, Receipt: old.ReceiptID}, nil
}

// Await waits (bounded) for this sandbox's approval id to be decided
// and returns its state. Another sandbox's approval, even of the same
// workload, is not found: it is good for that sandbox only, and its
// state says what the sibling asks for and when it is answered.
func (s *Authority) Await(ctx context.Context, id string, wait time.Duration) (string, error) {
	wait = min(max(wait, 0), 10*time.Second)
	deadline := time.Now().Add(wait)
	me := s.Root.Identity()
	for {
		a, err := s.Store.Approval(ctx, id)
		if err != nil || a.Workload != me.Workload || a.SandboxID != me.SandboxID {
			return "", fmt.Errorf("%w: approval %s not found", tool.ErrDenied, clip(id))
		}
		if a.State != store.ApprovalPending || !time.Now().Before(deadline) {
			return a.State, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// clip bounds an identifier echoed in an error.
func clip(id string) string {
	if len(id) > 40 {
		return id[:40] + "…"
	}
	return id
}

// End records the outcome and the receipt, with the identity, key,
// policy decision and approval this side stored at begin.
func (s *Authority) End(ctx context.Context, e tool.End) (int64, error) {
	me := s.Root.Identity()
	rc := e.Receipt
	rc.Identity = me
	rc.Broker, rc.Action = tool.Name, "tools/call"
	rc.Decision = crossing.Allow
	if e.Result != nil && !json.Valid(e.Result) {
		return 0, errors.New("tool_end: result is not JSON")
	}
	rc.ResultDigest = ""
	if e.Result != nil {
		rc.ResultDigest = tool.Digest(e.Result)
	}
	// The trace ids are the root side's span of this call, never the
	// broker's (telemetry.StampFrom replaces them).
	telemetry.StampFrom(ctx, &rc)
	ambiguous := e.Outcome == tool.OutcomeAmbiguous
	id, call, err := s.Store.EndToolCall(ctx, e.Call, me.SandboxID, e.Outcome, ambiguous, e.Result, rc)
	if err != nil {
		return 0, err
	}
	if call.Approval != "" {
		if err := s.Store.SetApprovalReceipt(ctx, call.Approval, id); err != nil {
			s.Root.Logger().Warn("link approval to its receipt", "approval", call.Approval, "err", err)
		}
	}
	return id, nil
}
