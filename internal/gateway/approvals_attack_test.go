package gateway

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/broker/state"
	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/store"
)

// Attacks on the approvals of model, egress and state crossings, made as
// the sandbox's gateway process does (over the authority socket) against the
// privileged side with a real store, and observed in the store.

func approvalModelAsk(body, operation string) crossing.Ask {
	return crossing.Ask{Action: "model.invoke", Resource: "Model", Target: "m", RequestDigest: digestOf(body),
		RequestBytes: int64(len(body)), Operation: operation}
}

// An operator approves a token count (which generates nothing); the
// agent sends the same body to /v1/messages. The approval names its
// operation and must not authorize another one.
func TestModelApprovalIsBoundToItsOperation(t *testing.T) {
	ctx := context.Background()
	st := testStore(t)
	_, c := approvalServer(t, st, approvalPolicy, time.Minute)
	body := `{"model":"m","max_tokens":4096,"messages":[{"role":"user","content":"write the exploit"}]}`
	reserve := func(op string) (crossing.Reservation, error) {
		r, _, err := c.Reserve(crossing.WithAsk(ctx, approvalModelAsk(body, op)), crossing.Identity{}, "model", crossing.Amount{Requests: 1}, 0)
		return r, err
	}
	r, err := reserve("anthropic.count_tokens")
	if !errors.Is(err, crossing.ErrApprovalPending) || r.Approval == nil {
		t.Fatalf("count_tokens = %+v, %v; want pending", r, err)
	}
	if _, err := st.DecideApproval(ctx, r.Approval.ID, true, "test"); err != nil {
		t.Fatal(err)
	}
	r2, err := reserve("anthropic.messages")
	if err == nil {
		t.Fatalf("the approval of a token count opened a messages call: %+v (approval %+v)", r2, r2.Approval)
	}
	if !errors.Is(err, crossing.ErrApprovalPending) || r2.Approval == nil || r2.Approval.ID == r.Approval.ID {
		t.Fatalf("messages = %+v, %v; want a pending approval of its own", r2, err)
	}
	// Positive control: the approved operation itself passes, once.
	r3, err := reserve("anthropic.count_tokens")
	if err != nil || r3.Approval == nil || r3.Approval.ID != r.Approval.ID {
		t.Fatalf("the approved count_tokens = %+v, %v", r3, err)
	}
	if a, err := st.Approval(ctx, r.Approval.ID); err != nil || a.State != store.ApprovalConsumed {
		t.Fatalf("approval = %+v, %v; want consumed", a, err)
	}
}

