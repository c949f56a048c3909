package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"unicode"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Attribute values can be agent-chosen (a model id in a denial, a state
// operation's name): what otlp-print writes to the operator's terminal
// holds no byte a terminal acts on or hides — no ESC, no 8-bit CSI/OSC,
// no bidirectional override, no line separator — and each line still
// decodes to the exact values (control: a plain value is written as is).
func TestPrintIsTerminalSafe(t *testing.T) {
	hostile := "m\x1b]0;owned\x07\u009b31m\u009dx\u202egnp.exe\u2028\u200bend\x7f"
	req := &collectorpb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{{
		Name: "model.turn" + hostile, TraceId: make([]byte, 16), SpanId: make([]byte, 8),
		Attributes: []*commonpb.KeyValue{
			{Key: "cordon.model", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: hostile}}},
			{Key: "cordon.plain", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "claude-x é"}}},
		},
	}}}}}}}
	body, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	rw := httptest.NewRecorder()
	handler(&out).ServeHTTP(rw, httptest.NewRequest(http.MethodPost, "/v1/traces", bytes.NewReader(body)))
	if rw.Code != http.StatusOK {
		t.Fatalf("status %d", rw.Code)
	}
	for _, r := range out.String() {
		if r != '\n' && (r == 0x7f || unicode.Is(unicode.Cc, r) || unicode.Is(unicode.Cf, r) || r == 0x2028 || r == 0x2029) {
			t.Errorf("the line holds %U raw: %q", r, out.String())
		}
	}
	var l line
	if err := json.Unmarshal(out.Bytes(), &l); err != nil {
		t.Fatalf("%v: %q", err, out.String())
	}
	if l.Attrs["cordon.model"] != hostile || l.Name != "model.turn"+hostile || l.Attrs["cordon.plain"] != "claude-x é" {
		t.Errorf("decoded %+v, want the exact values", l)
	}
	if !bytes.Contains(out.Bytes(), []byte(`"claude-x é"`)) {
		t.Errorf("a plain value was rewritten: %s", out.String())
	}
}
