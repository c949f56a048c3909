package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cordon-project/cordon/internal/broker/tool"
	toolauthority "github.com/cordon-project/cordon/internal/broker/tool/authority"
	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/gateway/wire"
	"github.com/cordon-project/cordon/internal/telemetry"
	"golang.org/x/sync/semaphore"
)

// maxToolOps bounds the tool operations the privileged side serves at
// once (each may wait for an approval).
const maxToolOps = 64

// ToolPolicy is the root side's configuration of the tool broker
// (internal/broker/tool/authority).
type ToolPolicy = toolauthority.Policy

// MaxPendingApprovals bounds a sandbox's approval requests waiting for a
// human at once.
const MaxPendingApprovals = toolauthority.MaxPendingApprovals

// toolHalf is the tool broker's trusted half of this sandbox.
func (s *Authority) toolHalf() *toolauthority.Authority {
	s.halvesOnce.Do(s.initHalves)
	return s.toolAuth
}

func (s *Authority) handleTool(req call) reply {
	resp := reply{ID: req.ID}
	if s.Tools == nil {
		resp.Err, resp.Kind = "no tool servers are configured", wire.KindUnavailable
		return resp
	}
	ctx := context.Background()
	var err error
	switch req.Op {
	case "tool_filter":
		// Policy work per listed tool, no receipt: rate only, one token
		// per tool.DefaultMaxTools tools, and never more tools than the
		// configured servers can offer (the gateway lists at most
		// tool.DefaultMaxTools of each).
		if most := len(s.Tools.Servers) * tool.DefaultMaxTools; len(req.Tools) > most {
			err = fmt.Errorf("%w: a filter of %d tools; the configured servers offer at most %d", crossing.ErrPolicyDenied, len(req.Tools), most)
			break
		}
		if err = s.receipts.rated(time.Now(), 1+(len(req.Tools)-1)/tool.DefaultMaxTools); err != nil {
			break
		}
		resp.Allowed = s.toolHalf().Filter(req.Tools)
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
		b, err = s.toolHalf().Begin(ctx, *req.Begin)
		resp.Began = &b
		s.toolBegun(b, err)
		s.traceBegun(*req.Begin, b, err)
	case "tool_await":
		resp.ApprovalState, err = s.toolHalf().Await(ctx, req.Approval, req.Wait)
		if err == nil {
			s.Trace.ApprovalDecided(req.Approval, resp.ApprovalState)
		}
	case "tool_end":
		if req.End == nil {
			err = errors.New("tool_end without an outcome")
			break
		}
		// The call's span: its ids go into the receipt the trusted
		// half writes (telemetry.StampFrom).
		sp := s.Trace.ToolEnded(req.End.Call)
		end := *req.End
		// The receipt's fields this side sets (as record does): no rule
		// on an allowed call, this side's configuration, a bounded time.
		end.Receipt.Rule, end.Receipt.ConfigDigest = "", s.ConfigDigest
		s.boundTime(&end.Receipt)
		resp.ReceiptID, err = s.toolHalf().End(telemetry.With(ctx, sp), end)
		sp.End(&crossing.Receipt{Decision: crossing.Allow, Action: "tools/call", Reason: req.End.Outcome}, resp.ReceiptID, err)
		s.toolEnded(req.End.Call, err == nil)
	default:
		err = fmt.Errorf("unknown authority op %q", req.Op)
	}
	if err != nil {
		resp.Err, resp.Kind = err.Error(), wire.Kind(err)
	}
	return resp
}

// traceBegun starts the span of a tool call that goes ahead, or the span
// of its wait for an operator's approval (internal/telemetry). The names
// are the ones the configuration offers (Begin refused any other).
func (s *Authority) traceBegun(in tool.Begin, b tool.Began, err error) {
	switch {
	case err != nil:
	case b.Status == tool.StatusGo:
		s.Trace.ToolBegun(b.Call, in.Server, in.Tool, b.ApprovalID)
	case b.Status == tool.StatusApprovalPending && b.Approval != nil:
		s.Trace.ApprovalPending(b.Approval.ID, in.Server, in.Tool)
	}
}

// clipID bounds an identifier echoed in an error.
func clipID(id string) string {
	if len(id) > 40 {
		return id[:40] + "…"
	}
	return id
}

// toolChannel is the tool broker's channel: its calls' begin and end,
// the filter of tools/list and approval waits, each served on its own
// (it may wait for an approval), and the receipts of its refusals.
var toolChannel = channel{
	op: func(op string) (string, bool) {
		switch op {
		case tool.OpFilter, tool.OpBegin, tool.OpAwait, tool.OpEnd:
			return "tool_" + op, true
		case crossing.OpRecord:
			return op, true
		}
		return "", false
	},
	decode: func(req *call, body []byte) error {
		switch req.Op {
		case "tool_filter":
			var b tool.FilterRequest
			err := json.Unmarshal(body, &b)
			req.Tools = b.Tools
			return err
		case "tool_begin":
			req.Begin = new(tool.Begin)
			return json.Unmarshal(body, req.Begin)
		case "tool_await":
			var b tool.AwaitRequest
			err := json.Unmarshal(body, &b)
			req.Approval, req.Wait = b.Approval, b.Wait
			return err
		case "tool_end":
			req.End = new(tool.End)
			return json.Unmarshal(body, req.End)
		}
		return decodeMetered(req, body) // record
	},
	encode: func(req call, resp reply) any {
		switch req.Op {
		case "tool_filter":
			return tool.FilterResponse{Allowed: resp.Allowed}
		case "tool_begin":
			if resp.Began != nil {
				return resp.Began
			}
		case "tool_await":
			return tool.AwaitResponse{State: resp.ApprovalState}
		case "tool_end":
			return tool.EndResponse{Receipt: resp.ReceiptID}
		}
		return nil
	},
	alone: func(s *Authority, req call) (func(call) reply, *semaphore.Weighted, string) {
		if req.Op == crossing.OpRecord {
			return nil, nil, "" // a refusal's receipt: in the batch
		}
		// Tool operations may wait (for an approval): never in the batch.
		return s.handleTool, s.toolOps, "tool operations"
	},
}
