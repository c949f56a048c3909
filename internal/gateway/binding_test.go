package gateway

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/broker/state"
	"github.com/cordon-project/cordon/internal/broker/tool"
	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/gateway/wire"
	"github.com/cordon-project/cordon/internal/store"
)

// bound serves one channel of srv bound to broker and returns a client
// whose messages name claim (a compromised gateway process may claim any
// broker on any channel it holds).
func bound(t *testing.T, srv *Authority, broker, claim string) *wire.Client {
	t.Helper()
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close() })
	go srv.Serve(b, broker)
	return wire.NewClient(a, claim)
}

// Each channel serves its own broker only: on another broker's channel a
// reservation, a receipt, a tool call or a state operation is refused,
// and the store shows nothing of it. The same message on its own
// broker's channel goes through (positive control): the binding is what
// refuses.
func TestChannelServesItsBrokerOnly(t *testing.T) {
	st := testStore(t)
	id := crossing.Identity{Workload: "w", Tenant: "t", Purpose: "p", SandboxID: "sb-bind"}
	srv := &Authority{Store: st, ID: id, Budget: store.Budget{Limits: crossing.Amount{Connections: 10, Requests: 10}},
		Tools: &ToolPolicy{Servers: map[string]bool{"fs": true}, ApprovalTTL: time.Minute},
		State: &StatePolicy{QuotaBytes: 1 << 20, QuotaEntries: 10, MaxValueBytes: 1 << 10}}
	ctx := context.Background()
	egressAsk := crossing.WithAsk(ctx, crossing.Ask{Action: "egress.connect", Resource: "Host", Target: "example.test", Port: 443})
	used := func() crossing.Amount {
		t.Helper()
		b, err := st.BudgetState(ctx, id.Workload, srv.Budget)
		if err != nil {
			t.Fatal(err)
		}
		return b.Used
	}
	receipts := func() int {
		t.Helper()
		rcs, err := st.Receipts(ctx, store.ReceiptFilter{SandboxID: id.SandboxID})
		if err != nil {
			t.Fatal(err)
		}
		return len(rcs)
	}

	// An egress reservation on the model broker's channel.
	forged := crossing.Remote{C: bound(t, srv, "model", "egress")}
	if _, _, err := forged.Reserve(egressAsk, id, "egress", crossing.Amount{Connections: 1}, 0); !errors.Is(err, crossing.ErrPolicyDenied) {
		t.Fatalf("egress reserve on the model channel = %v, want ErrPolicyDenied", err)
	}
	if u := used(); u.Connections != 0 {
		t.Fatalf("after the refused reserve the store holds %+v, want nothing", u)
	}
	// A model receipt on the egress broker's channel.
	egressCh := crossing.Remote{C: bound(t, srv, "egress", "egress")}
	if err := egressCh.Record(ctx, crossing.Receipt{Broker: "model", Decision: crossing.Deny, Reason: "forged"}); !errors.Is(err, crossing.ErrPolicyDenied) {
		t.Fatalf("model receipt on the egress channel = %v, want ErrPolicyDenied", err)
	}
	// A tool call on the egress broker's channel (claiming egress).
	if _, err := (tool.Remote{C: bound(t, srv, "egress", "egress")}).Begin(ctx, tool.Begin{Server: "fs", Tool: "read"}); err == nil {
		t.Fatal("a tool begin on the egress channel was served")
	}
	// A state operation on the tool broker's channel, claiming state.
	if _, err := (state.Remote{C: bound(t, srv, "tool", "state")}).State(ctx, state.Request{Op: state.OpPut, Key: "notes/a", Value: []byte("x")}); !errors.Is(err, crossing.ErrPolicyDenied) {
		t.Fatalf("state put on the tool channel = %v, want ErrPolicyDenied", err)
	}
	// A receipt on the state broker's channel: its trusted half writes
	// every state receipt itself.
	if err := (crossing.Remote{C: bound(t, srv, "state", "state")}).Record(ctx, crossing.Receipt{Broker: "state", Decision: crossing.Allow}); err == nil {
		t.Fatal("a receipt was recorded on the state channel")
	}
	if n := receipts(); n != 0 {
		t.Fatalf("receipts after the refused messages = %d, want 0", n)
	}
	if rcs, _ := st.Receipts(ctx, store.ReceiptFilter{Broker: state.Name}); len(rcs) != 0 {
		t.Fatalf("state receipts after a state put on the tool channel: %+v", rcs)
	}

	// Positive control: each message on its own broker's channel.
	if _, _, err := egressCh.Reserve(egressAsk, id, "egress", crossing.Amount{Connections: 1}, 0); err != nil {
		t.Fatalf("egress reserve on the egress channel: %v", err)
	}
	if u := used(); u.Connections != 1 {
		t.Fatalf("after the egress reserve the store holds %+v, want one connection", u)
	}
	// The egress broker's reservation cannot be settled on the model
	// broker's channel; on its own it can.
	res, _, err := egressCh.Reserve(egressAsk, id, "egress", crossing.Amount{Connections: 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	modelCh0 := crossing.Remote{C: bound(t, srv, "model", "model")}
	if _, err := modelCh0.Settle(ctx, res, crossing.Amount{}); !errors.Is(err, crossing.ErrPolicyDenied) {
		t.Fatalf("settle of an egress reservation on the model channel = %v, want ErrPolicyDenied", err)
	}
	if u := used(); u.Connections != 2 {
		t.Fatalf("after the refused settle the store holds %+v, want both connections held", u)
	}
	if _, err := egressCh.Settle(ctx, res, crossing.Amount{}); err != nil {
		t.Fatalf("settle on the egress channel: %v", err)
	}
	if u := used(); u.Connections != 1 {
		t.Fatalf("after the settle the store holds %+v, want one connection", u)
	}
	modelCh := crossing.Remote{C: bound(t, srv, "model", "model")}
	if err := modelCh.Record(ctx, crossing.Receipt{Broker: "model", Decision: crossing.Deny, Reason: "control"}); err != nil {
		t.Fatalf("model receipt on the model channel: %v", err)
	}
	if _, err := (state.Remote{C: bound(t, srv, "state", "state")}).State(ctx, state.Request{Op: state.OpPut, Key: "notes/a", Value: []byte("x")}); err != nil {
		t.Fatalf("state put on the state channel: %v", err)
	}
	if n := receipts(); n != 2 {
		t.Fatalf("receipts after the control messages = %d, want the model denial and the state put", n)
	}
}

// A channel for a broker the authority does not serve is closed at once.
func TestChannelOfUnknownBrokerCloses(t *testing.T) {
	srv := &Authority{Store: testStore(t), ID: crossing.Identity{Workload: "w", SandboxID: "sb"}}
	a, b := net.Pipe()
	defer a.Close()
	done := make(chan struct{})
	go func() { srv.Serve(b, "secrets"); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Serve of an unknown broker did not return")
	}
	if _, err := a.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("read from the channel of an unknown broker = %v, want it closed", err)
	}
}
