package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/cordon-project/cordon/internal/broker/tool"
	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/store"
	"github.com/cordon-project/cordon/internal/telemetry"
)

// The receipts the root side records carry its own trace and span ids,
// never the ones a (compromised) gateway process put in them: the model
// turn's span for its settle_record, a new span for a refusal's record;
// without a trace, forged ids are cleared. Read back from the store.
func TestAuthorityStampsTraceIDs(t *testing.T) {
	const forgedTrace, forgedSpan = "0123456789abcdef0123456789abcdef", "0123456789abcdef"
	for _, traced := range []bool{true, false} {
		st := testStore(t)
		id := crossing.Identity{Workload: "mine", SandboxID: "sb1"}
		rec := tracetest.NewSpanRecorder()
		srv := &Authority{Store: st, ID: id, Budget: store.Budget{}}
		if traced {
			srv.Trace = telemetry.NewWithProcessor(rec).NewSession(context.Background(), id)
		}
		c := connect(t, srv)
		ctx := modelAsk(context.Background())
		r, _, err := c.Reserve(ctx, crossing.Identity{}, "model", crossing.Amount{Requests: 1}, 0)
		if err != nil {
			t.Fatal(err)
		}
		forged := crossing.Receipt{Broker: "model", Decision: crossing.Allow, TraceID: forgedTrace, SpanID: forgedSpan}
		if _, err := c.SettleRecord(ctx, r, crossing.Amount{Requests: 1}, forged); err != nil {
			t.Fatal(err)
		}
		forged.Decision = crossing.Deny
		if err := c.Record(ctx, forged); err != nil {
			t.Fatal(err)
		}
		rs, err := st.Receipts(ctx, store.ReceiptFilter{})
		if err != nil || len(rs) != 2 {
			t.Fatalf("receipts = %+v, %v", rs, err)
		}
		for _, rc := range rs {
			if rc.TraceID == forgedTrace || rc.SpanID == forgedSpan {
				t.Errorf("traced=%v: receipt %d kept the gateway's ids %q/%q", traced, rc.ID, rc.TraceID, rc.SpanID)
			}
			if traced && (rc.TraceID != srv.Trace.TraceID() || len(rc.SpanID) != 16) {
				t.Errorf("receipt %d: trace %q span %q, want the session's trace %s", rc.ID, rc.TraceID, rc.SpanID, srv.Trace.TraceID())
			}
			if !traced && (rc.TraceID != "" || rc.SpanID != "") {
				t.Errorf("untraced receipt %d has ids %q/%q", rc.ID, rc.TraceID, rc.SpanID)
			}
		}
		if !traced {
			continue
		}
		// The settled turn's span is the one its receipt names.
		var turn string
		for _, s := range rec.Ended() {
			if s.Name() == telemetry.SpanModelTurn && s.Parent().SpanID().String() != "" {
				if turn == "" {
					turn = s.SpanContext().SpanID().String()
				}
			}
		}
		if rs[0].SpanID != turn || rs[1].SpanID == turn {
			t.Errorf("span ids: settle_record %s, record %s; the first turn span ended is %s", rs[0].SpanID, rs[1].SpanID, turn)
		}
	}
}