// MaxPendingApprovals holds when the agent asks many crossings at once:
// the gateway serves up to maxToolOps of them concurrently, and each
// must not pass the count before another's request is stored.
func TestPendingApprovalCapHoldsUnderConcurrency(t *testing.T) {
	ctx := context.Background()
	st := testStore(t)
	_, c := approvalServer(t, st, approvalPolicy, time.Minute)
	const n = 60
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"flood %d"}]}`, i)
			_, _, errs[i] = c.Reserve(crossing.WithAsk(ctx, approvalModelAsk(body, "anthropic.messages")), crossing.Identity{}, "model", crossing.Amount{Requests: 1}, 0)
		}()
	}
	wg.Wait()
	pending, denied := 0, 0
	for _, err := range errs {
		switch {
		case errors.Is(err, crossing.ErrApprovalPending):
			pending++
		case errors.Is(err, crossing.ErrApprovalDenied):
			denied++
		default:
			t.Errorf("reserve = %v", err)
		}
	}
	got, err := st.PendingApprovals(ctx, apprID.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	// Positive control: the cap is reached (the flood is not refused
	// for another reason), and never passed.
	if got != MaxPendingApprovals || pending != MaxPendingApprovals || denied != n-MaxPendingApprovals {
		t.Fatalf("%d approvals pending in the store (%d answered pending, %d refused); the limit is %d",
			got, pending, denied, MaxPendingApprovals)
	}
}

// budgetPolicy reads context.budget, as docs/policy.md's examples do: it
// must see the workload's budget when the crossing asks (every sandbox of
// the workload, every action), not what this sandbox's last model or
// egress reservation saw.
const budgetPolicy = `
@id("all")
permit (principal, action, resource);
@id("one-stream")
forbid (principal, action == Action::"model.invoke", resource) when { context.budget.streams >= 1 };
@id("spent")
forbid (principal, action in [Action::"state.read", Action::"state.write"], resource)
when { context.budget.limits.requests > 0 && context.budget.used.requests >= context.budget.limits.requests };
`

func TestPolicySeesTheWorkloadsBudgetNow(t *testing.T) {
	ctx := context.Background()
	st := testStore(t)
	srv, c := approvalServer(t, st, budgetPolicy, time.Minute)
	srv.Budget = store.Budget{Limits: crossing.Amount{Requests: 2}, Streams: 4}
	model := func() error {
		body := `{"model":"m","messages":[]}`
		r, _, err := c.Reserve(crossing.WithAsk(ctx, approvalModelAsk(body, "anthropic.messages")), crossing.Identity{}, "model", crossing.Amount{Requests: 1}, 1)
		if err == nil {
			_, err = c.Settle(ctx, r, crossing.Amount{Requests: 1})
		}
		return err
	}
	read := func() error {
		_, err := c.State(ctx, state.Request{Op: state.OpGet, Key: "notes/a"})
		return err
	}
	// Positive control: nothing held or used yet, both pass (the read
	// finds nothing: not found, not denied by policy).
	if err := model(); err != nil {
		t.Fatalf("model call = %v", err)
	}
	if err := read(); errors.Is(err, crossing.ErrPolicyDenied) {
		t.Fatalf("read = %v", err)
	}
	// Another sandbox of the workload opens a stream and holds it.
	other := apprID
	other.SandboxID = "sb-other"
	held, _, err := st.Reserve(ctx, other, "model", crossing.Amount{Requests: 1}, 1, srv.Budget)
	if err != nil {
		t.Fatal(err)
	}
	if err := model(); !errors.Is(err, crossing.ErrPolicyDenied) {
		t.Fatalf("model call while the workload holds a stream = %v; want denied by one-stream", err)
	}
	// The workload's requests are now spent (1 settled + 1 held of 2).
	if err := read(); !errors.Is(err, crossing.ErrPolicyDenied) {
		t.Fatalf("state read with the workload's requests spent = %v; want denied by spent", err)
	}
	// The stream ends: model calls are decided on the budget now, not on
	// the last state this sandbox saw.
	if _, err := st.Settle(ctx, held, crossing.Amount{}, srv.Budget); err != nil {
		t.Fatal(err)
	}
	if err := model(); err != nil {
		t.Fatalf("model call after the stream ended = %v", err)
	}
}

// An approval given to one sandbox is not used by another sandbox of the
// same workload (same store, same policy), for every action, including a
// sandbox-scoped egress approval; and two concurrent identical crossings
// consume one approval once.
func TestApprovalsStayInTheirSandboxAndAreUsedOnce(t *testing.T) {
	all := append(crossers[:len(crossers):len(crossers)], struct {
		name   string
		action string
		cross  crosser
	}{"egress for the sandbox", "egress.connect", egressCrossing("pkg.example.com")})
	for _, tc := range all {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st := testStore(t)
			_, a := approvalServer(t, st, approvalPolicy, time.Minute)
			srvB, b := approvalServer(t, st, approvalPolicy, time.Minute)
			srvB.ID.SandboxID = "sb-other"
			ref, _, err := tc.cross(t, a, st, 0)
			if !errors.Is(err, crossing.ErrApprovalPending) {
				t.Fatalf("sandbox A: %v", err)
			}
			decide(t, st, ref.ID, true)
			if o, _, err := tc.cross(t, b, st, 0); !errors.Is(err, crossing.ErrApprovalPending) || o == nil || o.ID == ref.ID {
				t.Fatalf("sandbox B with A's approval = %+v, %v; want its own pending approval", o, err)
			}
			if tc.name == "egress for the sandbox" {
				return
			}
			// Race: A crosses twice at once; exactly one passes.
			var wg sync.WaitGroup
			errs := make([]error, 8)
			for i := range errs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, _, errs[i] = tc.cross(t, a, st, 0)
				}()
			}
			wg.Wait()
			passed := 0
			for _, err := range errs {
				if err == nil {
					passed++
				}
			}
			if passed != 1 {
				t.Fatalf("%d concurrent crossings passed on one approval: %v", passed, errs)
			}
			if x, _ := st.Approval(ctx, ref.ID); x.State != store.ApprovalConsumed {
				t.Fatalf("approval = %+v", x)
			}
		})
	}
}

// An approved read of one key does not list or export the scope, and an
// approved put of one value does not write another value or reset the
// scope.
func TestStateApprovalCoversOneOperation(t *testing.T) {
	ctx := context.Background()
	st := testStore(t)
	_, c := approvalServer(t, st, approvalPolicy, time.Minute)
	op := func(r state.Request) (state.Response, error) { return c.State(ctx, r) }
	for _, tc := range []struct {
		approved state.Request
		others   []state.Request
	}{
		{state.Request{Op: state.OpGet, Key: "notes/a"}, []state.Request{{Op: state.OpList}, {Op: state.OpExport}, {Op: state.OpList, Prefix: "notes/"}, {Op: state.OpGet, Key: "notes/b"}}},
		{state.Request{Op: state.OpPut, Key: "notes/a", Value: []byte("small")}, []state.Request{{Op: state.OpPut, Key: "notes/a", Value: []byte("other")}, {Op: state.OpReset}, {Op: state.OpDelete, Key: "notes/a"}, {Op: state.OpPut, Key: "notes/a", Value: []byte("small"), IfAbsent: true}}},
	} {
		resp, err := op(tc.approved)
		if !errors.Is(err, crossing.ErrApprovalPending) || resp.Approval == nil {
			t.Fatalf("%+v = %+v, %v; want pending", tc.approved, resp, err)
		}
		decide(t, st, resp.Approval.ID, true)
		for _, o := range tc.others {
			r, err := op(o)
			if !errors.Is(err, crossing.ErrApprovalPending) || r.Approval == nil || r.Approval.ID == resp.Approval.ID {
				t.Fatalf("%+v with the approval of %+v = %+v, %v; want its own pending approval", o, tc.approved, r, err)
			}
		}
		// Positive control: the approved operation itself is not refused
		// for want of an approval (a get may find nothing).
		if _, err := op(tc.approved); errors.Is(err, crossing.ErrApprovalPending) || errors.Is(err, crossing.ErrApprovalDenied) {
			t.Fatalf("the approved %+v = %v", tc.approved, err)
		}
		if a, _ := st.Approval(ctx, resp.Approval.ID); a.State != store.ApprovalConsumed {
			t.Fatalf("approval = %+v", a)
		}
		// Clear the waiting ones (the sandbox's pending cap).
		if _, err := st.RevokeApprovals(ctx, apprID.SandboxID); err != nil {
			t.Fatal(err)
		}
	}
}
