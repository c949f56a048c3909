package policy

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	cedar "github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/types"

	"github.com/cordon-project/cordon/internal/crossing"
)

// Request is one crossing, as policy sees it.
type Request struct {
	// Workload and Tenant make the principal: Workload::"w" in
	// Tenant::"t". Both are required.
	Workload, Tenant string
	// User, when set, is context.user: User::"u" in the same tenant.
	User string
	// Purpose is context.purpose.
	Purpose string
	// Action is one of the Action constants.
	Action string
	// Resource is what the action is on; its Type must be the one the
	// action applies to.
	Resource Resource
	// Context is the rest of the context.
	Context Context
}

// Resource is the resource of a crossing.
type Resource struct {
	// Type is "Model" (model.invoke), "Host" (egress.connect), "Tool"
	// (tool.call), "State" (state.read, state.write) or "Route"
	// (ingress.connect: the inbound route's name).
	Type string `json:"type"`
	// ID is the model id, the host name (the port is in Context; the name
	// is lower-cased and loses one trailing dot), the tool as
	// "server/tool", or the state key ("*": the whole scope). Required.
	ID string `json:"id"`
	// Server is a Tool's MCP server; when empty it is the part of ID
	// before the first "/". ID must be Server, "/" and a tool name.
	Server string `json:"server,omitempty"`
}

// Context is the part of the Cedar context that is not identity. Fields
// that do not apply to an action are their zero value, so a policy can
// read them for every action without `has`.
type Context struct {
	// ArgumentDigest is "sha256:<hex>" of a tool call's arguments.
	ArgumentDigest string `json:"argument_digest,omitempty"`
	// Port is the egress port, 0–65535.
	Port int `json:"port,omitempty"`
	// Budget is the workload's budget state before the crossing.
	Budget crossing.BudgetState `json:"budget"`
}

// The Cedar resource type each action applies to (see the schema).
var resourceTypes = map[string]types.EntityType{
	ActionModelInvoke:    "Model",
	ActionEgressConnect:  "Host",
	ActionToolCall:       "Tool",
	ActionStateRead:      "State",
	ActionStateWrite:     "State",
	ActionIngressConnect: "Route",
}

// Action entity ids, built once.
var actionUIDs = func() map[string]types.EntityUID {
	m := map[string]types.EntityUID{}
	for a := range resourceTypes {
		m[a] = types.NewEntityUID("Action", types.String(a))
	}
	return m
}()

// Decide asks the set about r. It allows only when Cedar allows without an
// evaluation error: any error, and any malformed request, is a deny with
// the reason in d.Errors. d.Determining names the permits that allowed, or
// the forbids that denied; when evaluation errors deny and no forbid
// matched, it names the policies that failed. d.ApprovalRequired is set
// when the request is allowed and a determining permit is annotated
// @approval("required"). Safe for concurrent use.
func (s *Set) Decide(r Request) (allow bool, d crossing.PolicyDecision) {
	allow, d, _ = s.decide(r)
	return allow, d
}

func (s *Set) decide(r Request) (bool, crossing.PolicyDecision, []*entry) {
	d := crossing.PolicyDecision{Digest: s.digest}
	req, ents, err := cedarRequest(r, s.entities, s.budgetRecord)
	if err != nil {
		d.Errors = []string{err.Error()}
		return false, d, nil
	}
	decision, diag := cedar.Authorize(s.policies, ents, req)
	var determining []*entry
	for _, e := range diag.Errors {
		d.Errors = append(d.Errors, fmt.Sprintf("policy %s: %s", e.PolicyID, e.Message))
	}
	allow := decision == cedar.Allow && len(diag.Errors) == 0
	switch {
	case decision == cedar.Deny && len(diag.Reasons) > 0, allow:
		// The forbids that denied, or the permits that allowed.
		for _, reason := range diag.Reasons {
			determining = append(determining, s.byID[reason.PolicyID])
		}
	case len(diag.Errors) > 0:
		for _, e := range diag.Errors {
			determining = append(determining, s.byID[e.PolicyID])
		}
	}
	sandboxScope := true
	for _, e := range determining {
		d.Determining = append(d.Determining, string(e.id))
		if allow && e.approval {
			d.ApprovalRequired = true
			// The narrowest scope wins: one permit asking for an
			// approval per crossing makes it one per crossing.
			sandboxScope = sandboxScope && e.scope == ApprovalScopeSandbox
		}
	}
	if d.ApprovalRequired && sandboxScope && r.Action == ActionEgressConnect {
		d.ApprovalScope = ApprovalScopeSandbox
	}
	return allow, d, determining
}

