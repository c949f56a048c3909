package probes

import (
	"context"
	"errors"
	"testing"

	"github.com/cordon-project/cordon/internal/conformance"
	"github.com/cordon-project/cordon/internal/conformance/record"
)

func TestRefusedFact(t *testing.T) {
	for _, tt := range []struct {
		code    int
		outcome string
		ok      bool
	}{
		{125, `{"failure_kind":"policy_rejected"}`, true},
		{125, `{"failure_kind":"usage"}`, true},
		{125, `{"failure_kind":"start_failed"}`, false},
		{0, `{}`, false},
		{125, ``, false},
	} {
		f := refusedFact("x", conformance.RunResult{Code: tt.code, Outcome: []byte(tt.outcome)}, "policy_rejected", "usage")
		if f.OK != tt.ok || f.Control {
			t.Errorf("refusedFact(%d, %s) = %+v, want ok %v", tt.code, tt.outcome, f, tt.ok)
		}
	}
}

// A gateway probe on a provider that cannot run a gateway is not
// evidenced; any other broken probe stays broken.
func TestGatewayProbe(t *testing.T) {
	run := func(err error) conformance.Outcome {
		return gatewayProbe(func(context.Context, *conformance.Env) conformance.Outcome {
			return conformance.Outcome{Err: err, Facts: []record.Fact{{Name: "f", OK: true}}}
		})(context.Background(), nil)
	}
	if o := run(errNoGateway); o.NotEvidenced == "" || o.Err != nil || len(o.Facts) != 0 {
		t.Errorf("no gateway: %+v", o)
	}
	if o := run(errors.New("cordon run ended (exit 125): start_failed: gateway: the sandbox " + noGateway)); o.NotEvidenced == "" {
		t.Errorf("no gateway in a held run's error: %+v", o)
	}
	if o := run(errors.New("boom")); o.NotEvidenced != "" || o.Err == nil {
		t.Errorf("a broken probe: %+v", o)
	}
	if o := run(nil); o.NotEvidenced != "" || len(o.Facts) != 1 {
		t.Errorf("a probe that ran: %+v", o)
	}
}

func TestCountsOf(t *testing.T) {
	got := countsOf(map[string]int{scopeName(1): 1, "probe/x/y": 2})
	want := "probe/probe-w1/testing=0 probe/probe-w1/other=1 probe/probe-w2/testing=0 probe/x/y=2"
	if got != want {
		t.Errorf("countsOf = %q, want %q", got, want)
	}
}
