package telemetry

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/cordon-project/cordon/internal/crossing"
)

func recorded(t *testing.T) (*Provider, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	return NewWithProcessor(rec), rec
}

func ended(rec *tracetest.SpanRecorder) map[string][]sdktrace.ReadOnlySpan {
	out := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		out[s.Name()] = append(out[s.Name()], s)
	}
	return out
}

// The attribution rule: a turn under the session; a tool call under the
// latest turn; egress and state under the latest tool call of that turn,
// else under the turn; a new turn forgets the previous turn's tool call;
// ingress under the session. Receipts get the span's ids, whatever the
// broker put there.
func TestSessionAttribution(t *testing.T) {
	p, rec := recorded(t)
	s := p.NewSession(context.Background(), crossing.Identity{Workload: "w", SandboxID: "sb"})
	done := s.Phase(SpanProvision)
	done(nil)

	s.Opened(1, "model", &crossing.Ask{Action: "model.invoke", Resource: "Model", Target: "claude-x"})
	turn1 := s.Take(1, "model")
	rc := crossing.Receipt{Broker: "model", Decision: crossing.Allow, TraceID: "forged", SpanID: "forged"}
	turn1.Stamp(&rc)
	turn1.End(&rc, 7, nil)
	if rc.TraceID != s.TraceID() || rc.SpanID != turn1.sp.SpanContext().SpanID().String() {
		t.Fatalf("stamp = %q/%q, want the session's trace and the turn's span", rc.TraceID, rc.SpanID)
	}
	// Egress before any tool call: under the turn.
	s.Opened(2, "egress", &crossing.Ask{Action: "egress.connect", Resource: "Host", Target: "a.test", Port: 443})
	s.Settled(2, "egress")
	eg1 := s.ForRecord(&crossing.Receipt{Broker: "egress", Decision: crossing.Allow, Target: "a.test:443"})
	eg1.End(nil, 0, nil)
	s.ToolBegun(10, "srv", "echo", "")
	call := s.ToolEnded(10)
	call.End(nil, 8, nil)
	// Egress and state after the tool call: under it.
	s.Opened(3, "egress", &crossing.Ask{Action: "egress.connect", Resource: "Host", Target: "b.test", Port: 80})
	eg2 := s.Take(3, "egress")
	eg2.End(nil, 0, nil)
	st := s.Start("state")
	st.End(nil, 0, nil)
	// A new turn: egress goes under it, not the old tool call.
	s.Opened(4, "model", nil)
	turn2 := s.Take(4, "model")
	turn2.End(nil, 0, nil)
	// A refused tool call and a refused turn cause nothing: the next
	// egress still goes under turn2.
	deniedCall := s.ForRecord(&crossing.Receipt{Broker: "tool", Decision: crossing.Deny})
	deniedCall.End(nil, 0, nil)
	deniedTurn := s.ForRecord(&crossing.Receipt{Broker: "model", Decision: crossing.Deny})
	deniedTurn.End(nil, 0, nil)
	eg3 := s.ForRecord(&crossing.Receipt{Broker: "egress", Decision: crossing.Deny})
	eg3.End(nil, 0, nil)
	s.Opened(5, "ingress", nil)
	in := s.Take(5, "ingress")
	in.End(nil, 0, nil)
	s.End(nil)

	root := s.root.SpanContext().SpanID()
	for _, c := range []struct {
		what   string
		sp     Span
		parent Span
	}{
		{"turn1", turn1, Span{}}, {"egress before the tool", eg1, turn1}, {"tool call", call, turn1},
		{"egress after the tool", eg2, call}, {"state after the tool", st, call}, {"turn2", turn2, Span{}},
		{"egress of turn2", eg3, turn2}, {"ingress", in, Span{}},
		{"refused tool call", deniedCall, turn2}, {"refused turn", deniedTurn, Span{}},
	} {
		ro := c.sp.sp.(sdktrace.ReadOnlySpan)
		want := root
		if c.parent.sp != nil {
			want = c.parent.sp.SpanContext().SpanID()
		}
		if got := ro.Parent().SpanID(); got != want {
			t.Errorf("%s (%s): parent %s, want %s", c.what, ro.Name(), got, want)
		}
		if ro.SpanContext().TraceID().String() != s.TraceID() {
			t.Errorf("%s: another trace", c.what)
		}
	}
	names := ended(rec)
	for _, n := range []string{SpanSession, SpanProvision, SpanModelTurn, SpanToolCall, SpanEgress, SpanState, SpanIngress} {
		if len(names[n]) == 0 {
			t.Errorf("no %q span ended; got %v", n, names)
		}
	}
}

