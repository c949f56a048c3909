package gateway

import (
	"fmt"
	"strings"

	"github.com/cordon-project/cordon/internal/broker/egress"
	"github.com/cordon-project/cordon/internal/broker/model"
	"github.com/cordon-project/cordon/internal/broker/state"
	"github.com/cordon-project/cordon/internal/policy"
)

// Admission is the configuration's half of a crossing's decision: what
// the brokers and this side check besides Cedar policy (the models
// allow-list, the egress allow-list and address checks, the tools
// offered, the state scope). Both halves must allow. For `cordon policy
// explain`, whose verdict must be the runtime's: it runs the brokers'
// own checks.
type Admission struct {
	Allow bool `json:"allow"`
	// Check names the configuration that decided: "models", "egress",
	// "tools", "state" or "ingress".
	Check string `json:"check"`
	// Rule is the allowing (or nearest) rule: a route, an egress pattern,
	// a tool server.
	Rule string `json:"rule,omitempty"`
	// Reason says why it refuses; empty when it allows.
	Reason string `json:"reason,omitempty"`
	// Notes are checks made only when the crossing happens.
	Notes []string `json:"notes,omitempty"`
}

// AdmitRequest is the crossing Admit decides about.
type AdmitRequest struct {
	Action   string
	Resource string // model id, host, "server/tool", state key or "*"
	Server   string // tool: its server (default: Resource before "/")
	Port     int    // egress
	// API is a model call's protocol ("anthropic", "openai"); "" means
	// any configured route.
	API string
	// Operation is a state operation (get, put, delete, list, export,
	// reset); "" means get for state.read and put for state.write.
	Operation string
}

// Admit decides r against the configuration as the runtime does before
// (and besides) policy. tools and sp are the privileged side's tool and
// state configuration (nil: none).
func Admit(cfg ChildConfig, tools *ToolPolicy, sp *StatePolicy, r AdmitRequest) Admission {
	switch r.Action {
	case policy.ActionModelInvoke:
		a := Admission{Check: "models"}
		var routes []model.Route
		for _, rt := range cfg.Model.Routes {
			routes = append(routes, model.Route{Name: rt.Name, API: rt.API, Models: rt.Models})
		}
		if !model.ValidModelID(r.Resource) {
			a.Reason = "the model broker refuses this model id: a model id is 1–256 bytes of UTF-8"
			return a
		}
		if name, ok := model.RouteFor(routes, r.API, r.Resource); ok {
			a.Allow, a.Rule = true, name
			return a
		}
		a.Reason = fmt.Sprintf("no models[] route allows model %q", r.Resource)
		if r.API != "" {
			a.Reason += " over the " + r.API + " API"
		}
		return a
	case policy.ActionEgressConnect:
		a := Admission{Check: "egress"}
		if r.Port < 1 || r.Port > 65535 {
			a.Reason = fmt.Sprintf("port %d: a connection names a port 1–65535 (context.port)", r.Port)
			return a
		}
		rule, reason, checked, err := egress.Admits(cfg.Egress.Allow, cfg.Egress.UnsafeAllowRanges, cfg.Egress.Resolve, r.Resource, r.Port)
		a.Rule = rule
		switch {
		case err != nil:
			a.Reason = err.Error()
		case reason != "":
			a.Reason = reason
		default:
			a.Allow = true
			if !checked {
				a.Notes = append(a.Notes, "the name is resolved when the connection is made: an address in a denied range (loopback, private, link-local, metadata, …) then refuses it (address-denied)")
			}
		}
		return a
	case policy.ActionIngressConnect:
		return admitIngress(cfg, r)
	case policy.ActionToolCall:
		a := Admission{Check: "tools"}
		server, name := r.Server, ""
		if server == "" {
			server, name, _ = strings.Cut(r.Resource, "/")
		} else {
			name = strings.TrimPrefix(r.Resource, server+"/")
		}
		a.Rule = server
		switch {
		case tools == nil || !tools.Servers[server]:
			a.Reason = fmt.Sprintf("no tools[] server is named %q", server)
		case !tools.Offered(server, name):
			a.Reason = fmt.Sprintf("tools[%s].allow does not offer tool %q", server, name)
		default:
			a.Allow = true
		}
		return a
	case policy.ActionStateRead, policy.ActionStateWrite:
		a := Admission{Check: "state"}
		if sp == nil {
			a.Reason = "this sandbox has no managed state"
			return a
		}
		op := r.Operation
		if op == "" {
			op = state.OpGet
			if r.Action == policy.ActionStateWrite {
				op = state.OpPut
			}
		}
		sr := state.Request{Op: op}
		if r.Resource != state.ScopeTarget {
			sr.Key = r.Resource
		}
		action, target, err := sp.Ask(sr)
		switch {
		case err != nil:
			a.Reason = err.Error()
		case action != r.Action || target != r.Resource:
			a.Reason = fmt.Sprintf("operation %s on %q is %s on %q, not %s", op, r.Resource, action, target, r.Action)
		case op == state.OpPut && (sp.QuotaBytes <= 0 || sp.QuotaEntries <= 0 || sp.MaxValueBytes <= 0):
			a.Reason = "state: this scope has no quota: every put is refused"
		default:
			a.Allow = true
			if op == state.OpPut {
				a.Notes = append(a.Notes, fmt.Sprintf("a put is also bounded when it is made: a value of at most %d bytes, the scope's quota of %d bytes and %d entries",
					min(sp.MaxValueBytes, state.MaxValueBytesLimit), sp.QuotaBytes, sp.QuotaEntries))
			}
		}
		return a
	}
	return Admission{Reason: fmt.Sprintf("unknown action %q", r.Action)}
}

// admitIngress is an ingress.connect: the route must be declared (and
// lead to the port, when one is asked about).
func admitIngress(cfg ChildConfig, r AdmitRequest) Admission {
	a := Admission{Check: "ingress", Rule: r.Resource}
	for _, route := range cfg.Ingress.Routes {
		if route.Name != r.Resource {
			continue
		}
		if r.Port != 0 && r.Port != route.Port {
			a.Reason = fmt.Sprintf("route %s leads to port %d, not %d", route.Name, route.Port, r.Port)
			return a
		}
		a.Allow = true
		a.Notes = append(a.Notes, fmt.Sprintf("each connection is also bounded by the route's max_concurrent (%d) when it is made", route.MaxConcurrent))
		return a
	}
	a.Reason = fmt.Sprintf("no ingress[] route is named %q", r.Resource)
	return a
}
