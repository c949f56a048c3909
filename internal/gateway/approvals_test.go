package gateway

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/broker/ingress"
	"github.com/cordon-project/cordon/internal/broker/state"
	"github.com/cordon-project/cordon/internal/broker/tool"
	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/policy"
	"github.com/cordon-project/cordon/internal/store"
)

// approvalPolicy requires an approval on every action but tool calls
// (tool_test.go covers those); controlPolicy is the same set
// without the annotations.
const approvalPolicy = `
@id("models")
@approval("required")
permit(principal, action == Action::"model.invoke", resource);
@id("egress")
@approval("required")
permit(principal, action == Action::"egress.connect", resource == Host::"api.example.com");
@id("egress-sandbox")
@approval("required")
@approval_scope("sandbox")
permit(principal, action == Action::"egress.connect", resource == Host::"pkg.example.com");
@id("state")
@approval("required")
permit(principal, action in [Action::"state.read", Action::"state.write"], resource);
@id("ingress")
@approval("required")
permit(principal, action == Action::"ingress.connect", resource);
`

var controlPolicy = strings.NewReplacer(`@approval("required")`, "", `@approval_scope("sandbox")`, "").Replace(approvalPolicy)

var apprID = crossing.Identity{Workload: "w", Tenant: "t", Purpose: "p", SandboxID: "sb-appr"}

func approvalServer(t *testing.T, st *store.Store, text string, ttl time.Duration) (*Authority, *testClient) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "approvals.cedar")
	if err := os.WriteFile(f, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	set, err := policy.Load(f)
	if err != nil {
		t.Fatal(err)
	}
	srv := &Authority{Store: st, ID: apprID, Policy: set, State: testState,
		Tools: &ToolPolicy{Servers: map[string]bool{}, ApprovalTTL: ttl}, ingress: newIngressGate(approvalRoutes)}
	return srv, connect(t, srv)
}

// crosser makes one crossing of an action, as the gateway process does:
// variant picks the exact request (0, 1, 2, … are different requests of
// the same action: another body, another port, another value). It
// returns the approval the crossing named, and the receipt the store
// holds for it when it went through.
type crosser func(t *testing.T, c *testClient, st *store.Store, variant int) (ref *crossing.ApprovalRef, rc *crossing.Receipt, err error)

func lastReceipt(t *testing.T, st *store.Store) *crossing.Receipt {
	t.Helper()
	rcs, err := st.Receipts(context.Background(), store.ReceiptFilter{})
	if err != nil || len(rcs) == 0 {
		t.Fatalf("receipts = %v, %v", rcs, err)
	}
	return &rcs[len(rcs)-1]
}

func modelCrossing(t *testing.T, c *testClient, st *store.Store, variant int) (*crossing.ApprovalRef, *crossing.Receipt, error) {
	ctx := context.Background()
	body := fmt.Sprintf(`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hello %d"}]}`, variant)
	dg := digestOf(body)
	ask := crossing.Ask{Action: "model.invoke", Resource: "Model", Target: "m", RequestDigest: dg, RequestBytes: int64(len(body)), Operation: "anthropic.messages"}
	r, _, err := c.Reserve(crossing.WithAsk(ctx, ask), crossing.Identity{}, "model", crossing.Amount{Requests: 1}, 0)
	if err != nil {
		return r.Approval, nil, err
	}
	// The gateway claims another approval in its receipt: this side's wins.
	rc := crossing.Receipt{Broker: "model", Action: "anthropic.messages", Target: "m", RequestDigest: dg, Decision: crossing.Allow, Approval: "apr_ffffffffffffffffffffffff"}
	if _, err := c.SettleRecord(ctx, r, crossing.Amount{Requests: 1}, rc); err != nil {
		t.Fatal(err)
	}
	return r.Approval, lastReceipt(t, st), nil
}

