package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/gateway/wire"
	"github.com/cordon-project/cordon/internal/store"
)

func testStore(t *testing.T) *store.Store {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	s, err := store.Open(dir, store.Pool{Base: 1 << 30, Size: 65536, Slots: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// The privileged side stamps its own identity on every authority request: a
// gateway cannot spend another workload's budget or record for it.
func TestAuthorityIdentityIsTheSandboxes(t *testing.T) {
	st := testStore(t)
	id := crossing.Identity{Workload: "mine", Tenant: "t", Purpose: "p", SandboxID: "sb1"}
	srv := &Authority{Store: st, ID: id, Budget: store.Budget{Limits: crossing.Amount{Requests: 1}}}
	c := connect(t, srv)
	ctx := modelAsk(context.Background())
	forged := crossing.Identity{Workload: "victim", SandboxID: "other"}
	r, _, err := c.Reserve(ctx, forged, "model", crossing.Amount{Requests: 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Reserve(ctx, forged, "model", crossing.Amount{Requests: 1}, 0); !errors.Is(err, crossing.ErrBudgetExceeded) {
		t.Fatalf("second reserve = %v, want ErrBudgetExceeded (same workload, whatever the gateway claims)", err)
	}
	if _, err := c.Settle(ctx, r, crossing.Amount{Requests: 1}); err != nil {
		t.Fatal(err)
	}
	if err := c.Record(ctx, crossing.Receipt{Identity: forged, Broker: "model", Decision: crossing.Allow}); err != nil {
		t.Fatal(err)
	}
	rs, err := st.Receipts(ctx, store.ReceiptFilter{})
	if err != nil || len(rs) != 1 || rs[0].Identity != id {
		t.Fatalf("receipts = %+v, %v, want the sandbox's identity", rs, err)
	}
	// The victim's budget is untouched.
	if _, _, err := st.Reserve(ctx, forged, "model", crossing.Amount{Requests: 1}, 0, srv.Budget); err != nil {
		t.Fatalf("victim's budget = %v, want untouched", err)
	}
}

// A closed authority fails crossings as unavailable, never as allowed.
func TestAuthorityUnavailable(t *testing.T) {
	a, b := net.Pipe()
	c := wire.NewClient(a, "model")
	b.Close()
	if _, _, err := (crossing.Remote{C: c}).Reserve(context.Background(), crossing.Identity{}, "model", crossing.Amount{Requests: 1}, 0); !errors.Is(err, crossing.ErrUnavailable) {
		t.Fatalf("Reserve on a closed authority = %v, want ErrUnavailable", err)
	}
}

// FuzzAuthorityRequest feeds the root side's decoder arbitrary envelopes,
// as a compromised gateway could, on every broker's channel: a message is
// accepted only on its own broker's channel, and a metered operation
// without its payload is refused.
func FuzzAuthorityRequest(f *testing.F) {
	f.Add([]byte(`{"id":1,"broker":"model","op":"reserve","body":{"want":{"requests":1}}}`))
	f.Add([]byte(`{"id":2,"broker":"egress","op":"settle","body":{"res":{"id":9}}}`))
	f.Add([]byte(`{"id":3,"broker":"tool","op":"record","body":{"receipt":{"broker":"x"}}}`))
	f.Add([]byte(`{"id":4,"broker":"state","op":"put","body":{"key":"k","value":"dg=="}}`))
	f.Add([]byte(`{"id":5,"broker":"model","op":"begin","body":{}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var env wire.Request
		if json.Unmarshal(b, &env) != nil {
			return
		}
		for _, bound := range Brokers {
			req, err := decodeCall(env, bound, registry[bound])
			_, _ = json.Marshal(encodeReply(registry[bound], req, reply{ID: req.ID, Err: "x"}))
			if err != nil {
				continue
			}
			if env.Broker != bound || req.Broker != bound {
				t.Fatalf("decodeCall(%s) on the %s channel = %+v, want refused", b, bound, req)
			}
			srv := &Authority{Store: nil, ID: crossing.Identity{Workload: "w"}}
			switch req.Op {
			case "settle", "settle_record", "record":
				if req.Op == "record" && req.Receipt == nil || req.Op != "record" && req.Res == nil {
					if resp := srv.handle(failingOps{}, req); resp.Err == "" {
						t.Fatalf("handle(%s) without its payload succeeded", b)
					}
				}
			}
		}
	})
}

// A compromised gateway cannot settle another sandbox's reservation (its
// usage would never be counted) nor hand budget back with negative amounts.
func TestAuthorityRefusesForeignSettleAndNegatives(t *testing.T) {
	st := testStore(t)
	ctx := modelAsk(context.Background())
	victim := crossing.Identity{Workload: "victim", SandboxID: "v1"}
	bud := store.Budget{Limits: crossing.Amount{OutputTokens: 100}, Streams: 1}
	vr, _, err := st.Reserve(ctx, victim, "model", crossing.Amount{OutputTokens: 50}, 1, bud)
	if err != nil {
		t.Fatal(err)
	}
	srv := &Authority{Store: st, ID: crossing.Identity{Workload: "mine", SandboxID: "m1"}, Budget: bud}
	c := connect(t, srv)
	if _, err := c.Settle(ctx, crossing.Reservation{ID: vr.ID}, crossing.Amount{}); err == nil {
		t.Fatal("settling another sandbox's reservation succeeded")
	}
	if _, _, err := c.Reserve(ctx, crossing.Identity{}, "model", crossing.Amount{OutputTokens: -1000}, 0); err == nil {
		t.Fatal("a negative reservation succeeded")
	}
	if _, _, err := c.Reserve(ctx, crossing.Identity{}, "model", crossing.Amount{}, -5); err == nil {
		t.Fatal("negative streams succeeded")
	}
	// The victim still settles its own reservation normally.
	vr.Identity = victim
	if _, err := st.Settle(ctx, vr, crossing.Amount{OutputTokens: 40}, bud); err != nil {
		t.Fatalf("victim's own settle = %v", err)
	}
}

func TestDenialReceiptsRateLimited(t *testing.T) {
	var b bucket
	now := time.Unix(1000, 0)
	admitted := 0
	for i := 0; i < 1000; i++ {
		if _, ok := b.admit(now); ok {
			admitted++
		}
	}
	if admitted != denyReceiptsBurst {
		t.Fatalf("admitted %d of 1000 at once, want the burst %d", admitted, denyReceiptsBurst)
	}
	d, ok := b.admit(now.Add(time.Second))
	if !ok || d != 1000-denyReceiptsBurst {
		t.Fatalf("after a second: admitted %v, dropped %d, want true and %d", ok, d, 1000-denyReceiptsBurst)
	}
}

// Settle and record in one message: one commit, the sandbox's identity,
// the receipt carrying the budget after the settlement.
func TestAuthoritySettleRecord(t *testing.T) {
	st := testStore(t)
	id := crossing.Identity{Workload: "mine", SandboxID: "sb1"}
	srv := &Authority{Store: st, ID: id, Budget: store.Budget{Limits: crossing.Amount{OutputTokens: 100}}}
	c := connect(t, srv)
	ctx := modelAsk(context.Background())
	r, _, err := c.Reserve(ctx, crossing.Identity{}, "model", crossing.Amount{OutputTokens: 50}, 0)
	if err != nil {
		t.Fatal(err)
	}
	bs, err := c.SettleRecord(ctx, r, crossing.Amount{OutputTokens: 20}, crossing.Receipt{Identity: crossing.Identity{Workload: "forged"}, Broker: "model", Decision: crossing.Allow})
	if err != nil || bs.Used.OutputTokens != 20 {
		t.Fatalf("SettleRecord = %+v, %v", bs, err)
	}
	rs, err := st.Receipts(ctx, store.ReceiptFilter{})
	if err != nil || len(rs) != 1 || rs[0].Identity != id || rs[0].Budget.Used.OutputTokens != 20 {
		t.Fatalf("receipts = %+v, %v", rs, err)
	}
}

// failingOps is a store that is never reached in the fuzz test.
type failingOps struct{}

func (failingOps) BudgetState(string, store.Budget) (crossing.BudgetState, error) {
	return crossing.BudgetState{}, crossing.ErrUnavailable
}

func (failingOps) Reserve(crossing.Identity, string, crossing.Amount, int64, store.Budget) (crossing.Reservation, crossing.BudgetState, error) {
	return crossing.Reservation{}, crossing.BudgetState{}, crossing.ErrUnavailable
}
func (failingOps) SettleRecord(crossing.Reservation, crossing.Amount, store.Budget, *crossing.Receipt) (crossing.BudgetState, error) {
	return crossing.BudgetState{}, crossing.ErrUnavailable
}
func (failingOps) Record(crossing.Receipt) (int64, error) { return 0, crossing.ErrUnavailable }

func modelAsk(ctx context.Context) context.Context {
	return crossing.WithAsk(ctx, crossing.Ask{Action: "model.invoke", Resource: "Model", Target: "m"})
}
