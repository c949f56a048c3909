package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/broker/tool"
	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/policy"
	"github.com/cordon-project/cordon/internal/store"
)

const testPolicy = `
@id("models")
permit(principal, action == Action::"model.invoke", resource);
@id("no-evil-model")
forbid(principal, action == Action::"model.invoke", resource == Model::"evil");
@id("tools")
permit(principal, action == Action::"tool.call", resource)
when { resource.server == "fs" };
@id("write-needs-approval")
@approval("required")
permit(principal, action == Action::"tool.call", resource == Tool::"fs/write");
@id("no-delete")
forbid(principal, action == Action::"tool.call", resource == Tool::"fs/delete");
`

func policyServer(t *testing.T) (*Authority, *testClient, *store.Store) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "p.cedar")
	if err := os.WriteFile(f, []byte(testPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	set, err := policy.Load(f)
	if err != nil {
		t.Fatal(err)
	}
	st := testStore(t)
	srv := &Authority{Store: st, ID: crossing.Identity{Workload: "w", Tenant: "t", Purpose: "p", SandboxID: "sb1"}, Policy: set,
		Tools: &ToolPolicy{Servers: map[string]bool{"fs": true, "other": true}, ApprovalTTL: time.Minute}}
	return srv, connect(t, srv), st
}

// Policy decides on the privileged side, with the sandbox's identity; a
// forbid wins; the receipt carries this side's decision.
func TestAuthorityAsksPolicy(t *testing.T) {
	srv, c, st := policyServer(t)
	ctx := context.Background()
	ask := func(model string) context.Context {
		return crossing.WithAsk(ctx, crossing.Ask{Action: "model.invoke", Resource: "Model", Target: model})
	}
	r, _, err := c.Reserve(ask("good"), crossing.Identity{}, "model", crossing.Amount{Requests: 1}, 0)
	if err != nil || r.Policy == nil || r.Policy.Determining[0] != "models" || r.Policy.Digest != srv.Policy.Digest() {
		t.Fatalf("allowed reserve: %+v %v", r.Policy, err)
	}
	// The gateway reports a forged decision; the receipt gets the real one.
	forged := crossing.Receipt{Broker: "model", Decision: crossing.Allow, Policy: &crossing.PolicyDecision{Digest: "sha256:forged", Determining: []string{"forged"}}}
	if _, err := c.SettleRecord(ctx, r, crossing.Amount{Requests: 1}, forged); err != nil {
		t.Fatal(err)
	}
	rcs, _ := st.Receipts(ctx, store.ReceiptFilter{})
	if p := rcs[len(rcs)-1].Policy; p == nil || p.Digest != srv.Policy.Digest() || p.Determining[0] != "models" {
		t.Fatalf("receipt policy %+v", p)
	}
	r, _, err = c.Reserve(ask("evil"), crossing.Identity{}, "model", crossing.Amount{Requests: 1}, 0)
	if !errors.Is(err, crossing.ErrPolicyDenied) || r.Policy == nil || r.Policy.Determining[0] != "no-evil-model" {
		t.Fatalf("forbidden model: %+v %v", r.Policy, err)
	}
	// No question, or the wrong question for the broker: denied.
	if _, _, err := c.Reserve(ctx, crossing.Identity{}, "model", crossing.Amount{Requests: 1}, 0); !errors.Is(err, crossing.ErrPolicyDenied) {
		t.Fatalf("reserve without a question: %v", err)
	}
	egressAsModel := crossing.WithAsk(ctx, crossing.Ask{Action: "model.invoke", Resource: "Model", Target: "good"})
	if _, _, err := c.Reserve(egressAsModel, crossing.Identity{}, "egress", crossing.Amount{Connections: 1}, 0); !errors.Is(err, crossing.ErrPolicyDenied) {
		t.Fatalf("egress asking a model question: %v", err)
	}
	// Tunnel chunks (no new connection) ask no question, but are held
	// only inside an open connection (TestByteChunksNeedAnOpenConnection):
	// here there is none.
	if _, _, err := c.Reserve(ctx, crossing.Identity{}, "egress", crossing.Amount{EgressBytes: 10}, 0); !errors.Is(err, crossing.ErrPolicyDenied) {
		t.Fatalf("chunk reserve without a connection: %v", err)
	}
	// Nothing permits egress in this policy: default deny.
	hostAsk := crossing.WithAsk(ctx, crossing.Ask{Action: "egress.connect", Resource: "Host", Target: "example.com", Port: 443})
	if _, _, err := c.Reserve(hostAsk, crossing.Identity{}, "egress", crossing.Amount{Connections: 1}, 0); !errors.Is(err, crossing.ErrPolicyDenied) {
		t.Fatalf("egress without a permit: %v", err)
	}
}

func TestToolAuthorityFilterBeginEndReplay(t *testing.T) {
	_, c, st := policyServer(t)
	ctx := context.Background()
	ok, err := c.Filter(ctx, []tool.Ref{{Server: "fs", Tool: "read"}, {Server: "fs", Tool: "delete"}, {Server: "other", Tool: "x"}, {Server: "nope", Tool: "x"}})
	if err != nil || len(ok) != 4 || !ok[0] || ok[1] || ok[2] || ok[3] {
		t.Fatalf("filter = %v %v", ok, err)
	}
	args := json.RawMessage(`{"b":1, "a":"x"}`)
	began, err := c.Begin(ctx, tool.Begin{Key: "k1", Server: "fs", Tool: "read", Arguments: args})
	if err != nil || began.Status != tool.StatusGo || began.Call == 0 {
		t.Fatalf("begin: %+v %v", began, err)
	}
	// A retransmission while in flight is refused.
	if _, err := c.Begin(ctx, tool.Begin{Key: "k1", Server: "fs", Tool: "read", Arguments: args}); !errors.Is(err, tool.ErrInProgress) {
		t.Fatalf("in-flight retransmission: %v", err)
	}
	result := json.RawMessage(`{"content":[{"type":"text","text":"hello"}]}`)
	rid, err := c.End(ctx, tool.End{Call: began.Call, Outcome: tool.OutcomeOK, Result: result,
		Receipt: crossing.Receipt{Action: "tools/call", Identity: crossing.Identity{Workload: "forged"}, CallKey: "forged"}})
	if err != nil || rid == 0 {
		t.Fatalf("end: %d %v", rid, err)
	}
	rcs, _ := st.Receipts(ctx, store.ReceiptFilter{})
	got := rcs[len(rcs)-1]
	if got.Identity.Workload != "w" || got.CallKey != "k1" || got.Target != "fs/read" || got.ResultDigest != tool.Digest(result) ||
		got.RequestDigest != tool.Digest([]byte(`{"a":"x","b":1}`)) || got.Policy == nil {
		t.Fatalf("receipt %+v", got)
	}
	// The retransmission now replays: same result, same receipt.
	again, err := c.Begin(ctx, tool.Begin{Key: "k1", Server: "fs", Tool: "read", Arguments: json.RawMessage(`{"a":"x","b":1}`)})
	if err != nil || again.Status != tool.StatusReplay || again.Receipt != rid || string(again.Result) != string(result) {
		t.Fatalf("replay: %+v %v", again, err)
	}
	// Same key, other arguments: refused.
	if _, err := c.Begin(ctx, tool.Begin{Key: "k1", Server: "fs", Tool: "read", Arguments: json.RawMessage(`{}`)}); !errors.Is(err, tool.ErrKeyReused) {
		t.Fatalf("key reuse: %v", err)
	}
	// Policy forbids delete; an unknown server is refused.
	if _, err := c.Begin(ctx, tool.Begin{Server: "fs", Tool: "delete", Arguments: args}); !errors.Is(err, crossing.ErrPolicyDenied) {
		t.Fatalf("forbidden tool: %v", err)
	}
	if _, err := c.Begin(ctx, tool.Begin{Server: "nope", Tool: "x", Arguments: args}); !errors.Is(err, crossing.ErrPolicyDenied) {
		t.Fatalf("unknown server: %v", err)
	}
	// An ambiguous outcome quarantines the call; its retransmission is refused.
	b2, _ := c.Begin(ctx, tool.Begin{Key: "k2", Server: "fs", Tool: "read", Arguments: args})
	if _, err := c.End(ctx, tool.End{Call: b2.Call, Outcome: tool.OutcomeAmbiguous}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Begin(ctx, tool.Begin{Key: "k2", Server: "fs", Tool: "read", Arguments: args}); !errors.Is(err, tool.ErrQuarantined) {
		t.Fatalf("quarantined retransmission: %v", err)
	}
	q, _ := st.ToolCalls(ctx, store.ToolCallFilter{State: store.CallQuarantined})
	if len(q) != 1 || q[0].Key != "k2" {
		t.Fatalf("quarantined calls %+v", q)
	}
	// A call ended twice is refused (no double receipt).
	if _, err := c.End(ctx, tool.End{Call: began.Call, Outcome: tool.OutcomeOK, Result: result}); err == nil {
		t.Fatal("second end accepted")
	}
}

func TestToolAuthorityApprovalSingleUse(t *testing.T) {
	_, c, st := policyServer(t)
	ctx := context.Background()
	args := json.RawMessage(`{"path":"/a","data":"x"}`)
	b, err := c.Begin(ctx, tool.Begin{Server: "fs", Tool: "write", Arguments: args})
	if err != nil || b.Status != tool.StatusApprovalPending || b.Approval == nil {
		t.Fatalf("begin: %+v %v", b, err)
	}
	if st, err := c.AwaitApproval(ctx, b.Approval.ID, 200*time.Millisecond); err != nil || st != store.ApprovalPending {
		t.Fatalf("await: %s %v", st, err)
	}
	// Waiting on a forged id is refused.
	if _, err := c.AwaitApproval(ctx, "apr_000000000000000000000000", 0); !errors.Is(err, tool.ErrDenied) {
		t.Fatalf("forged id: %v", err)
	}
	if _, err := st.DecideApproval(ctx, b.Approval.ID, true, "test"); err != nil {
		t.Fatal(err)
	}
	// Other arguments are not covered by the approval.
	if b2, _ := c.Begin(ctx, tool.Begin{Server: "fs", Tool: "write", Arguments: json.RawMessage(`{"path":"/b","data":"x"}`)}); b2.Status != tool.StatusApprovalPending {
		t.Fatalf("approval covered other arguments: %+v", b2)
	}
	go1, err := c.Begin(ctx, tool.Begin{Server: "fs", Tool: "write", Arguments: args})
	if err != nil || go1.Status != tool.StatusGo || go1.ApprovalID != b.Approval.ID {
		t.Fatalf("approved begin: %+v %v", go1, err)
	}
	rid, err := c.End(ctx, tool.End{Call: go1.Call, Outcome: tool.OutcomeOK, Result: json.RawMessage(`{"content":[]}`)})
	if err != nil {
		t.Fatal(err)
	}
	if a, _ := st.Approval(ctx, b.Approval.ID); a.State != store.ApprovalConsumed || a.ReceiptID != rid {
		t.Fatalf("approval after use: %+v", a)
	}
	// Single use: the same request needs a new approval.
	again, err := c.Begin(ctx, tool.Begin{Server: "fs", Tool: "write", Arguments: args})
	if err != nil || again.Status != tool.StatusApprovalPending || again.Approval.ID == b.Approval.ID {
		t.Fatalf("consumed approval reused: %+v %v", again, err)
	}
	// A denial is final for that request until it expires.
	if _, err := st.DecideApproval(ctx, again.Approval.ID, false, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Begin(ctx, tool.Begin{Server: "fs", Tool: "write", Arguments: args}); !errors.Is(err, tool.ErrDenied) {
		t.Fatalf("denied request: %v", err)
	}
}

// FuzzToolAuthorityRequest: whatever a compromised gateway sends as a tool
// operation, the privileged side answers without crashing and never ends,
// replays or approves another sandbox's call.
func FuzzToolAuthorityRequest(f *testing.F) {
	f.Add([]byte(`{"id":1,"op":"tool_begin","begin":{"key":"k","server":"fs","tool":"read","arguments":{"a":1}}}`))
	f.Add([]byte(`{"id":2,"op":"tool_end","end":{"call":1,"outcome":"ok","result":{"content":[]}}}`))
	f.Add([]byte(`{"id":3,"op":"tool_filter","tools":[{"server":"fs","tool":"delete"}]}`))
	f.Add([]byte(`{"id":4,"op":"tool_await","approval":"apr_000000000000000000000000","wait":1}`))
	f.Add([]byte(`{"id":5,"op":"tool_begin","begin":{"key":"victim-key","server":"fs","tool":"read","arguments":{}}}`))
	srv, _, st := policyServer(&testing.T{})
	ctx := context.Background()
	victim, err := st.BeginToolCall(ctx, store.ToolCall{Workload: "w", SandboxID: "victim", Key: "victim-key", Server: "fs", Tool: "read",
		Digest: tool.Digest([]byte(`{"secret":1}`)), Arguments: json.RawMessage(`{"secret":1}`)}, 0, time.Time{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var req call
		if json.Unmarshal(b, &req) != nil || !strings.HasPrefix(req.Op, "tool_") {
			return
		}
		if req.Wait > 50*time.Millisecond {
			req.Wait = 50 * time.Millisecond
		}
		resp := srv.handleTool(req)
		if resp.Began != nil && resp.Began.Status == tool.StatusReplay && strings.Contains(string(resp.Began.Result), "secret") {
			t.Fatalf("replayed another sandbox's call: %+v", resp.Began)
		}
		c, err := st.LookupToolCall(ctx, "w", "victim-key")
		if err != nil || c.ID != victim.ID || c.State != store.CallStarted {
			t.Fatalf("another sandbox's call changed: %+v %v", c, err)
		}
	})
}

// What a compromised gateway might ask is checked again here: tools the
// config does not offer, oversized arguments or keys, a replay key used
// for another tool, an allowed tool receipt outside tool_end.
func TestToolAuthorityRechecksTheGateway(t *testing.T) {
	srv, c, _ := policyServer(t)
	srv.Tools.Allow = map[string][]string{"fs": {"read", "write"}}
	srv.Tools.MaxArgumentBytes = 64
	ctx := context.Background()
	if _, err := c.Begin(ctx, tool.Begin{Server: "fs", Tool: "list", Arguments: json.RawMessage(`{}`)}); !errors.Is(err, crossing.ErrPolicyDenied) {
		t.Fatalf("tool outside the allow globs: %v", err)
	}
	if ok, _ := c.Filter(ctx, []tool.Ref{{Server: "fs", Tool: "list"}}); len(ok) != 1 || ok[0] {
		t.Fatalf("filter offered a tool outside the allow globs: %v", ok)
	}
	big := json.RawMessage(`{"a":"` + strings.Repeat("x", 100) + `"}`)
	if _, err := c.Begin(ctx, tool.Begin{Server: "fs", Tool: "read", Arguments: big}); !errors.Is(err, crossing.ErrPolicyDenied) {
		t.Fatalf("oversized arguments: %v", err)
	}
	if _, err := c.Begin(ctx, tool.Begin{Key: strings.Repeat("k", 400), Server: "fs", Tool: "read", Arguments: json.RawMessage(`{}`)}); !errors.Is(err, crossing.ErrPolicyDenied) {
		t.Fatalf("oversized key: %v", err)
	}
	b, err := c.Begin(ctx, tool.Begin{Key: "same", Server: "fs", Tool: "read", Arguments: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.End(ctx, tool.End{Call: b.Call, Outcome: tool.OutcomeOK, Result: json.RawMessage(`{"content":[]}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Begin(ctx, tool.Begin{Key: "same", Server: "fs", Tool: "write", Arguments: json.RawMessage(`{}`)}); !errors.Is(err, tool.ErrKeyReused) {
		t.Fatalf("replay key used for another tool: %v", err)
	}
	forged := crossing.Receipt{Broker: tool.Name, Decision: crossing.Allow, Target: "fs/write", Approval: "apr_x"}
	if err := c.Record(ctx, forged); err == nil {
		t.Fatal("an allowed tool receipt was recorded outside tool_end")
	}
}

// An approval is bound to the sandbox that asked: another sandbox of the
// same workload cannot use it; a sandbox cannot pile up requests.
func TestToolAuthorityApprovalBoundToSandbox(t *testing.T) {
	srv, c, st := policyServer(t)
	ctx := context.Background()
	args := json.RawMessage(`{"path":"/a"}`)
	b, err := c.Begin(ctx, tool.Begin{Server: "fs", Tool: "write", Arguments: args})
	if err != nil || b.Status != tool.StatusApprovalPending {
		t.Fatalf("begin: %+v %v", b, err)
	}
	if _, err := st.DecideApproval(ctx, b.Approval.ID, true, "test"); err != nil {
		t.Fatal(err)
	}
	other := &Authority{Store: st, ID: crossing.Identity{Workload: srv.ID.Workload, Tenant: srv.ID.Tenant, SandboxID: "sb2"}, Policy: srv.Policy, Tools: srv.Tools}
	oc := connect(t, other)
	if ob, err := oc.Begin(ctx, tool.Begin{Server: "fs", Tool: "write", Arguments: args}); err != nil || ob.Status != tool.StatusApprovalPending {
		t.Fatalf("another sandbox used the approval: %+v %v", ob, err)
	}
	if g, err := c.Begin(ctx, tool.Begin{Server: "fs", Tool: "write", Arguments: args}); err != nil || g.Status != tool.StatusGo {
		t.Fatalf("the asking sandbox: %+v %v", g, err)
	}
	for i := range MaxPendingApprovals + 1 {
		_, err = c.Begin(ctx, tool.Begin{Server: "fs", Tool: "write", Arguments: json.RawMessage(`{"n":` + strconv.Itoa(i) + `}`)})
	}
	if !errors.Is(err, tool.ErrDenied) {
		t.Fatalf("request past the cap: %v", err)
	}
}
