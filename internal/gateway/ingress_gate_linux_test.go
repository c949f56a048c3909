package gateway

import (
	"context"
	"errors"
	"testing"

	"github.com/cordon-project/cordon/internal/broker/ingress"
	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/gateway/dial"
)

// A compromised ingress broker process speaks to the checked dialer
// itself. Its dialer was open to every declared port: it could connect
// into the sandbox with no policy decision, no budget and no receipt —
// to a route policy forbids, past the connection budget and past
// max_concurrent, each socket created by root in the sandbox's netns.
// Now the root side grants one dial per connection the authority
// admitted, for the admitted route's port only, withdrawn when the
// reservation settles; the admission itself must name a declared route
// at its own port, and the route's max_concurrent is counted here.
// Observed at the dialer's policy (the root side) and the authority;
// the positive control is the admitted connection's one dial.
func TestIngressDialNeedsAnAdmittedConnection(t *testing.T) {
	st := testStore(t)
	id := crossing.Identity{Workload: "w", Tenant: "t", Purpose: "p", SandboxID: "sb-ingress-gate"}
	routes := []ingress.Route{{Name: "ui", Port: 18789, MaxConcurrent: 2}, {Name: "admin", Port: 9000, MaxConcurrent: 2}}
	gate := newIngressGate(routes)
	srv := &Authority{Store: st, ID: id, ingress: gate}
	c := connect(t, srv)
	d := newIngressDial(routes, gate)
	ctx := context.Background()
	refused := func(port int, why string) {
		t.Helper()
		_, err := d.Plan(ctx, "127.0.0.1", port)
		var r *dial.Refused
		if !errors.As(err, &r) || r.Why != ReasonNotAdmitted {
			t.Errorf("%s: dial 127.0.0.1:%d = %v, want refused as %s", why, port, err, ReasonNotAdmitted)
		}
	}
	admit := func(route string, port int) (crossing.Reservation, error) {
		ask := crossing.WithAsk(ctx, crossing.Ask{Action: ingress.Action, Resource: ingress.Resource, Target: route, Port: port})
		r, _, err := c.Reserve(ask, id, ingress.Name, crossing.Amount{IngressConnections: 1}, 0)
		return r, err
	}

	// The attack: dial with nothing admitted.
	refused(18789, "no admission")
	refused(9000, "no admission")

	// Control: an admitted connection dials its route's port, once.
	r1, err := admit("ui", 18789)
	if err != nil {
		t.Fatalf("admit ui: %v", err)
	}
	refused(9000, "an admission of ui opens admin")
	if plan, err := d.Plan(ctx, "127.0.0.1", 18789); err != nil || len(plan) != 1 {
		t.Fatalf("control: the admitted connection's dial = %v, %v", plan, err)
	}
	refused(18789, "a second dial of one admission")

	// An admission names a declared route at its own port.
	if _, err := admit("ui", 9000); !errors.Is(err, crossing.ErrPolicyDenied) {
		t.Errorf("admit route ui at admin's port = %v, want ErrPolicyDenied", err)
	}
	if _, err := admit("nope", 18789); !errors.Is(err, crossing.ErrPolicyDenied) {
		t.Errorf("admit an undeclared route = %v, want ErrPolicyDenied", err)
	}

	// max_concurrent (2) is counted here: a third open connection of ui
	// is refused while two are open; admin's are its own.
	r2, err := admit("ui", 18789)
	if err != nil {
		t.Fatalf("second connection of ui: %v", err)
	}
	if _, err := admit("ui", 18789); !errors.Is(err, crossing.ErrPolicyDenied) {
		t.Errorf("third open connection of ui (max_concurrent 2) = %v, want ErrPolicyDenied", err)
	}
	if _, err := admit("admin", 9000); err != nil {
		t.Errorf("admin's first connection: %v", err)
	}

	// A settled admission's unused dial is withdrawn.
	if _, err := c.Settle(ctx, r2, crossing.Amount{IngressConnections: 1}); err != nil {
		t.Fatal(err)
	}
	refused(18789, "the dial of a settled admission")
	if _, err := c.Settle(ctx, r1, crossing.Amount{IngressConnections: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := admit("ui", 18789); err != nil {
		t.Errorf("control: a connection of ui once the others settled: %v", err)
	}

	// A sandbox that declares no route admits no ingress connection.
	none := &Authority{Store: st, ID: crossing.Identity{Workload: "w", Tenant: "t", Purpose: "p", SandboxID: "sb-no-routes"}}
	nc := connect(t, none)
	ask := crossing.WithAsk(ctx, crossing.Ask{Action: ingress.Action, Resource: ingress.Resource, Target: "ui", Port: 18789})
	if _, _, err := nc.Reserve(ask, none.ID, ingress.Name, crossing.Amount{IngressConnections: 1}, 0); !errors.Is(err, crossing.ErrPolicyDenied) {
		t.Errorf("an ingress connection of a sandbox without routes = %v, want ErrPolicyDenied", err)
	}
}

// A compromised ingress broker process writes its connections' receipts.
// It could name another route (or another action) than the connection
// the authority admitted — a connection through "ui" receipted as one
// through "admin" — and record refusals of routes the sandbox does not
// declare. Now an admitted connection's receipt carries the route the
// authority admitted and the action connect, and a refusal must name a
// declared route. Observed in the store; the control is the honest
// receipts, written as sent.
func TestIngressReceiptNamesTheAdmittedRoute(t *testing.T) {
	st := testStore(t)
	id := crossing.Identity{Workload: "w", Tenant: "t", Purpose: "p", SandboxID: "sb-ingress-receipt"}
	routes := []ingress.Route{{Name: "ui", Port: 18789, MaxConcurrent: 4}, {Name: "admin", Port: 9000, MaxConcurrent: 4}}
	srv := &Authority{Store: st, ID: id, ingress: newIngressGate(routes)}
	c := connect(t, srv)
	ctx := context.Background()
	ask := crossing.WithAsk(ctx, crossing.Ask{Action: ingress.Action, Resource: ingress.Resource, Target: "ui", Port: 18789})
	cross := func(target, action string) *crossing.Receipt {
		t.Helper()
		r, _, err := c.Reserve(ask, id, ingress.Name, crossing.Amount{IngressConnections: 1}, 0)
		if err != nil {
			t.Fatal(err)
		}
		rc := crossing.Receipt{Broker: ingress.Name, Action: action, Target: target, Client: "127.0.0.1:40000", Decision: crossing.Allow, Reason: ingress.ReasonOK}
		if _, err := c.SettleRecord(ctx, r, crossing.Amount{IngressConnections: 1}, rc); err != nil {
			t.Fatal(err)
		}
		return lastReceipt(t, st)
	}
	if rc := cross("ui", ingress.ReceiptAction); rc.Target != "ui" || rc.Action != ingress.ReceiptAction {
		t.Fatalf("control: honest receipt = %s %s", rc.Action, rc.Target)
	}
	if rc := cross("admin", "bind"); rc.Target != "ui" || rc.Action != ingress.ReceiptAction {
		t.Errorf("receipt of a ui connection sent as %q %q = %s %s, want connect ui", "bind", "admin", rc.Action, rc.Target)
	}

	deny := func(target string) error {
		return c.Record(ctx, crossing.Receipt{Broker: ingress.Name, Action: ingress.ReceiptAction, Target: target, Decision: crossing.Deny, Reason: ingress.ReasonConcurrencyLimit})
	}
	if err := deny("admin"); err != nil {
		t.Fatalf("control: refusal of a declared route: %v", err)
	}
	if rc := lastReceipt(t, st); rc.Target != "admin" || rc.Decision != crossing.Deny {
		t.Fatalf("control: refusal receipt = %+v", rc)
	}
	if err := deny("not-a-route"); err == nil {
		t.Error("refusal of an undeclared route recorded; want it refused")
	}
	if rc := lastReceipt(t, st); rc.Target == "not-a-route" {
		t.Errorf("the store holds a receipt of an undeclared route: %+v", rc)
	}
}
