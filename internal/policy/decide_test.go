package policy

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	cedar "github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/types"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/cordon-project/cordon/internal/config"
	"github.com/cordon-project/cordon/internal/crossing"
)

// decideSet exercises every part of the request.
const decideSet = `
@id("models")
permit (principal in Tenant::"acme", action == Action::"model.invoke", resource)
when { resource.name like "claude-*" };

@id("no-opus")
forbid (principal, action == Action::"model.invoke", resource)
when { resource.name like "*opus*" };

@id("egress")
permit (principal == Workload::"demo", action == Action::"egress.connect", resource)
when { resource.name like "*.example.org" && context.port == 443 };

@id("fs")
permit (principal, action == Action::"tool.call", resource in Server::"fs");

@id("fs.write")
@approval("required")
permit (principal, action == Action::"tool.call", resource in Server::"fs")
when { resource.tool == "write_file" || resource.tool == "delete_file" };

@id("fs.no-delete")
forbid (principal, action == Action::"tool.call", resource)
when { resource.server == "fs" && resource.tool == "delete_file" };

@id("git.push")
@approval("required")
permit (principal, action == Action::"tool.call", resource == Tool::"git/push")
when { context.argument_digest like "sha256:*" };

@id("budget")
forbid (principal, action, resource)
when { context.budget.limits.requests > 0 && context.budget.used.requests >= context.budget.limits.requests };

@id("state")
permit (principal, action in [Action::"state.read", Action::"state.write"], resource)
when { context.purpose == "coding" };

// Validates, but overflows at evaluation when bytes > 0.
@id("overflow")
forbid (principal, action == Action::"state.write", resource)
when { context.budget.used.bytes + 9223372036854775807 < 0 };
`