// A nil session stamps no ids: a broker's forged ids are cleared.
func TestNilSessionClears(t *testing.T) {
	var s *Session
	rc := crossing.Receipt{TraceID: "0123", SpanID: "4567"}
	s.ForRecord(&rc).Stamp(&rc)
	StampFrom(context.Background(), &rc)
	if rc.TraceID != "" || rc.SpanID != "" {
		t.Fatalf("ids after a nil session's stamp: %+v", rc)
	}
	s.End(nil)
	s.Phase("x")(nil)
	s.Opened(1, "model", nil)
	if s.TraceID() != "" {
		t.Fatal("a nil session has a trace id")
	}
}

// What a broker reports (a model id, a target) is redacted of the
// custodied values and clipped before it becomes an attribute; span
// names are fixed whatever the broker says.
func TestSessionAttributesRedacted(t *testing.T) {
	const key = "sk-ant-secret-0123456789"
	p, rec := recorded(t)
	s := p.NewSession(context.Background(), crossing.Identity{Workload: "w"})
	s.Redact([][]byte{[]byte(key)})
	s.Opened(1, "model", &crossing.Ask{Action: "model.invoke", Resource: "Model", Target: "claude-" + key + strings.Repeat("x", 1000)})
	sp := s.Take(1, "model")
	sp.End(&crossing.Receipt{Broker: "model", Decision: "allow", Action: key, Target: key, Reason: key + " leaked"}, 0, nil)
	s.ToolBegun(2, key, key, "")
	s.ToolEnded(2).End(nil, 0, nil)
	s.ForRecord(&crossing.Receipt{Broker: "no such broker " + key, Decision: "deny"}).End(nil, 0, nil)
	s.End(nil)
	for _, ro := range rec.Ended() {
		if strings.Contains(ro.Name(), key) || (ro.Name() != SpanSession && ro.Name() != SpanModelTurn && ro.Name() != SpanToolCall && ro.Name() != SpanGatewayOp) {
			t.Errorf("span name %q", ro.Name())
		}
		for _, kv := range ro.Attributes() {
			v := kv.Value.Emit()
			if strings.Contains(v, key) || len(v) > MaxAttrLen+len("…") {
				t.Errorf("%s %s = %q", ro.Name(), kv.Key, v)
			}
		}
	}
	// Control: the model id is there, redacted.
	turn := ended(rec)[SpanModelTurn][0]
	found := false
	for _, kv := range turn.Attributes() {
		if kv.Key == "cordon.model" && strings.HasPrefix(kv.Value.AsString(), "claude-[REDACTED]") {
			found = true
		}
	}
	if !found {
		t.Errorf("no redacted model id in %v", turn.Attributes())
	}
}

// A tool call waiting for an operator: an approval.wait span under the
// turn, with the approval's states as events, ended when the call is
// begun with the approval (which the call's span records as used); a
// denied approval ends its wait at once.
func TestSessionApprovalWait(t *testing.T) {
	p, rec := recorded(t)
	s := p.NewSession(context.Background(), crossing.Identity{Workload: "w"})
	s.Opened(1, "model", nil)
	turn := s.Take(1, "model")
	turn.End(nil, 0, nil)
	s.ApprovalPending("ap-1", "srv", "deploy")
	s.ApprovalPending("ap-1", "srv", "deploy") // the retried begin: one wait
	s.ApprovalDecided("ap-1", "pending")
	s.ApprovalDecided("ap-1", "approved")
	s.ToolBegun(5, "srv", "deploy", "ap-1")
	s.ToolEnded(5).End(nil, 0, nil)
	s.ApprovalPending("ap-2", "srv", "deploy")
	s.ApprovalDecided("ap-2", "denied")
	got := ended(rec)
	waits, calls := got[SpanApproval], got[SpanToolCall]
	if len(waits) != 2 || len(calls) != 1 {
		t.Fatalf("%d waits, %d calls ended; want 2 and 1", len(waits), len(calls))
	}
	for _, w := range waits {
		if w.Parent().SpanID() != turn.sp.SpanContext().SpanID() {
			t.Errorf("wait's parent %s, want the turn", w.Parent().SpanID())
		}
	}
	var evs []string
	for _, e := range waits[0].Events() {
		evs = append(evs, e.Name)
	}
	if strings.Join(evs, ",") != "approval.pending,approval.approved" {
		t.Errorf("wait events = %v", evs)
	}
	if ev := calls[0].Events(); len(ev) != 1 || ev[0].Name != "approval.used" {
		t.Errorf("call events = %v", ev)
	}
	s.End(nil)
}