// cedarRequest checks r and builds the Cedar request and its entities.
// budget builds context.budget.
// HostID is the Host entity id of an egress destination: as the egress
// allow-list compares names, case-insensitively, ignoring one trailing
// dot.
func HostID(host string) string {
	return strings.ToLower(strings.TrimSuffix(host, "."))
}

func cedarRequest(r Request, cache *entityCache, budget func(crossing.BudgetState) types.Record) (cedar.Request, *entities, error) {
	action, ok := actionUIDs[r.Action]
	switch {
	case !ok:
		return cedar.Request{}, nil, fmt.Errorf("request: unknown action %q", r.Action)
	case r.Workload == "" || r.Tenant == "":
		return cedar.Request{}, nil, fmt.Errorf("request: workload and tenant are required")
	case types.EntityType(r.Resource.Type) != resourceTypes[r.Action]:
		return cedar.Request{}, nil, fmt.Errorf("request: action %s applies to a %s, not %q", r.Action, resourceTypes[r.Action], r.Resource.Type)
	case r.Context.Port < 0 || r.Context.Port > 65535:
		return cedar.Request{}, nil, fmt.Errorf("request: port %d is not 0–65535", r.Context.Port)
	}
	id := r.Resource.ID
	if r.Action == ActionEgressConnect {
		id = HostID(id)
	}
	if id == "" {
		return cedar.Request{}, nil, fmt.Errorf("request: resource id is required")
	}
	e := &entities{
		cache:    cache,
		workload: types.NewEntityUID("Workload", types.String(r.Workload)),
		tenant:   types.NewEntityUID("Tenant", types.String(r.Tenant)),
		resource: types.NewEntityUID(types.EntityType(r.Resource.Type), types.String(id)),
	}
	if r.Action == ActionToolCall {
		server := r.Resource.Server
		if server == "" {
			server, _, _ = strings.Cut(id, "/")
		}
		if tool, ok := strings.CutPrefix(id, server+"/"); server == "" || !ok || tool == "" {
			return cedar.Request{}, nil, fmt.Errorf("request: tool %q: want \"server/tool\" with server %q", id, server)
		}
		e.server = types.NewEntityUID("Server", types.String(server))
	}
	n := 4
	if r.User != "" {
		e.user = types.NewEntityUID("User", types.String(r.User))
		n++
	}
	ctx := make(types.RecordMap, n)
	ctx["purpose"] = types.String(r.Purpose)
	ctx["argument_digest"] = types.String(r.Context.ArgumentDigest)
	ctx["port"] = types.Long(r.Context.Port)
	ctx["budget"] = budget(r.Context.Budget)
	if r.User != "" {
		ctx["user"] = e.user
	}
	return cedar.Request{Principal: e.workload, Action: action, Resource: e.resource, Context: types.NewRecord(ctx)}, e, nil
}

var zeroBudget = budgetRecordOf(crossing.BudgetState{})

// budgetRecord returns context.budget. Building it is most of the cost of
// a decision (cedar-go hashes every record), so a set none of whose
// policies reads it gets a zero placeholder of the right type, and the
// last one built is reused while the budget does not change.
func (s *Set) budgetRecord(b crossing.BudgetState) types.Record {
	if !s.readsBudget || b == (crossing.BudgetState{}) {
		return zeroBudget
	}
	if last := s.lastBudget.Load(); last != nil && last.state == b {
		return last.rec
	}
	rec := budgetRecordOf(b)
	s.lastBudget.Store(&budgetEntry{b, rec})
	return rec
}