func egressCrossing(host string) crosser {
	return func(t *testing.T, c *testClient, st *store.Store, variant int) (*crossing.ApprovalRef, *crossing.Receipt, error) {
		ctx := context.Background()
		port := 443 + variant
		ask := crossing.Ask{Action: "egress.connect", Resource: "Host", Target: host, Port: port}
		r, _, err := c.Reserve(crossing.WithAsk(ctx, ask), crossing.Identity{}, "egress", crossing.Amount{Connections: 1}, 0)
		if err != nil {
			return r.Approval, nil, err
		}
		if _, err := c.Settle(ctx, r, crossing.Amount{Connections: 1}); err != nil {
			t.Fatal(err)
		}
		rc := crossing.Receipt{Broker: "egress", Action: "connect", Target: fmt.Sprintf("%s:%d", host, port), Decision: crossing.Allow}
		if r.Approval != nil {
			rc.Approval = r.Approval.ID
		}
		if err := c.Record(ctx, rc); err != nil {
			t.Fatal(err)
		}
		return r.Approval, lastReceipt(t, st), nil
	}
}

func stateCrossing(op string) crosser {
	return func(t *testing.T, c *testClient, st *store.Store, variant int) (*crossing.ApprovalRef, *crossing.Receipt, error) {
		ctx := context.Background()
		if op == state.OpGet {
			// The entry exists: the read goes through when allowed.
			w := store.StateWrite{Key: fmt.Sprintf("notes/%d", variant), Value: []byte("x"), SandboxID: "seed"}
			if _, _, _, err := st.PutState(ctx, StateScope(apprID), w, store.StateLimits{QuotaBytes: 1 << 20, QuotaEntries: 100}, nil); err != nil {
				t.Fatal(err)
			}
		}
		r := state.Request{Op: op, Key: "notes/a"}
		switch op {
		case state.OpPut:
			r.Value = []byte(fmt.Sprintf("value %d", variant))
		case state.OpGet:
			r.Key = fmt.Sprintf("notes/%d", variant)
		}
		resp, err := c.State(ctx, r)
		if err != nil {
			return resp.Approval, nil, err
		}
		return resp.Approval, lastReceipt(t, st), nil
	}
}

func digestOf(s string) string { return tool.Digest([]byte(s)) }

var crossers = []struct {
	name   string
	action string
	cross  crosser
}{
	{"model.invoke", policy.ActionModelInvoke, modelCrossing},
	{"egress.connect", policy.ActionEgressConnect, egressCrossing("api.example.com")},
	{"state.write", policy.ActionStateWrite, stateCrossing(state.OpPut)},
	{"state.read", policy.ActionStateRead, stateCrossing(state.OpGet)},
	{"ingress.connect", policy.ActionIngressConnect, ingressCrossing},
}

// approvalRoutes are the ingress routes of the approvals' sandbox: "ui"
// and "ui1" … "ui4", each to its own port.
var approvalRoutes = []ingress.Route{{Name: "ui", Port: 18789, MaxConcurrent: 4}, {Name: "ui1", Port: 18790, MaxConcurrent: 4},
	{Name: "ui2", Port: 18791, MaxConcurrent: 4}, {Name: "ui3", Port: 18792, MaxConcurrent: 4}, {Name: "ui4", Port: 18793, MaxConcurrent: 4}}

// ingressCrossing is one connection through a route (the variant picks
// the route, and so the route and port the approval is bound to).
func ingressCrossing(t *testing.T, c *testClient, st *store.Store, variant int) (*crossing.ApprovalRef, *crossing.Receipt, error) {
	ctx := context.Background()
	r0 := approvalRoutes[variant%len(approvalRoutes)]
	ask := crossing.Ask{Action: "ingress.connect", Resource: "Route", Target: r0.Name, Port: r0.Port}
	r, _, err := c.Reserve(crossing.WithAsk(ctx, ask), crossing.Identity{}, "ingress", crossing.Amount{IngressConnections: 1}, 0)
	if err != nil {
		return r.Approval, nil, err
	}
	rc := crossing.Receipt{Broker: "ingress", Action: "connect", Target: r0.Name, Client: "127.0.0.1:40000", Decision: crossing.Allow}
	if _, err := c.SettleRecord(ctx, r, crossing.Amount{IngressConnections: 1}, rc); err != nil {
		t.Fatal(err)
	}
	return r.Approval, lastReceipt(t, st), nil
}

func decide(t *testing.T, st *store.Store, id string, approve bool) {
	t.Helper()
	if _, err := st.DecideApproval(context.Background(), id, approve, "test"); err != nil {
		t.Fatalf("decide %s: %v", id, err)
	}
}