// A compromised gateway process settles reservations that do not exist
// (settle_record is neither rate-limited nor budgeted): the store refuses
// each, and none of them may become a span — exported, it would flood
// the collector's queue every sandbox of a daemon shares, and as the
// latest model turn it would become the parent of the crossings that
// follow. Control: the real turn's span is exported, and parents the
// egress connection made after the forged settles.
func TestTraceForgedSettleMakesNoSpan(t *testing.T) {
	st := testStore(t)
	id := crossing.Identity{Workload: "mine", SandboxID: "sb1"}
	rec := tracetest.NewSpanRecorder()
	srv := &Authority{Store: st, ID: id, Budget: store.Budget{}}
	srv.Trace = telemetry.NewWithProcessor(rec).NewSession(context.Background(), id)
	c := connect(t, srv)
	ctx := modelAsk(context.Background())
	r, _, err := c.Reserve(ctx, crossing.Identity{}, "model", crossing.Amount{Requests: 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SettleRecord(ctx, r, crossing.Amount{Requests: 1}, crossing.Receipt{Broker: "model", Decision: crossing.Allow}); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		bogus := crossing.Reservation{ID: 1_000_000 + int64(i), Broker: "model"}
		if _, err := c.SettleRecord(ctx, bogus, crossing.Amount{}, crossing.Receipt{Broker: "model", Decision: crossing.Allow}); err == nil {
			t.Fatalf("the store settled reservation %d, which was never made", bogus.ID)
		}
	}
	ectx := crossing.WithAsk(context.Background(), crossing.Ask{Action: "egress.connect", Resource: "Host", Target: "a.test", Port: 443})
	er, _, err := c.Reserve(ectx, crossing.Identity{}, "egress", crossing.Amount{Connections: 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SettleRecord(ectx, er, crossing.Amount{Connections: 1}, crossing.Receipt{Broker: "egress", Decision: crossing.Allow, Target: "a.test:443"}); err != nil {
		t.Fatal(err)
	}
	var turns []string
	egressParent := ""
	for _, s := range rec.Ended() {
		switch s.Name() {
		case telemetry.SpanModelTurn:
			turns = append(turns, s.SpanContext().SpanID().String())
		case telemetry.SpanEgress:
			egressParent = s.Parent().SpanID().String()
		}
	}
	if len(turns) != 1 {
		t.Fatalf("%d model turn spans exported, want the one real turn (forged settles made spans)", len(turns))
	}
	if egressParent != turns[0] {
		t.Errorf("the egress connection's parent is %s, want the real turn %s", egressParent, turns[0])
	}
}

// A tool call's receipt is written by the trusted half from what the
// broker sent at tool_end — forged trace and span ids included: the
// stored receipt carries the call's own span, under the session's trace.
// A tool_end for a call never begun (made up) is refused and exports no
// span; the real call's span is exported (control).
func TestTraceToolEndForgedIDs(t *testing.T) {
	const forgedTrace, forgedSpan = "0123456789abcdef0123456789abcdef", "0123456789abcdef"
	srv, c, st := policyServer(t)
	rec := tracetest.NewSpanRecorder()
	srv.Trace = telemetry.NewWithProcessor(rec).NewSession(context.Background(), srv.ID)
	ctx := context.Background()
	began, err := c.Begin(ctx, tool.Begin{Key: "k1", Server: "fs", Tool: "read", Arguments: json.RawMessage(`{}`)})
	if err != nil || began.Status != tool.StatusGo {
		t.Fatalf("begin: %+v %v", began, err)
	}
	if _, err := c.End(ctx, tool.End{Call: began.Call + 1000, Outcome: tool.OutcomeOK, Result: json.RawMessage(`{}`),
		Receipt: crossing.Receipt{TraceID: forgedTrace, SpanID: forgedSpan}}); err == nil {
		t.Fatal("tool_end of a call never begun was accepted")
	}
	if _, err := c.End(ctx, tool.End{Call: began.Call, Outcome: tool.OutcomeOK, Result: json.RawMessage(`{}`),
		Receipt: crossing.Receipt{TraceID: forgedTrace, SpanID: forgedSpan}}); err != nil {
		t.Fatal(err)
	}
	rs, err := st.Receipts(ctx, store.ReceiptFilter{})
	if err != nil || len(rs) != 1 {
		t.Fatalf("receipts = %+v, %v", rs, err)
	}
	var calls []string
	for _, s := range rec.Ended() {
		if s.Name() == telemetry.SpanToolCall {
			calls = append(calls, s.SpanContext().SpanID().String())
		}
	}
	if len(calls) != 1 {
		t.Fatalf("%d tool call spans exported, want the one real call", len(calls))
	}
	if rc := rs[0]; rc.TraceID != srv.Trace.TraceID() || rc.SpanID != calls[0] {
		t.Errorf("receipt ids %q/%q, want the session's trace %s and the call's span %s", rc.TraceID, rc.SpanID, srv.Trace.TraceID(), calls[0])
	}
}

// A compromised broker's reserve may carry an ask whose strings fill
// most of a 256 KiB message; the default policy permits it, and the
// root side keeps the ask of every open reservation (up to 4096), the
// trace's span of it after it settles — hundreds of MiB in the root-side
// process per sandbox. An ask with a field past maxAskField is refused
// (policy_denied); control: an ordinary one is reserved.
func TestReserveRefusesHugeAsk(t *testing.T) {
	st := testStore(t)
	id := crossing.Identity{Workload: "mine", SandboxID: "sb1"}
	srv := &Authority{Store: st, ID: id, Budget: store.Budget{}}
	c := connect(t, srv)
	ask := func(a crossing.Ask) error {
		ctx := crossing.WithAsk(context.Background(), a)
		_, _, err := c.Reserve(ctx, crossing.Identity{}, "egress", crossing.Amount{Connections: 1}, 0)
		return err
	}
	if err := ask(crossing.Ask{Action: "egress.connect", Resource: "Host", Target: strings.Repeat("a", 253), Port: 443}); err != nil {
		t.Fatalf("an ordinary ask: %v", err)
	}
	huge := strings.Repeat("h", 200<<10)
	for _, a := range []crossing.Ask{
		{Action: "egress.connect", Resource: "Host", Target: huge, Port: 443},
		{Action: "egress.connect", Resource: "Host", Target: "a.test", Port: 443, Operation: huge},
		{Action: "egress.connect", Resource: "Host", Target: "a.test", Port: 443, Server: huge},
		{Action: "egress.connect", Resource: "Host", Target: "a.test", Port: 443, RequestDigest: huge},
		{Action: "egress.connect", Resource: "Host", Target: "a.test", Port: 443, ArgumentDigest: huge},
	} {
		if err := ask(a); !errors.Is(err, crossing.ErrPolicyDenied) {
			t.Errorf("an ask with a %d-byte field: %v, want policy_denied", len(huge), err)
		}
	}
}