type budgetEntry struct {
	state crossing.BudgetState
	rec   types.Record
}

func budgetRecordOf(b crossing.BudgetState) types.Record {
	return types.NewRecord(types.RecordMap{
		"used":    amountRecord(b.Used),
		"limits":  amountRecord(b.Limits),
		"streams": types.Long(b.Streams),
	})
}

func amountRecord(a crossing.Amount) types.Record {
	return types.NewRecord(types.RecordMap{
		"requests":            types.Long(a.Requests),
		"input_tokens":        types.Long(a.InputTokens),
		"output_tokens":       types.Long(a.OutputTokens),
		"bytes":               types.Long(a.Bytes),
		"egress_bytes":        types.Long(a.EgressBytes),
		"connections":         types.Long(a.Connections),
		"ingress_connections": types.Long(a.IngressConnections),
		"ingress_bytes":       types.Long(a.IngressBytes),
	})
}

// entities are the entities of one request, built only when a policy
// reads one (an attribute, or `in` through its parents).
type entities struct {
	cache                                    *entityCache
	workload, tenant, user, resource, server types.EntityUID
	res                                      *types.Entity // the resource, once looked up
}

var _ types.EntityGetter = (*entities)(nil)

// Get returns the entity uid names, when it is one of the request's.
func (e *entities) Get(uid types.EntityUID) (types.Entity, bool) {
	var zero types.EntityUID
	switch {
	case uid == zero:
		return types.Entity{}, false
	case uid == e.resource:
		if e.res == nil {
			// A Tool is in its Server; other resources are in nothing.
			ent := e.cache.get(uid, e.server)
			e.res = &ent
		}
		return *e.res, true
	case uid == e.workload, uid == e.user:
		return e.cache.get(uid, e.tenant), true
	case uid == e.tenant, uid == e.server:
		return e.cache.get(uid, zero), true
	}
	return types.Entity{}, false
}

// entityCache holds the entities requests name, which repeat: the
// workload, tenant and user of the gateway, the configured servers, the
// models, hosts and tools in use. Some ids come from the agent, so the
// cache is bounded in entries and in id length; past the bounds entities
// are built for each request, which is slower but decides the same.
type entityCache struct {
	m sync.Map // cacheKey → types.Entity
	n atomic.Int64
}

type cacheKey struct{ uid, parent types.EntityUID }

// The bounds of an entityCache.
const (
	maxCachedEntities = 4096
	maxCachedIDLen    = 256
)

// get returns the entity uid, in parent when parent is set.
func (c *entityCache) get(uid, parent types.EntityUID) types.Entity {
	if c == nil {
		return newEntity(uid, parent)
	}
	k := cacheKey{uid, parent}
	if v, ok := c.m.Load(k); ok {
		return v.(types.Entity)
	}
	ent := newEntity(uid, parent)
	if len(uid.ID)+len(parent.ID) <= maxCachedIDLen && c.n.Load() < maxCachedEntities {
		if _, loaded := c.m.LoadOrStore(k, ent); !loaded {
			c.n.Add(1)
		}
	}
	return ent
}

// newEntity builds the entity uid, in parent when parent is set, with
// the attributes the schema gives its type: name, and for a Tool its
// server and tool.
func newEntity(uid, parent types.EntityUID) types.Entity {
	ent := types.Entity{UID: uid}
	if parent != (types.EntityUID{}) {
		ent.Parents = types.NewEntityUIDSet(parent)
	}
	if uid.Type == "Tool" {
		ent.Attributes = types.NewRecord(types.RecordMap{
			"name":   uid.ID,
			"server": parent.ID,
			"tool":   types.String(strings.TrimPrefix(string(uid.ID), string(parent.ID)+"/")),
		})
	} else {
		ent.Attributes = types.NewRecord(types.RecordMap{"name": uid.ID})
	}
	return ent
}