// Every action policy holds for approval: pending until an operator
// approves the exact crossing; then it passes once, its receipt naming
// the approval; the same crossing again needs a new approval; another
// crossing is not covered; a denial refuses; an expired or revoked
// approval authorizes nothing. Without the annotation (the control), the
// same crossings pass with no approval at all.
func TestApprovalsOnEveryAction(t *testing.T) {
	for _, tc := range crossers {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()

			// Control: no annotation, no approval, the crossing passes.
			cst := testStore(t)
			_, cc := approvalServer(t, cst, controlPolicy, time.Minute)
			if ref, rc, err := tc.cross(t, cc, cst, 0); err != nil || ref != nil || rc.Decision != crossing.Allow || rc.Approval != "" {
				t.Fatalf("control crossing = %+v, %+v, %v; want allowed without approval", ref, rc, err)
			}
			if as, _ := cst.Approvals(ctx, store.ApprovalFilter{}); len(as) != 0 {
				t.Fatalf("control asked for approvals: %+v", as)
			}

			st := testStore(t)
			_, c := approvalServer(t, st, approvalPolicy, time.Minute)
			// Pending: refused, one approval waits, bound to this action.
			ref, _, err := tc.cross(t, c, st, 0)
			if !errors.Is(err, crossing.ErrApprovalPending) || ref == nil || ref.State != store.ApprovalPending {
				t.Fatalf("first crossing = %+v, %v; want ErrApprovalPending", ref, err)
			}
			a, err := st.Approval(ctx, ref.ID)
			if err != nil || a.Action != tc.action || a.SandboxID != apprID.SandboxID || a.Workload != apprID.Workload {
				t.Fatalf("approval = %+v, %v", a, err)
			}
			// A retry waits on the same approval.
			if again, _, err := tc.cross(t, c, st, 0); !errors.Is(err, crossing.ErrApprovalPending) || again.ID != ref.ID {
				t.Fatalf("retry = %+v, %v; want the same pending approval", again, err)
			}
			// Another crossing of the same action is another approval.
			other, _, err := tc.cross(t, c, st, 1)
			if !errors.Is(err, crossing.ErrApprovalPending) || other.ID == ref.ID {
				t.Fatalf("other crossing = %+v, %v; want its own pending approval", other, err)
			}
			decide(t, st, ref.ID, true)
			// The approval of crossing 0 does not authorize crossing 1.
			if o, _, err := tc.cross(t, c, st, 1); !errors.Is(err, crossing.ErrApprovalPending) || o.ID != other.ID {
				t.Fatalf("approval covered another crossing: %+v, %v", o, err)
			}
			// Approved: passes once, the receipt names the approval.
			used, rc, err := tc.cross(t, c, st, 0)
			if err != nil || used == nil || used.ID != ref.ID || rc.Decision != crossing.Allow || rc.Approval != ref.ID {
				t.Fatalf("approved crossing = %+v, %+v, %v", used, rc, err)
			}
			a, _ = st.Approval(ctx, ref.ID)
			if a.State != store.ApprovalConsumed {
				t.Fatalf("approval after use is %s, want consumed", a.State)
			}
			if strings.HasPrefix(tc.action, "state.") && a.ReceiptID != rc.ID {
				t.Fatalf("approval's receipt = %d, want %d", a.ReceiptID, rc.ID)
			}
			// Single use: the same crossing again needs a new approval.
			second, _, err := tc.cross(t, c, st, 0)
			if !errors.Is(err, crossing.ErrApprovalPending) || second.ID == ref.ID {
				t.Fatalf("reuse = %+v, %v; want a new pending approval", second, err)
			}
			// Denied: refused, and it stays refused.
			decide(t, st, second.ID, false)
			for range 2 {
				if _, _, err := tc.cross(t, c, st, 0); !errors.Is(err, crossing.ErrApprovalDenied) {
					t.Fatalf("denied crossing = %v, want ErrApprovalDenied", err)
				}
			}
			// Revoked after approval: refused (a new approval is asked).
			decide(t, st, other.ID, true)
			if _, err := st.RevokeApproval(ctx, other.ID, "test"); err != nil {
				t.Fatal(err)
			}
			if o, _, err := tc.cross(t, c, st, 1); !errors.Is(err, crossing.ErrApprovalPending) || o.ID == other.ID {
				t.Fatalf("revoked approval = %+v, %v; want a new pending approval", o, err)
			}
			// Nothing refused left budget held or a receipt claiming it.
			rcs, _ := st.Receipts(ctx, store.ReceiptFilter{})
			n := 0
			for _, r := range rcs {
				if r.Decision == crossing.Allow {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("%d allowed receipts, want 1 (the approved crossing): %+v", n, rcs)
			}
		})
	}
}

