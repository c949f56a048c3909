package denial

import (
	"strings"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/crossing"
)

func TestRuleAndSuggest(t *testing.T) {
	id := crossing.Identity{Workload: "agent"}
	for _, c := range []struct {
		rc       crossing.Receipt
		rule     string
		kind     string
		suggests string
	}{
		{crossing.Receipt{Identity: id, Broker: "egress", Target: "example.com:443", Decision: crossing.Deny, Reason: "host-not-allowed"},
			"config: egress.allow has no entry for example.com:443", "config", `- host: "example.com"`},
		{crossing.Receipt{Identity: id, Broker: "egress", Target: "example.com:8443", Decision: crossing.Deny, Reason: "port-not-allowed"},
			"config: egress.allow has an entry for example.com but none lists port 8443", "config", "ports: [8443]"},
		{crossing.Receipt{Identity: id, Broker: "egress", Target: "example.com:443", Decision: crossing.Deny, Reason: "policy-denied",
			Policy: &crossing.PolicyDecision{Determining: []string{"no-example"}}},
			"cedar: forbidden by no-example", "cedar", ""},
		{crossing.Receipt{Identity: id, Broker: "egress", Target: "example.com:443", Decision: crossing.Deny, Reason: "policy-denied",
			Policy: &crossing.PolicyDecision{}},
			"cedar: no permit matched", "cedar", `resource == Host::"example.com"`},
		{crossing.Receipt{Identity: id, Broker: "egress", Target: "example.com:443", Decision: crossing.Deny, Reason: "budget-exceeded",
			Budget: crossing.BudgetState{Used: crossing.Amount{Connections: 2}, Limits: crossing.Amount{Connections: 2}}},
			"budget: budgets.connections: 2 used of 2 (window 1h0m0s)", "config", "connections: 3"},
		{crossing.Receipt{Identity: id, Broker: "egress", Target: "example.com:443", Decision: crossing.Deny, Reason: "approval-pending apr_0123abcd"},
			"approval: waiting for an operator's approval", "operator", "cordon approvals approve apr_0123abcd"},
		{crossing.Receipt{Identity: id, Broker: "model", Target: "gpt-evil", Decision: crossing.Deny, Reason: `model "gpt-evil" is not allowed for this workload`},
			`config: no models[] route allows model "gpt-evil"`, "config", `models: ["gpt-evil"]`},
		{crossing.Receipt{Identity: id, Broker: "model", Target: "claude-x", Decision: crossing.Deny, Reason: "denied by policy for this workload; nothing was forwarded",
			Policy: &crossing.PolicyDecision{Determining: []string{"no-x"}}},
			"cedar: forbidden by no-x", "cedar", ""},
		{crossing.Receipt{Identity: id, Broker: "model", Target: "claude-x", Decision: crossing.Deny, Reason: "the workload's model budget is exhausted (requests); nothing was forwarded",
			Budget: crossing.BudgetState{Used: crossing.Amount{Requests: 1}, Limits: crossing.Amount{Requests: 1}}},
			"budget: budgets.requests: 1 used of 1 (window 1h0m0s)", "config", "requests: 2"},
		{crossing.Receipt{Identity: id, Broker: "tool", Target: "fs/write", Decision: crossing.Deny, Reason: "denied by policy"},
			"cedar: no permit matched", "cedar", `resource == Tool::"fs/write"`},
	} {
		if got := Rule(c.rc, time.Hour); got != c.rule {
			t.Errorf("Rule(%s %q %q) = %q, want %q", c.rc.Broker, c.rc.Target, c.rc.Reason, got, c.rule)
		}
		s := Suggest(c.rc)
		if s == nil || s.Kind != c.kind || !strings.Contains(s.Text, c.suggests) {
			t.Errorf("Suggest(%s %q %q) = %+v, want kind %s with %q", c.rc.Broker, c.rc.Target, c.rc.Reason, s, c.kind, c.suggests)
		}
	}
	allowed := crossing.Receipt{Broker: "egress", Target: "example.com:443", Decision: crossing.Allow, Reason: "host-not-allowed"}
	if r, s := Rule(allowed, 0), Suggest(allowed); r != "" || s != nil {
		t.Errorf("an allowed receipt: Rule = %q, Suggest = %+v; want none", r, s)
	}
}