func mustLoad(t testing.TB, src string) *Set {
	t.Helper()
	dir := t.TempDir()
	p := filepath.Join(dir, "decide.cedar")
	if err := writeFile(p, src); err != nil {
		t.Fatal(err)
	}
	s, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func req(action, typ, id string) Request {
	return Request{Workload: "demo", Tenant: "acme", Purpose: "coding", Action: action, Resource: Resource{Type: typ, ID: id}}
}

func TestDecide(t *testing.T) {
	s := mustLoad(t, decideSet)
	with := func(r Request, f func(*Request)) Request { f(&r); return r }
	tests := []struct {
		name        string
		r           Request
		allow       bool
		determining []string
		approval    bool
		errs        []string // substrings, one per error
	}{
		{"model permitted", req(ActionModelInvoke, "Model", "claude-sonnet-4-5"), true, []string{"models"}, false, nil},
		{"forbid overrides permit", req(ActionModelInvoke, "Model", "claude-opus-4"), false, []string{"no-opus"}, false, nil},
		{"nothing permits: default deny", req(ActionModelInvoke, "Model", "gpt-5"), false, nil, false, nil},
		{"other tenant", with(req(ActionModelInvoke, "Model", "claude-sonnet-4-5"), func(r *Request) { r.Tenant = "other" }), false, nil, false, nil},
		{"egress permitted", with(req(ActionEgressConnect, "Host", "a.example.org"), func(r *Request) { r.Context.Port = 443 }), true, []string{"egress"}, false, nil},
		{"egress host normalised", with(req(ActionEgressConnect, "Host", "A.Example.ORG."), func(r *Request) { r.Context.Port = 443 }), true, []string{"egress"}, false, nil},
		{"egress wrong port", with(req(ActionEgressConnect, "Host", "a.example.org"), func(r *Request) { r.Context.Port = 80 }), false, nil, false, nil},
		{"egress other workload", with(req(ActionEgressConnect, "Host", "a.example.org"), func(r *Request) { r.Context.Port = 443; r.Workload = "x" }), false, nil, false, nil},
		{"tool permitted without approval", req(ActionToolCall, "Tool", "fs/read_file"), true, []string{"fs"}, false, nil},
		{"one determining permit requires approval", req(ActionToolCall, "Tool", "fs/write_file"), true, []string{"fs", "fs.write"}, true, nil},
		{"a forbid wins over an approval permit", req(ActionToolCall, "Tool", "fs/delete_file"), false, []string{"fs.no-delete"}, false, nil},
		{"server from the Server field", Request{Workload: "demo", Tenant: "acme", Action: ActionToolCall, Resource: Resource{Type: "Tool", ID: "fs/read_file", Server: "fs"}}, true, []string{"fs"}, false, nil},
		{"approval permit not matching", req(ActionToolCall, "Tool", "git/push"), false, nil, false, nil},
		{"approval permit matching", with(req(ActionToolCall, "Tool", "git/push"), func(r *Request) { r.Context.ArgumentDigest = "sha256:ab" }), true, []string{"git.push"}, true, nil},
		{"budget exhausted", with(req(ActionModelInvoke, "Model", "claude-sonnet-4-5"), func(r *Request) {
			r.Context.Budget = crossing.BudgetState{Used: crossing.Amount{Requests: 10}, Limits: crossing.Amount{Requests: 10}}
		}), false, []string{"budget"}, false, nil},
		{"budget left", with(req(ActionModelInvoke, "Model", "claude-sonnet-4-5"), func(r *Request) {
			r.Context.Budget = crossing.BudgetState{Used: crossing.Amount{Requests: 9}, Limits: crossing.Amount{Requests: 10}}
		}), true, []string{"models"}, false, nil},
		{"state", req(ActionStateRead, "State", "notes"), true, []string{"state"}, false, nil},
		{"state other purpose", with(req(ActionStateRead, "State", "notes"), func(r *Request) { r.Purpose = "research" }), false, nil, false, nil},
		{"state write", req(ActionStateWrite, "State", "notes"), true, []string{"state"}, false, nil},
		{"evaluation error denies", with(req(ActionStateWrite, "State", "notes"), func(r *Request) {
			r.Context.Budget.Used.Bytes = 1
		}), false, []string{"overflow"}, false, []string{"policy overflow: "}},
		{"unknown action", req("model.call", "Model", "claude-sonnet-4-5"), false, nil, false, []string{`unknown action "model.call"`}},
		{"wrong resource type", req(ActionModelInvoke, "Tool", "claude-sonnet-4-5"), false, nil, false, []string{"applies to a Model"}},
		{"no resource id", req(ActionModelInvoke, "Model", ""), false, nil, false, []string{"resource id is required"}},
		{"no workload", with(req(ActionModelInvoke, "Model", "claude-sonnet-4-5"), func(r *Request) { r.Workload = "" }), false, nil, false, []string{"workload and tenant"}},
		{"bad port", with(req(ActionEgressConnect, "Host", "a.example.org"), func(r *Request) { r.Context.Port = 70000 }), false, nil, false, []string{"port 70000"}},
		{"tool without server", req(ActionToolCall, "Tool", "read_file"), false, nil, false, []string{`want "server/tool"`}},
		{"tool of another server", Request{Workload: "demo", Tenant: "acme", Action: ActionToolCall, Resource: Resource{Type: "Tool", ID: "fs/read_file", Server: "git"}}, false, nil, false, []string{`with server "git"`}},
		{"tool without a name", req(ActionToolCall, "Tool", "fs/"), false, nil, false, []string{`want "server/tool"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			allow, d := s.Decide(tt.r)
			if allow != tt.allow {
				t.Errorf("Decide(%+v) allow = %v, want %v (%+v)", tt.r, allow, tt.allow, d)
			}
			if diff := cmp.Diff(tt.determining, d.Determining, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Decide(%+v) determining (-want +got):\n%s", tt.r, diff)
			}
			if d.ApprovalRequired != tt.approval {
				t.Errorf("Decide(%+v) approval = %v, want %v", tt.r, d.ApprovalRequired, tt.approval)
			}
			if d.Digest != s.Digest() {
				t.Errorf("Decide digest = %q, want %q", d.Digest, s.Digest())
			}
			if len(d.Errors) != len(tt.errs) {
				t.Fatalf("Decide(%+v) errors = %q, want %q", tt.r, d.Errors, tt.errs)
			}
			for i, e := range tt.errs {
				if !strings.Contains(d.Errors[i], e) {
					t.Errorf("Decide(%+v) error %q, want %q", tt.r, d.Errors[i], e)
				}
			}
		})
	}
}

// unchecked builds a Set without schema validation, to reach evaluation
// errors the validator would refuse at load.
func unchecked(t *testing.T, src string) *Set {
	t.Helper()
	list, err := cedar.NewPolicyListFromBytes("u.cedar", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	s := &Set{digest: "sha256:unchecked", byID: map[cedar.PolicyID]*entry{}, entities: &entityCache{}}
	for i, p := range list {
		e := &entry{id: cedar.PolicyID(fmt.Sprintf("u%d", i)), policy: p, forbid: p.Effect() == cedar.Forbid}
		s.policies = append(s.policies, e)
		s.byID[e.id] = e
	}
	return s
}

func TestEvaluationErrorIsDeny(t *testing.T) {
	tests := []struct {
		name        string
		src         string
		determining []string
	}{
		{"permit reading an absent optional attribute", `permit (principal, action, resource) when { context.user.name == "ada" };`, []string{"u0"}},
		{"forbid erroring beside a matching permit", "permit (principal, action, resource);\nforbid (principal, action, resource) when { context.user.name == \"ada\" };", []string{"u1"}},
		{"matching forbid beside an erroring policy", "forbid (principal, action, resource);\npermit (principal, action, resource) when { context.user.name == \"ada\" };", []string{"u0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := unchecked(t, tt.src)
			allow, d := s.Decide(req(ActionModelInvoke, "Model", "m"))
			if allow || len(d.Errors) == 0 || !strings.Contains(d.Errors[0], "user") {
				t.Errorf("Decide = %v, %+v; want a deny with the error recorded", allow, d)
			}
			if diff := cmp.Diff(tt.determining, d.Determining); diff != "" {
				t.Errorf("determining (-want +got):\n%s", diff)
			}
		})
	}
}

// TestIngressRoutePolicy: a forbid on one route denies it; the other
// route, and the same route with the permit only, are allowed (positive
// control); the ingress budget is readable as context.budget.
func TestIngressRoutePolicy(t *testing.T) {
	s := mustLoad(t, `@id("all")
permit (principal, action, resource);
@id("no-admin")
forbid (principal, action == Action::"ingress.connect", resource == Route::"admin");
@id("ingress-budget")
forbid (principal, action == Action::"ingress.connect", resource)
when { context.budget.limits.ingress_connections > 0 && context.budget.used.ingress_connections >= context.budget.limits.ingress_connections };
`)
	r := func(route string, used int64) Request {
		x := req(ActionIngressConnect, "Route", route)
		x.Context.Port = 8080
		x.Context.Budget = crossing.BudgetState{Used: crossing.Amount{IngressConnections: used}, Limits: crossing.Amount{IngressConnections: 3}}
		return x
	}
	for _, c := range []struct {
		r     Request
		allow bool
		by    string
	}{
		{r("ui", 0), true, "all"},
		{r("admin", 0), false, "no-admin"},
		{r("ui", 3), false, "ingress-budget"},
	} {
		allow, d := s.Decide(c.r)
		if allow != c.allow || len(d.Determining) == 0 || d.Determining[0] != c.by {
			t.Errorf("Decide(%s on %s, used %d) = %v by %v, want %v by %s", c.r.Action, c.r.Resource.ID, c.r.Context.Budget.Used.IngressConnections, allow, d.Determining, c.allow, c.by)
		}
	}
	if allow, _ := s.Decide(req(ActionIngressConnect, "Host", "ui")); allow {
		t.Error("ingress.connect on a Host allowed; want the Route type only")
	}
}

func TestDefaultAllowsEverything(t *testing.T) {
	s := Default()
	for _, r := range allActions() {
		allow, d := s.Decide(r)
		if !allow || len(d.Determining) != 1 || d.Determining[0] != "cordon.default" || d.ApprovalRequired || len(d.Errors) > 0 || d.Digest != s.Digest() {
			t.Errorf("Default().Decide(%+v) = %v, %+v; want allow by cordon.default", r, allow, d)
		}
	}
	if s.Len() != 1 {
		t.Errorf("Default().Len() = %d", s.Len())
	}
}

// allActions returns a well-formed request for each action, with and
// without the optional parts.
func allActions() []Request {
	b := crossing.BudgetState{Used: crossing.Amount{Requests: 3, InputTokens: 40, Bytes: 7}, Limits: crossing.Amount{Requests: 100}, Streams: 1}
	rs := []Request{
		req(ActionModelInvoke, "Model", "claude-sonnet-4-5"),
		{Workload: "demo", Tenant: "acme", User: "ada", Purpose: "coding", Action: ActionEgressConnect, Resource: Resource{Type: "Host", ID: "api.github.com"}, Context: Context{Port: 443, Budget: b}},
		{Workload: "demo", Tenant: "acme", Action: ActionToolCall, Resource: Resource{Type: "Tool", ID: "fs/read_file", Server: "fs"}, Context: Context{ArgumentDigest: "sha256:00"}},
		{Workload: "demo", Tenant: "acme", User: "ada", Action: ActionStateRead, Resource: Resource{Type: "State", ID: "notes"}, Context: Context{Budget: b}},
		req(ActionStateWrite, "State", "notes"),
		{Workload: "demo", Tenant: "acme", Action: ActionIngressConnect, Resource: Resource{Type: "Route", ID: "ui"},
			Context: Context{Port: 18789, Budget: crossing.BudgetState{Used: crossing.Amount{IngressConnections: 2, IngressBytes: 9}, Limits: crossing.Amount{IngressConnections: 5}}}},
	}
	return rs
}

// TestRequestConformsToSchema checks that what Decide gives Cedar — the
// request, its context and every entity — validates against the schema,
// so policies that validate cannot meet a value of another type.
func TestRequestConformsToSchema(t *testing.T) {
	v, err := schemaValidator()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range allActions() {
		cr, ents, err := cedarRequest(r, &entityCache{}, budgetRecordOf)
		if err != nil {
			t.Fatalf("cedarRequest(%+v) = %v", r, err)
		}
		if err := v.Request(cr); err != nil {
			t.Errorf("validate request %+v: %v", r, err)
		}
		m := types.EntityMap{}
		for _, uid := range []types.EntityUID{ents.workload, ents.tenant, ents.user, ents.resource, ents.server} {
			if e, ok := ents.Get(uid); ok {
				m[uid] = e
			}
		}
		if len(m) < 3 {
			t.Errorf("entities of %+v: %v", r, m)
		}
		if err := v.Entities(m); err != nil {
			t.Errorf("validate entities of %+v: %v", r, err)
		}
	}
}

func TestExplain(t *testing.T) {
	s := mustLoad(t, decideSet)
	x := s.Explain(req(ActionToolCall, "Tool", "fs/write_file"))
	if !x.Allow || !x.Decision.ApprovalRequired || len(x.Policies) != 2 {
		t.Fatalf("Explain = %+v", x)
	}
	p := x.Policies[1]
	if p.ID != "fs.write" || p.Effect != "permit" || !p.ApprovalRequired || filepath.Base(p.File) != "decide.cedar" || p.Line != 17 || p.Column != 1 {
		t.Errorf("Explained = %+v; want fs.write, a permit at decide.cedar:17:1 requiring approval", p)
	}
	if !strings.Contains(p.Source, `resource.tool == "write_file"`) || !strings.Contains(p.Source, `@approval("required")`) {
		t.Errorf("Source = %q", p.Source)
	}
	x = s.Explain(req(ActionToolCall, "Tool", "fs/delete_file"))
	if x.Allow || len(x.Policies) != 1 || x.Policies[0].Effect != "forbid" {
		t.Errorf("Explain(delete) = %+v; want a deny by a forbid", x)
	}
}

// TestDefaultExampleMatchesConfigs checks examples/policy/default.cedar
// against the allow-lists of the example configurations: it must allow
// exactly what one of them allows.
func TestDefaultExampleMatchesConfigs(t *testing.T) {
	s, err := Load("../../examples/policy/default.cedar")
	if err != nil {
		t.Fatal(err)
	}
	var cfgs []*config.Config
	for _, f := range []string{"anthropic", "openai", "gemini", "egress"} {
		c, err := config.Load("../../examples/" + f + ".yaml")
		if err != nil {
			t.Fatal(err)
		}
		cfgs = append(cfgs, c)
	}
	for _, id := range []string{"claude-sonnet-4-5", "claude-opus-4-1", "claude", "gpt-5", "gpt-5-mini", "gpt-4o", "o4-mini", "o4-mini-high", "xclaude-1",
		"gemini-2.5-flash", "gemini-3-pro-preview", "gemini-3.1-pro-preview", "gemini-1.5-pro", "gemini-2.5"} {
		want := false
		for _, c := range cfgs {
			for _, m := range c.Models {
				want = want || m.Allows(id)
			}
		}
		if got, d := s.Decide(req(ActionModelInvoke, "Model", id)); got != want {
			t.Errorf("model %s: policy allows %v (%v), config %v", id, got, d.Determining, want)
		}
	}
	for _, host := range []string{"api.github.com", "github.com", "example.org", "a.example.org", "a.b.example.org", "aexample.org", "evil.com"} {
		for _, port := range []int{80, 443, 8443} {
			want := false
			for _, c := range cfgs {
				for _, r := range c.Egress.Allow {
					want = want || r.Match(host, port)
				}
			}
			r := req(ActionEgressConnect, "Host", host)
			r.Context.Port = port
			if got, d := s.Decide(r); got != want {
				t.Errorf("egress %s:%d: policy allows %v (%v), config %v", host, port, got, d.Determining, want)
			}
		}
	}
}

func TestApprovalsExample(t *testing.T) {
	s, err := Load("../../examples/policy/approvals.cedar")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		tool            string
		allow, approval bool
	}{
		{"fs/read_text_file", true, false},
		{"fs/write_file", true, true},
		{"fs/delete_file", false, false},
		{"fs/unknown", false, false},
		{"git/read_text_file", false, false},
	}
	for _, tt := range tests {
		allow, d := s.Decide(req(ActionToolCall, "Tool", tt.tool))
		if allow != tt.allow || d.ApprovalRequired != tt.approval {
			t.Errorf("Decide(%s) = %v, %+v; want allow %v, approval %v", tt.tool, allow, d, tt.allow, tt.approval)
		}
	}
}

func TestDecideConcurrent(t *testing.T) {
	s := mustLoad(t, decideSet)
	type want struct {
		allow    bool
		decision crossing.PolicyDecision
	}
	rs := allActions()
	rs = append(rs, req(ActionToolCall, "Tool", "fs/write_file"), req(ActionModelInvoke, "Model", "claude-opus-4"))
	wants := make([]want, len(rs))
	for i, r := range rs {
		wants[i].allow, wants[i].decision = s.Decide(r)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 16)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				k := (g + i) % len(rs)
				allow, d := s.Decide(rs[k])
				if allow != wants[k].allow || !cmp.Equal(d, wants[k].decision) {
					errs <- fmt.Sprintf("Decide(%+v) = %v, %+v; want %+v", rs[k], allow, d, wants[k])
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// BenchmarkDecide measures one decision against the example policies
// (default and approvals, 9 policies); target p50 ≤ 5µs. Each case
// reports the median and 99th percentile of single decisions besides the
// mean. "budget" adds a policy reading context.budget and changes the
// budget on every call, the costliest case.
func BenchmarkDecide(b *testing.B) {
	files := []string{"../../examples/policy/default.cedar", "../../examples/policy/approvals.cedar"}
	s, err := Load(files...)
	if err != nil {
		b.Fatal(err)
	}
	withBudget, err := Load(append(files, writeBench(b, "budget.cedar",
		`forbid (principal, action, resource) when { context.budget.limits.requests > 0 && context.budget.used.requests >= context.budget.limits.requests };`))...)
	if err != nil {
		b.Fatal(err)
	}
	budget := crossing.BudgetState{Used: crossing.Amount{Requests: 12, InputTokens: 3400, OutputTokens: 800}, Limits: crossing.Amount{Requests: 1 << 40, InputTokens: 5_000_000}}
	benches := []struct {
		name string
		s    *Set
		r    Request
	}{
		{"model", s, Request{Workload: "demo", Tenant: "acme", Purpose: "coding", Action: ActionModelInvoke, Resource: Resource{Type: "Model", ID: "claude-sonnet-4-5"}, Context: Context{Budget: budget}}},
		{"egress", s, Request{Workload: "demo", Tenant: "acme", Purpose: "coding", Action: ActionEgressConnect, Resource: Resource{Type: "Host", ID: "a.example.org"}, Context: Context{Port: 443}}},
		{"tool", s, Request{Workload: "demo", Tenant: "acme", Purpose: "coding", Action: ActionToolCall, Resource: Resource{Type: "Tool", ID: "fs/write_file", Server: "fs"}, Context: Context{ArgumentDigest: "sha256:0123", Budget: budget}}},
		{"deny", s, Request{Workload: "demo", Tenant: "acme", Purpose: "coding", Action: ActionModelInvoke, Resource: Resource{Type: "Model", ID: "llama-3"}}},
		{"budget", withBudget, Request{Workload: "demo", Tenant: "acme", Purpose: "coding", Action: ActionModelInvoke, Resource: Resource{Type: "Model", ID: "claude-sonnet-4-5"}, Context: Context{Budget: budget}}},
	}
	for _, bb := range benches {
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			r := bb.r
			lat := make([]time.Duration, 0, 1<<16)
			for b.Loop() {
				r.Context.Budget.Used.Requests++
				t0 := time.Now()
				bb.s.Decide(r)
				if len(lat) < cap(lat) {
					lat = append(lat, time.Since(t0))
				}
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2]), "p50-ns")
			b.ReportMetric(float64(lat[len(lat)*99/100]), "p99-ns")
		})
	}
}

func writeBench(b *testing.B, name, src string) string {
	p := filepath.Join(b.TempDir(), name)
	if err := writeFile(p, src); err != nil {
		b.Fatal(err)
	}
	return p
}

func TestReadsBudget(t *testing.T) {
	tests := []struct {
		cond string
		want bool
	}{
		{"", false},
		{`when { context.port == 443 }`, false},
		{`when { context has user && context.user.name == "ada" }`, false},
		{`unless { context.purpose == "coding" && context.argument_digest == "" }`, false},
		{`when { principal.name == "budget" }`, false},
		{`when { context.budget.used.requests > 1 }`, true},
		{`when { context has budget }`, true},
		{`when { context.port == 1 } unless { context.budget.streams > 2 }`, true},
		{`when { context == context }`, true},
		{`when { [context].contains(context) }`, true},
	}
	for _, tt := range tests {
		list, err := cedar.NewPolicyListFromBytes("t.cedar", []byte("permit (principal, action, resource) "+tt.cond+";"))
		if err != nil {
			t.Fatalf("%s: %v", tt.cond, err)
		}
		if got := readsBudget(list[0]); got != tt.want {
			t.Errorf("readsBudget(%s) = %v, want %v", tt.cond, got, tt.want)
		}
	}
}

func TestZeroSetDenies(t *testing.T) {
	var s Set
	for _, r := range allActions() {
		if allow, d := s.Decide(r); allow || len(d.Determining) > 0 {
			t.Errorf("zero Set: Decide(%+v) = %v, %+v; want deny", r, allow, d)
		}
	}
}

// TestEntityCacheBounded checks that ids from the agent cannot grow the
// cache past its bounds, and that decisions stay the same past them.
func TestEntityCacheBounded(t *testing.T) {
	s := mustLoad(t, decideSet)
	for i := 0; i < maxCachedEntities+100; i++ {
		s.Decide(req(ActionToolCall, "Tool", fmt.Sprintf("fs/tool-%d", i)))
	}
	long := "fs/" + strings.Repeat("x", maxCachedIDLen)
	s.Decide(req(ActionToolCall, "Tool", long))
	if n := s.entities.n.Load(); n > maxCachedEntities {
		t.Errorf("cache holds %d entities, want at most %d", n, maxCachedEntities)
	}
	if _, ok := s.entities.m.Load(cacheKey{types.NewEntityUID("Tool", types.String(long)), types.NewEntityUID("Server", "fs")}); ok {
		t.Errorf("cache holds an id longer than %d", maxCachedIDLen)
	}
	if allow, d := s.Decide(req(ActionToolCall, "Tool", "fs/write_file")); !allow || !d.ApprovalRequired {
		t.Errorf("past the bound: Decide(fs/write_file) = %v, %+v; want allow with approval", allow, d)
	}
}

// @approval_scope("sandbox") widens an egress approval only when every
// determining permit that requires approval says so: the narrowest wins.
func TestDecideApprovalScope(t *testing.T) {
	s, err := loadString(t, `
@id("pkg") @approval("required") @approval_scope("sandbox")
permit (principal, action == Action::"egress.connect", resource == Host::"pkg.example.com");
@id("pkg-strict") @approval("required")
permit (principal, action == Action::"egress.connect", resource == Host::"pkg.example.com") when { context.port == 8443 };
@id("api") @approval("required")
permit (principal, action == Action::"egress.connect", resource == Host::"api.example.com");
`)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		host  string
		port  int
		scope string
	}{
		{"pkg.example.com", 443, ApprovalScopeSandbox},
		{"pkg.example.com", 8443, ""}, // another determining permit wants one per connection
		{"api.example.com", 443, ""},
	} {
		allow, d := s.Decide(Request{Workload: "w", Tenant: "t", Action: ActionEgressConnect,
			Resource: Resource{Type: "Host", ID: tt.host}, Context: Context{Port: tt.port}})
		if !allow || !d.ApprovalRequired || d.ApprovalScope != tt.scope {
			t.Errorf("Decide(%s:%d) = %v, %+v; want approval scope %q", tt.host, tt.port, allow, d, tt.scope)
		}
	}
}