// An approval that expires unused authorizes nothing.
func TestApprovalsExpire(t *testing.T) {
	for _, tc := range crossers {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := testStore(t)
			_, c := approvalServer(t, st, approvalPolicy, 300*time.Millisecond)
			ref, _, err := tc.cross(t, c, st, 0)
			if !errors.Is(err, crossing.ErrApprovalPending) {
				t.Fatalf("first crossing: %v", err)
			}
			decide(t, st, ref.ID, true)
			time.Sleep(400 * time.Millisecond)
			again, _, err := tc.cross(t, c, st, 0)
			if !errors.Is(err, crossing.ErrApprovalPending) || again.ID == ref.ID {
				t.Fatalf("after expiry = %+v, %v; want a new pending approval", again, err)
			}
			if a, _ := st.Approval(context.Background(), ref.ID); a.State != store.ApprovalExpired {
				t.Fatalf("expired approval is %s", a.State)
			}
		})
	}
}

// @approval_scope("sandbox") on an egress permit: one approval covers
// every connection to that host and port from the sandbox, until it is
// revoked or the sandbox stops; another port still asks.
func TestEgressApprovalForTheSandbox(t *testing.T) {
	ctx := context.Background()
	st := testStore(t)
	_, c := approvalServer(t, st, approvalPolicy, 300*time.Millisecond)
	cross := egressCrossing("pkg.example.com")
	ref, _, err := cross(t, c, st, 0)
	if !errors.Is(err, crossing.ErrApprovalPending) {
		t.Fatalf("first connection: %v", err)
	}
	decide(t, st, ref.ID, true)
	for i := range 3 {
		used, rc, err := cross(t, c, st, 0)
		if err != nil || used.ID != ref.ID || rc.Approval != ref.ID {
			t.Fatalf("connection %d = %+v, %+v, %v", i, used, rc, err)
		}
		if i == 0 {
			time.Sleep(400 * time.Millisecond) // past the request's TTL: a held approval does not expire
		}
	}
	if a, _ := st.Approval(ctx, ref.ID); a.State != store.ApprovalApproved || !a.Expires.Equal(store.HeldApprovalExpires) {
		t.Fatalf("held approval = %+v", a)
	}
	if o, _, err := cross(t, c, st, 1); !errors.Is(err, crossing.ErrApprovalPending) || o.ID == ref.ID {
		t.Fatalf("another port = %+v, %v; want its own approval", o, err)
	}
	// The sandbox stops: what it held is revoked.
	if n, err := st.RevokeApprovals(ctx, apprID.SandboxID); err != nil || n != 2 {
		t.Fatalf("revoke = %d, %v", n, err)
	}
	if o, _, err := cross(t, c, st, 0); !errors.Is(err, crossing.ErrApprovalPending) || o.ID == ref.ID {
		t.Fatalf("after revocation = %+v, %v; want a new pending approval", o, err)
	}
}

