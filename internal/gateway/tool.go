package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cordon-project/cordon/internal/broker/tool"
	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/gateway/wire"
	"github.com/cordon-project/cordon/internal/policy"
	"github.com/cordon-project/cordon/internal/store"
)

// maxToolOps bounds the tool operations the privileged side serves at
// once (each may wait for an approval).
const maxToolOps = 64

// ToolPolicy is the privileged side's configuration of the tool broker.
type ToolPolicy struct {
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

func (s *Authority) handleTool(req call) reply {
	resp := reply{ID: req.ID}
	if s.Tools == nil {
		resp.Err, resp.Kind = "no tool servers are configured", "unavailable"
		return resp
	}
	ctx := context.Background()
	var err error
	switch req.Op {
	case "tool_filter":
		// Policy work per listed tool, no receipt: rate only.
		if err = s.receipts.rated(time.Now()); err != nil {
			break
		}
		resp.Allowed = make([]bool, len(req.Tools))
		read := s.budgetOnce() // one budget read for the whole list
		for i, r := range req.Tools {
			if s.Tools.offered(r.Server, r.Tool) {
				_, derr := s.decideIn(toolAsk(r.Server, r.Tool, ""), read)
				resp.Allowed[i] = derr == nil
			}
		}
	case "tool_begin":
		if req.Begin == nil {
			err = errors.New("tool_begin without a call")
			break
		}
		// A call that goes ahead writes its receipt at tool_end: it
		// takes a slot of the receipt budget (crossbudget.go).
		if err = s.admitCrossing(true, s.recordNow); err != nil {
			break
		}
		var b tool.Began
		b, err = s.beginTool(ctx, *req.Begin)
		resp.Began = &b
		s.toolBegun(b, err)
	case "tool_await":
		resp.ApprovalState, err = s.awaitApproval(ctx, req.Approval, req.Wait)
	case "tool_end":
		if req.End == nil {
			err = errors.New("tool_end without an outcome")
			break
		}
		resp.ReceiptID, err = s.endTool(ctx, *req.End)
		s.toolEnded(req.End.Call, err == nil)
	default:
		err = fmt.Errorf("unknown ledger op %q", req.Op)
	}
	if err != nil {
		resp.Err, resp.Kind = err.Error(), wire.Kind(err)
	}
	return resp
}

// offered reports whether the config offers server's tool name.
func (tp *ToolPolicy) offered(server, name string) bool {
	return tp.Servers[server] && tool.Allowed(tp.Allow[server], name)
}

// maxKeyBytes bounds a replay key ("key:" or "rpc:SESSION:" and the id).
const maxKeyBytes = 320

func toolAsk(server, name, digest string) crossing.Ask {
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

// beginTool: policy, replay check, approval, budget, write-ahead record.
// A retransmission never consumes an approval (the replay check comes
// first when policy requires one), and a call is recorded as started
// before anything is sent. Without an approval, the replay check and the
// record are one transaction.
func (s *Authority) beginTool(ctx context.Context, in tool.Begin) (tool.Began, error) {
	if !s.Tools.offered(in.Server, in.Tool) {
		return tool.Began{}, fmt.Errorf("%w: the configuration offers no tool %q of server %q", crossing.ErrPolicyDenied, clipID(in.Tool), clipID(in.Server))
	}
	maxArgs := s.Tools.MaxArgumentBytes
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
	d, err := s.decide(toolAsk(in.Server, in.Tool, argDigest))
	if err != nil {
		return tool.Began{Policy: d}, err
	}
	var approval string
	if d.ApprovalRequired && !s.Tools.SkipApprovals {
		if in.Key != "" {
			old, err := s.Store.LookupToolCall(ctx, s.ID.Workload, in.Key)
			switch {
			case err == nil:
				return replayOf(old, in, argDigest)
			case !errors.Is(err, store.ErrCallNotFound):
				return tool.Began{}, err
			}
		}
		reqDigest := requestDigest(s.ID, target, canon)
		a, err := s.Store.ConsumeApproval(ctx, s.ID.Workload, reqDigest)
		switch {
		case err == nil:
			approval = a.ID
		case errors.Is(err, store.ErrApprovalDenied):
			return tool.Began{Policy: d}, fmt.Errorf("%w: approval %s was denied", tool.ErrDenied, a.ID)
		case errors.Is(err, store.ErrApprovalNotFound), errors.Is(err, store.ErrApprovalPending):
			// The cap is counted in the request's own transaction.
			a, err = s.Store.RequestApprovalLimited(ctx, store.Approval{Workload: s.ID.Workload, SandboxID: s.ID.SandboxID,
				Action: policy.ActionToolCall, Target: target, Digest: reqDigest, Arguments: canon}, s.Tools.ApprovalTTL, MaxPendingApprovals)
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
	if w := s.Tools.Window; w > 0 {
		// The same windows as the other budgets (store.Budget).
		secs := max(int64(w/time.Second), 1)
		since = time.Unix(time.Now().Unix()/secs*secs, 0)
	}
	c, err := s.Store.BeginToolCall(ctx, store.ToolCall{Workload: s.ID.Workload, SandboxID: s.ID.SandboxID, Key: in.Key,
		Server: in.Server, Tool: in.Tool, Digest: argDigest, Arguments: canon, Approval: approval, Policy: d}, s.Tools.CallLimit, since)
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

// awaitApproval waits (bounded) for this workload's approval id to be
// decided and returns its state.
func (s *Authority) awaitApproval(ctx context.Context, id string, wait time.Duration) (string, error) {
	wait = min(max(wait, 0), 10*time.Second)
	deadline := time.Now().Add(wait)
	for {
		a, err := s.Store.Approval(ctx, id)
		if err != nil || a.Workload != s.ID.Workload {
			return "", fmt.Errorf("%w: approval %s not found", tool.ErrDenied, clipID(id))
		}
		if a.State != store.ApprovalPending || !time.Now().Before(deadline) {
			return a.State, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func clipID(id string) string {
	if len(id) > 40 {
		return id[:40] + "…"
	}
	return id
}

// endTool records the outcome and the receipt, with the identity, key,
// policy decision and approval this side stored at begin.
func (s *Authority) endTool(ctx context.Context, e tool.End) (int64, error) {
	rc := e.Receipt
	rc.Identity = s.ID
	rc.Broker, rc.Action = tool.Name, "tools/call"
	rc.Decision = crossing.Allow
	if e.Result != nil && !json.Valid(e.Result) {
		return 0, errors.New("tool_end: result is not JSON")
	}
	rc.ResultDigest = ""
	if e.Result != nil {
		rc.ResultDigest = tool.Digest(e.Result)
	}
	ambiguous := e.Outcome == tool.OutcomeAmbiguous
	id, call, err := s.Store.EndToolCall(ctx, e.Call, s.ID.SandboxID, e.Outcome, ambiguous, e.Result, rc)
	if err != nil {
		return 0, err
	}
	if call.Approval != "" {
		if err := s.Store.SetApprovalReceipt(ctx, call.Approval, id); err != nil {
			s.log().Warn("link approval to its receipt", "approval", call.Approval, "err", err)
		}
	}
	return id, nil
}

func (s *Authority) log() *slog.Logger {
	if s.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Logger
}
