package gateway

import (
	"context"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/denial"
	"github.com/cordon-project/cordon/internal/policy"
	"github.com/cordon-project/cordon/internal/store"
)

// A denial's receipt on record carries the policy decision the broker
// says it was refused with; the privileged side named the rule from it.
// A compromised broker process recorded denials "forbidden by" ids of
// its choosing — a permit of the operator's set, or no policy at all —
// and the operator's terminal showed that forbid as the rule, with the
// suggestion to narrow or remove it. Observed in the store: a claimed
// determining id that is not a forbid of this side's set is not named as
// the rule (it is kept as an error naming the claim, which suggests
// nothing). Control: a real forbid of the set is named.
func TestClaimedForbidMustBeAForbidOfTheSet(t *testing.T) {
	set, err := policy.LoadSources(policy.Source{Name: "p.cedar", Data: []byte(`@id("all") permit (principal, action, resource);
@id("no-evil") forbid (principal, action, resource == Host::"evil.example");
`)})
	if err != nil {
		t.Fatal(err)
	}
	st := testStore(t)
	id := crossing.Identity{Workload: "w", Tenant: "t", SandboxID: "sb-claim"}
	srv := &Authority{Store: st, ID: id, Policy: set}
	c := connect(t, srv)
	ctx := context.Background()
	for _, claim := range []string{"all", "made-up", "no-evil"} {
		if err := c.Record(ctx, crossing.Receipt{Broker: "egress", Action: "connect", Target: "x.example:443", Decision: crossing.Deny,
			Reason: "policy-denied", Policy: &crossing.PolicyDecision{Determining: []string{claim}}}); err != nil {
			t.Fatal(err)
		}
	}
	// Control: a denial after policy allowed (an approval wait) keeps the
	// permits that allowed, as sent.
	if err := c.Record(ctx, crossing.Receipt{Broker: "egress", Action: "connect", Target: "x.example:443", Decision: crossing.Deny,
		Reason: "approval-pending apr_01", Policy: &crossing.PolicyDecision{Determining: []string{"all"}, ApprovalRequired: true}}); err != nil {
		t.Fatal(err)
	}
	rs, err := st.Receipts(ctx, store.ReceiptFilter{SandboxID: id.SandboxID})
	if err != nil || len(rs) != 4 {
		t.Fatalf("receipts = %d, %v", len(rs), err)
	}
	for _, rc := range rs[:2] {
		claim := rc.Policy.Errors
		if strings.Contains(rc.Rule, "forbidden by") {
			t.Errorf("receipt %d: rule %q names a forbid the set does not hold", rc.ID, rc.Rule)
		}
		if s := denial.Suggest(rc); s != nil && strings.Contains(s.Note, "narrow or remove") {
			t.Errorf("receipt %d: suggestion %+v asks to remove a policy", rc.ID, s)
		}
		if len(claim) == 0 {
			t.Errorf("receipt %d: the claim is not kept (policy %+v)", rc.ID, rc.Policy)
		}
	}
	if want := "cedar: forbidden by no-evil"; rs[2].Rule != want {
		t.Errorf("control: rule %q, want %q", rs[2].Rule, want)
	}
	if p := rs[3].Policy; p == nil || len(p.Determining) != 1 || p.Determining[0] != "all" || len(p.Errors) != 0 {
		t.Errorf("control: an approval wait's policy = %+v, want the permit kept", p)
	}
}
