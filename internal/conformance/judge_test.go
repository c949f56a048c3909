package conformance

import (
	"context"
	"errors"
	"testing"

	"github.com/cordon-project/cordon/internal/conformance/record"
)

func TestJudge(t *testing.T) {
	bypass := Probe{ID: "bypass.x", Class: record.Bypass}
	allowed := Probe{ID: "allowed.x", Class: record.Allowed}
	denied := record.Fact{Name: "count", OK: true, Got: "0"}
	control := record.Fact{Name: "host", OK: true, Got: "1", Control: true}
	bad := record.Fact{Name: "count", OK: false, Got: "1", Want: "0"}
	badControl := record.Fact{Name: "host", OK: false, Got: "0", Want: "1", Control: true}
	tests := []struct {
		name string
		p    Probe
		o    Outcome
		want record.Verdict
	}{
		{"denied with control", bypass, Outcome{Facts: []record.Fact{denied, control}}, record.Pass},
		{"denied without control", bypass, Outcome{Facts: []record.Fact{denied}}, record.Fail},
		{"control failed", bypass, Outcome{Facts: []record.Fact{denied, badControl}}, record.Fail},
		{"escape observed", bypass, Outcome{Facts: []record.Fact{bad, control}}, record.Fail},
		{"only a control", bypass, Outcome{Facts: []record.Fact{control}}, record.Fail},
		{"nothing observed", bypass, Outcome{}, record.Fail},
		{"broken", bypass, Outcome{Err: errors.New("x"), Facts: []record.Fact{denied, control}}, record.Fail},
		{"not supported", bypass, Outcome{NotEvidenced: "no daemon"}, record.NotEvidenced},
		{"broken beats not supported", bypass, Outcome{Err: errors.New("x"), NotEvidenced: "y"}, record.Fail},
		{"allowed needs no control", allowed, Outcome{Facts: []record.Fact{denied}}, record.Pass},
		{"allowed observed nothing", allowed, Outcome{}, record.Fail},
	}
	for _, tc := range tests {
		got, reason := Judge(tc.p, tc.o)
		if got != tc.want {
			t.Errorf("%s: Judge = %s (%s), want %s", tc.name, got, reason, tc.want)
		}
		if got != record.Pass && reason == "" {
			t.Errorf("%s: %s without a reason", tc.name, got)
		}
	}
}

func TestRegisterRefusesMalformed(t *testing.T) {
	ok := Probe{ID: "bypass.test-only.ok", Class: record.Bypass, Clause: "c", Title: "t", Run: func(context.Context, *Env) Outcome { return Outcome{} }}
	for name, p := range map[string]Probe{
		"bad id":      {ID: "Bypass x", Class: ok.Class, Clause: "c", Title: "t", Run: ok.Run},
		"no class":    {ID: "bypass.y", Clause: "c", Title: "t", Run: ok.Run},
		"no clause":   {ID: "bypass.y", Class: ok.Class, Title: "t", Run: ok.Run},
		"no run":      {ID: "bypass.y", Class: ok.Class, Clause: "c", Title: "t"},
		"unknown cls": {ID: "bypass.y", Class: "nope", Clause: "c", Title: "t", Run: ok.Run},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: Register did not panic", name)
				}
			}()
			Register(p)
		}()
	}
}