// A tool_end or settle_record for a call or reservation this session
// never saw open gets an orphan span: it moves no attribution, and when
// the store refuses the id (a made-up one) it is never exported.
// Control: an orphan the store accepted (an earlier gateway's) is.
func TestOrphanSpans(t *testing.T) {
	p, rec := recorded(t)
	s := p.NewSession(context.Background(), crossing.Identity{Workload: "w", SandboxID: "sb"})
	s.Opened(1, "model", nil)
	turn := s.Take(1, "model")
	turn.End(nil, 1, nil)
	for i := range 10 {
		s.ToolEnded(int64(100+i)).End(nil, 0, errBogus)
		s.Take(int64(200+i), "model").End(nil, 0, errBogus)
	}
	s.Take(300, "model").End(nil, 2, nil) // an earlier gateway's, recorded
	s.Opened(2, "egress", nil)
	s.Take(2, "egress").End(nil, 3, nil)
	s.End(nil)
	got := ended(rec)
	if n := len(got[SpanToolCall]); n != 0 {
		t.Errorf("%d tool call spans exported for calls the store refused", n)
	}
	if n := len(got[SpanModelTurn]); n != 2 {
		t.Errorf("%d model turn spans exported, want the real one and the accepted orphan", n)
	}
	eg := got[SpanEgress]
	if len(eg) != 1 || eg[0].Parent().SpanID() != turn.sp.SpanContext().SpanID() {
		t.Errorf("egress spans %v: want one, under the real turn", eg)
	}
}

var errBogus = errors.New("no such reservation")

// A compromised broker that opens crossings and never finishes them —
// model and egress reservations settled without their receipt, tool calls
// begun and never ended, approvals waited on and never awaited — holds
// at most maxOpenSpans open spans in the session altogether (each ~1.3
// KB in the root-side process, for as long as a daemon sandbox lives),
// not maxOpenSpans per map and per broker. Control: the spans are held
// (up to the bound) until the session ends them.
func TestSessionHeldSpansBounded(t *testing.T) {
	p, rec := recorded(t)
	s := p.NewSession(context.Background(), crossing.Identity{Workload: "w", SandboxID: "sb"})
	n := int64(maxOpenSpans + 100)
	for i := range n {
		for j, b := range []string{"model", "egress", "ingress"} {
			id := int64(j)*n + i
			s.Opened(id, b, nil)
			s.Settled(id, b)
		}
		s.ToolBegun(i, "srv", "t", "")
		s.ApprovalPending(strconv.FormatInt(i, 10), "srv", "t")
	}
	held := len(rec.Started()) - len(rec.Ended()) - 1 // the session's root
	if held > maxOpenSpans {
		t.Errorf("the session holds %d open spans, over the bound of %d", held, maxOpenSpans)
	}
	if held < maxOpenSpans/2 {
		t.Errorf("the session holds only %d open spans: the control expects them held", held)
	}
	s.End(nil)
	if left := len(rec.Started()) - len(rec.Ended()); left != 0 {
		t.Errorf("%d spans left open after the session ended", left)
	}
}

// A compromised broker reports huge targets (a reservation's ask may be
// most of a 256 KiB message) for crossings it settles and never
// receipts: the session keeps each owed span for as long as a daemon
// sandbox lives, and must not keep the reported target whole with it.
// Observed as the heap the held spans retain (control: they are held).
func TestHeldSpansDoNotRetainTargets(t *testing.T) {
	p, rec := recorded(t)
	s := p.NewSession(context.Background(), crossing.Identity{Workload: "w", SandboxID: "sb"})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range 1000 {
		big := strings.Repeat(strconv.Itoa(i%10), 100<<10) // a distinct 100 KiB string each time
		s.Opened(int64(i), "egress", &crossing.Ask{Action: "egress.connect", Resource: "Host", Target: big, Port: 443})
		s.Settled(int64(i), "egress")
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	grown := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	if held := len(rec.Started()) - len(rec.Ended()) - 1; held != 1000 {
		t.Fatalf("%d spans held, want 1000 (control)", held)
	}
	if grown > 30<<20 {
		t.Errorf("1000 owed spans retain %d MiB: the reported targets are kept whole", grown>>20)
	}
	runtime.KeepAlive(s)
}