// A compromised gateway can neither skip an approval nor satisfy it: a
// model call without its request digest is refused, a forged approval
// in a receipt is dropped, and a reservation without the question is
// refused as before.
func TestApprovalsCannotBeSkippedByTheGateway(t *testing.T) {
	ctx := context.Background()
	st := testStore(t)
	_, c := approvalServer(t, st, approvalPolicy, time.Minute)
	ask := crossing.Ask{Action: "model.invoke", Resource: "Model", Target: "m"}
	if _, _, err := c.Reserve(crossing.WithAsk(ctx, ask), crossing.Identity{}, "model", crossing.Amount{Requests: 1}, 0); !errors.Is(err, crossing.ErrPolicyDenied) {
		t.Fatalf("model call without a digest = %v, want ErrPolicyDenied", err)
	}
	if _, _, err := c.Reserve(ctx, crossing.Identity{}, "model", crossing.Amount{Requests: 1}, 0); !errors.Is(err, crossing.ErrPolicyDenied) {
		t.Fatalf("model call without a question = %v", err)
	}
	// An allowed receipt naming an approval this side never used.
	if err := c.Record(ctx, crossing.Receipt{Broker: "egress", Action: "connect", Target: "api.example.com:443", Decision: crossing.Allow, Approval: "apr_ffffffffffffffffffffffff"}); err != nil {
		t.Fatal(err)
	}
	if rc := lastReceipt(t, st); rc.Approval != "" {
		t.Fatalf("forged approval recorded: %+v", rc)
	}
	if as, _ := st.Approvals(ctx, store.ApprovalFilter{}); len(as) != 0 {
		t.Fatalf("approvals = %+v, want none", as)
	}
}

// A refused state operation's receipt is recorded by this side and names
// the pending approval.
func TestStateApprovalPendingIsReceipted(t *testing.T) {
	st := testStore(t)
	_, c := approvalServer(t, st, approvalPolicy, time.Minute)
	ref, _, err := stateCrossing(state.OpPut)(t, c, st, 0)
	if !errors.Is(err, crossing.ErrApprovalPending) {
		t.Fatal(err)
	}
	rc := lastReceipt(t, st)
	if rc.Decision != crossing.Deny || !strings.Contains(rc.Reason, "approval pending") || !strings.Contains(rc.Reason, ref.ID) {
		t.Fatalf("receipt = %+v", rc)
	}
	if _, _, err := st.GetState(context.Background(), StateScope(apprID), "notes/a", nil); !errors.Is(err, store.ErrStateNotFound) {
		t.Fatalf("the write happened: %v", err)
	}
}

// FuzzApprovalReserve: whatever policy question a compromised gateway
// sends with a reservation, a crossing policy holds for approval never
// opens without an operator's approval (none is ever given here), and
// nothing is left reserved.
func FuzzApprovalReserve(f *testing.F) {
	f.Add("model", "model.invoke", "Model", "m", 0, "sha256:"+strings.Repeat("a", 64), int64(10), int64(0), "anthropic.messages")
	f.Add("egress", "egress.connect", "Host", "api.example.com", 443, "", int64(0), int64(1), "")
	f.Add("egress", "egress.connect", "Host", "PKG.example.com.", 443, "", int64(0), int64(1), "")
	f.Add("model", "model.invoke", "Model", "m", 0, "sha256:zz", int64(-1), int64(0), "openai.chat")
	f.Add("model", "model.invoke", "Model", "m", 0, "sha256:"+strings.Repeat("b", 64), int64(10), int64(0), strings.Repeat("x", 41))
	st := testStoreF(f)
	set, err := policy.LoadSources(policy.Source{Name: "a.cedar", Data: []byte(approvalPolicy)})
	if err != nil {
		f.Fatal(err)
	}
	srv := &Authority{Store: st, ID: apprID, Policy: set, Tools: &ToolPolicy{ApprovalTTL: time.Minute}}
	f.Fuzz(func(t *testing.T, broker, action, resource, target string, port int, digest string, bytes, conns int64, operation string) {
		req := call{ID: 1, Op: "reserve", Broker: broker, Want: crossing.Amount{Requests: 1, Connections: conns},
			Ask: &crossing.Ask{Action: action, Resource: resource, Target: target, Port: port, RequestDigest: digest, RequestBytes: bytes, Operation: operation}}
		if !srv.needsApproval(req) {
			return
		}
		resp := srv.reserveApproved(req)
		if resp.Err == "" || resp.Res.ID != 0 {
			t.Fatalf("reserve %+v without an approval = %+v", req.Ask, resp)
		}
	})
}

func testStoreF(f *testing.F) *store.Store {
	dir := f.TempDir()
	s, err := store.Open(dir, store.Pool{Base: 1 << 30, Size: 65536, Slots: 4})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Close() })
	return s
}
