package telemetry_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/telemetry"
	"github.com/cordon-project/cordon/internal/telemetry/telemetrytest"
)

// A string clipped in the middle of a UTF-8 sequence is not valid UTF-8,
// and OTLP's protobuf refuses to marshal one: the whole batch — every
// sandbox's spans of a daemon in it — would be dropped. A long error
// (a span's status) and a long service name with a multibyte character
// across the cut, or an error holding a byte that is not UTF-8, must
// still arrive, as valid UTF-8. Control: the spans
// arrive at an in-process OTLP receiver.
func TestExportClipsOnRuneBoundaries(t *testing.T) {
	r := telemetrytest.NewReceiver(t)
	ctx := context.Background()
	straddle := strings.Repeat("a", telemetry.MaxAttrLen-1) + "é — the rest"
	p, err := telemetry.New(ctx, telemetry.Settings{Endpoint: r.URL() + "/v1/traces", ServiceName: straddle}, "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown(ctx)
	s := p.NewSession(ctx, crossing.Identity{Workload: "w", SandboxID: "sb"})
	s.Phase(telemetry.SpanAdmission)(errors.New(straddle))
	s.Phase(telemetry.SpanStart)(errors.New("bind /tmp/\xff: no such file")) // an operator's path, not UTF-8
	s.Opened(1, "model", &crossing.Ask{Action: "model.invoke", Resource: "Model", Target: straddle})
	s.Take(1, "model").End(&crossing.Receipt{Broker: "model", Decision: crossing.Allow, Target: straddle}, 1, nil)
	s.End(nil)
	names := map[string]bool{}
	for _, sp := range r.Spans() {
		names[sp.Name] = true
		for _, v := range []string{sp.Status, sp.Service, sp.Raw} {
			if !utf8.ValidString(v) {
				t.Errorf("span %s carries invalid UTF-8: %q", sp.Name, v)
			}
		}
	}
	for _, want := range []string{telemetry.SpanSession, telemetry.SpanAdmission, telemetry.SpanStart, telemetry.SpanModelTurn} {
		if !names[want] {
			t.Errorf("span %s did not arrive (received %v)", want, names)
		}
	}
}
