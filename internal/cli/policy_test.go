package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/policy"
)

// runPolicy runs `cordon policy ARGS...` as Main would and returns its
// output and exit status.
func runPolicy(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	g := &globals{stdout: &out, stderr: &errb}
	cmd := policyCmd(g)
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.Execute()
	var ee *exitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.code
	default:
		fmt.Fprintf(&errb, "cordon: %s\n", describe(err))
		code = failure.ExitRefused
	}
	return out.String(), errb.String(), code
}

func writeTemp(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const (
	examplesDefault   = "../../examples/policy/default.cedar"
	examplesApprovals = "../../examples/policy/approvals.cedar"
)

func TestPolicyCheck(t *testing.T) {
	s, err := policy.Load(examplesDefault, examplesApprovals)
	if err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runPolicy(t, "", "check", examplesDefault, examplesApprovals)
	want := fmt.Sprintf("ok: %d policies, digest %s\n", s.Len(), s.Digest())
	if code != 0 || out != want || errOut != "" {
		t.Errorf("check = %d, %q, %q; want 0, %q", code, out, errOut, want)
	}

	out, _, code = runPolicy(t, "", "check", "--json", examplesDefault)
	var rep PolicyCheckReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 || !rep.OK || rep.Policies != 7 || !strings.HasPrefix(rep.Digest, "sha256:") || rep.IDs[0] != "models.claude" {
		t.Errorf("check --json = %d, %q (%v)", code, out, err)
	}
}

func TestPolicyCheckRefuses(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, src string
		want      string // a line of stderr
	}{
		{"string compared to long", "permit (principal, action, resource);\n\n@id(\"port\")\npermit (principal, action == Action::\"egress.connect\", resource)\n  when { context.port == \"443\" };\n",
			"bad.cedar:3:1: policy port: the types Long and String are not compatible"},
		{"unknown entity type", "permit (principal == Agent::\"x\", action, resource);\n",
			"bad.cedar:1:1: policy bad.cedar:0: unrecognized entity type `Agent`"},
		{"unknown attribute", "permit (principal, action, resource) when { principal.team == \"x\" };\n",
			"bad.cedar:1:1: policy bad.cedar:0: attribute `team` on entity type `Workload` not found"},
		{"unknown action", "permit (principal, action == Action::\"model.call\", resource);\n",
			"bad.cedar:1:1: policy bad.cedar:0: unrecognized action `Action::\"model.call\"`"},
		{"syntax", "permit (principal, action, resource)\n  when { context.port == };\n",
			"bad.cedar:2:27: syntax error at \";\": invalid primary"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := writeTemp(t, dir, "bad.cedar", tt.src)
			out, errOut, code := runPolicy(t, "", "check", f)
			want := strings.Replace(tt.want, "bad.cedar:", f+":", 1)
			if code != failure.ExitRefused || out != "" || !strings.Contains(errOut, want+"\n") {
				t.Errorf("check = %d, %q, %q; want %d and the line %q", code, out, errOut, failure.ExitRefused, want)
			}
			out, _, code = runPolicy(t, "", "check", "--json", f)
			var rep PolicyCheckReport
			if err := json.Unmarshal([]byte(out), &rep); err != nil || code != failure.ExitRefused || rep.OK || len(rep.Errors) == 0 || rep.Errors[0].File != f || rep.Errors[0].Line == 0 {
				t.Errorf("check --json = %d, %q (%v)", code, out, err)
			}
		})
	}
	if _, errOut, code := runPolicy(t, "", "check", filepath.Join(dir, "missing.cedar")); code != failure.ExitRefused || !strings.Contains(errOut, "no such file") {
		t.Errorf("check missing = %d, %q", code, errOut)
	}
	if _, _, code := runPolicy(t, "", "check"); code != failure.ExitRefused {
		t.Errorf("check without files = %d, want %d", code, failure.ExitRefused)
	}
}

const explainConfig = `version: cordon/v1
workload: demo
tenant: acme
purpose: coding
policy:
  - policy/default.cedar
  - policy/approvals.cedar
models:
  - name: claude
    api: anthropic
    upstream: https://api.anthropic.com
    credential: key
    models: ["claude-*"]
egress:
  allow:
    - host: api.github.com
      ports: [443]
tools:
  - name: fs
    command: [/bin/true]
    allow: ["read_*", write_file, delete_file]
secrets:
  key: {env: CORDON_TEST_UNSET}
`

func explainSetup(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{examplesDefault, examplesApprovals} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		writeTemp(t, dir, "policy/"+filepath.Base(f), string(b))
	}
	return writeTemp(t, dir, "cordon.yaml", explainConfig)
}

func TestPolicyExplain(t *testing.T) {
	cfg := explainSetup(t)
	tests := []struct {
		name, request string
		want          []string // lines of stdout, in order
	}{
		{"approval", `{"action":"tool.call","resource":{"type":"Tool","id":"fs/write_file"}}`,
			[]string{"decision: allow", "approval: required", "determining:", "  tools (permit, ", "  fs.write (permit, ", ", requires approval)", `resource in Server::"fs"`}},
		{"forbid", `{"action":"tool.call","resource":{"type":"Tool","id":"fs/delete_file","server":"fs"}}`,
			[]string{"decision: deny", "determining:", "  fs.no-delete (forbid, "}},
		{"default deny", `{"action":"model.invoke","resource":{"type":"Model","id":"llama-3"}}`,
			[]string{"decision: deny", "determining: none (no permit matched: denied by default)"}},
		{"egress with port", `{"action":"egress.connect","resource":{"type":"Host","id":"api.github.com"},"context":{"port":443}}`,
			[]string{"decision: allow", "  egress.github (permit, "}},
		{"the configuration's allow-list refuses what policy permits", `{"action":"egress.connect","resource":{"type":"Host","id":"www.example.org"},"context":{"port":443}}`,
			[]string{"decision: deny", "config (egress): deny: host-not-allowed", "policy: allow", "  egress.example-org (permit, "}},
		{"no model route", `{"action":"model.invoke","resource":{"type":"Model","id":"claude-x"},"api":"openai"}`,
			[]string{"decision: deny", `config (models): deny: no models[] route allows model "claude-x" over the openai API`, "policy: allow"}},
		{"tool not offered", `{"action":"tool.call","resource":{"type":"Tool","id":"fs/edit_file"}}`,
			[]string{"decision: deny", `config (tools): deny, rule fs: tools[fs].allow does not offer tool "edit_file"`, "policy: allow",
				"(policy requires approval, but the configuration refuses the crossing first)"}},
		{"malformed request is a deny", `{"action":"tool.call","resource":{"type":"Model","id":"x"}}`,
			[]string{"decision: deny", "errors (each is a deny):", "  request: action tool.call applies to a Tool"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code := runPolicy(t, "", "explain", "--config", cfg, "--request", tt.request)
			if code != 0 || errOut != "" {
				t.Fatalf("explain = %d, %q, %q", code, out, errOut)
			}
			rest := out
			for _, w := range tt.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("explain output:\n%s\nwant, in order, %q", out, tt.want)
				}
				rest = rest[i+len(w):]
			}
		})
	}

	out, _, code := runPolicy(t, `{"action":"tool.call","resource":{"type":"Tool","id":"fs/write_file"},"context":{"argument_digest":"sha256:00"}}`,
		"explain", "--json", "--config", cfg, "--request", "-")
	var x ExplainReport
	if err := json.Unmarshal([]byte(out), &x); err != nil || code != 0 || !x.Allow || !x.ApprovalRequired || !x.Decision.ApprovalRequired || len(x.Policies) != 2 || x.Policies[1].ID != "fs.write" || !x.Config.Allow {
		t.Errorf("explain --json = %d, %q (%v)", code, out, err)
	}
	req := writeTemp(t, t.TempDir(), "req.json", `{"action":"model.invoke","resource":{"type":"Model","id":"claude-sonnet-4-5"}}`)
	if out, _, code := runPolicy(t, "", "explain", "--config", cfg, "--request", "@"+req); code != 0 || !strings.HasPrefix(out, "decision: allow\n") {
		t.Errorf("explain @file = %d, %q", code, out)
	}
}

func TestPolicyExplainRefuses(t *testing.T) {
	cfg := explainSetup(t)
	dir := filepath.Dir(cfg)
	bad := writeTemp(t, dir, "bad.yaml", strings.Replace(explainConfig, "policy/approvals.cedar", "policy/bad.cedar", 1))
	writeTemp(t, dir, "policy/bad.cedar", "permit (principal, action, resource) when { 1 };\n")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown request field", []string{"--config", cfg, "--request", `{"action":"tool.call","resource":{"type":"Tool","id":"fs/x"},"tenant":"other"}`}, `unknown field "tenant"`},
		{"a user", []string{"--config", cfg, "--request", `{"action":"tool.call","user":"ada","resource":{"type":"Tool","id":"fs/x"}}`}, "user: no crossing carries a user"},
		{"not JSON", []string{"--config", cfg, "--request", `action=tool.call`}, "want a JSON object"},
		{"trailing data", []string{"--config", cfg, "--request", `{} {}`}, "trailing data"},
		{"no request", []string{"--config", cfg}, "--config and one of --request or --receipt are required"},
		{"missing config", []string{"--config", filepath.Join(dir, "nope.yaml"), "--request", `{}`}, "no such file"},
		{"invalid policy", []string{"--config", bad, "--request", `{}`}, "bad.cedar:1:1: policy bad.cedar:0: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code := runPolicy(t, "", append([]string{"explain"}, tt.args...)...)
			if code != failure.ExitRefused || !strings.Contains(errOut, tt.want) {
				t.Errorf("explain %q = %d, %q, %q; want %d and %q", tt.args, code, out, errOut, failure.ExitRefused, tt.want)
			}
		})
	}
}

func TestPolicySchema(t *testing.T) {
	out, _, code := runPolicy(t, "", "schema")
	if code != 0 || out != policy.Schema() || !strings.Contains(out, `action "tool.call"`) {
		t.Errorf("schema = %d, %q", code, out)
	}
}

// The runtime's context.budget.limits are the configuration's budgets:
// explain uses them too, and refuses a request that names other limits.
func TestPolicyExplainUsesTheConfiguredBudget(t *testing.T) {
	dir := t.TempDir()
	writeTemp(t, dir, "policy/p.cedar", `@id("models") permit (principal, action == Action::"model.invoke", resource);
@id("unbudgeted") forbid (principal, action == Action::"model.invoke", resource) when { context.budget.limits.requests == 0 };
@id("spent") forbid (principal, action == Action::"model.invoke", resource)
when { context.budget.limits.requests > 0 && context.budget.used.requests >= context.budget.limits.requests };
`)
	cfg := writeTemp(t, dir, "cordon.yaml", `version: cordon/v1
workload: demo
tenant: acme
purpose: coding
policy: [policy/p.cedar]
models:
  - name: claude
    api: anthropic
    upstream: https://api.anthropic.com
    credential: key
    models: ["claude-*"]
budgets:
  requests: 100
secrets:
  key: {env: CORDON_TEST_UNSET}
`)
	explainJSON := func(req string) (ExplainReport, string, int) {
		out, errOut, code := runPolicy(t, "", "explain", "--json", "--config", cfg, "--request", req)
		var x ExplainReport
		if code == 0 {
			if err := json.Unmarshal([]byte(out), &x); err != nil {
				t.Fatalf("explain --json = %q: %v", out, err)
			}
		}
		return x, errOut, code
	}
	// The runtime decides with limits.requests = 100: allowed.
	if x, errOut, code := explainJSON(`{"action":"model.invoke","resource":{"type":"Model","id":"claude-x"}}`); code != 0 || !x.Allow {
		t.Fatalf("explain without a budget = %d, %+v, %q; want allow (the configured limit is 100)", code, x, errOut)
	}
	// Positive control: the budget is read — 100 used of 100 is forbidden.
	if x, errOut, code := explainJSON(`{"action":"model.invoke","resource":{"type":"Model","id":"claude-x"},"context":{"budget":{"used":{"requests":100}}}}`); code != 0 || x.Allow {
		t.Fatalf("explain with the budget spent = %d, %+v, %q; want deny", code, x, errOut)
	}
	if _, errOut, code := explainJSON(`{"action":"model.invoke","resource":{"type":"Model","id":"claude-x"},"context":{"budget":{"limits":{"requests":5}}}}`); code != failure.ExitRefused || !strings.Contains(errOut, "budgets") {
		t.Fatalf("explain with other limits = %d, %q; want refused", code, errOut)
	}
}

// budgetConfig writes a configuration that permits everything by policy,
// routes claude-* and adds extra (egress, budgets) for the budget tests.
func budgetConfig(t *testing.T, extra string) string {
	dir := t.TempDir()
	writeTemp(t, dir, "policy/p.cedar", `@id("all") permit (principal, action, resource);`+"\n")
	return writeTemp(t, dir, "cordon.yaml", `version: cordon/v1
workload: demo
tenant: acme
purpose: coding
policy: [policy/p.cedar]
models:
  - name: claude
    api: anthropic
    upstream: https://api.anthropic.com
    credential: key
    models: ["claude-*"]
secrets:
  key: {env: CORDON_TEST_UNSET}
`+extra)
}

// A model call or connection over the configured budget is refused at
// runtime whatever policy says: explain says so too.
func TestPolicyExplainChecksTheBudget(t *testing.T) {
	cfg := budgetConfig(t, `egress:
  allow:
    - host: api.github.com
      ports: [443]
budgets:
  requests: 100
  connections: 10
`)
	for _, tt := range []struct {
		req  string
		want bool
	}{
		{`{"action":"model.invoke","resource":{"type":"Model","id":"claude-x"},"context":{"budget":{"used":{"requests":99}}}}`, true},
		{`{"action":"model.invoke","resource":{"type":"Model","id":"claude-x"},"context":{"budget":{"used":{"requests":100}}}}`, false},
		{`{"action":"egress.connect","resource":{"type":"Host","id":"api.github.com"},"context":{"port":443,"budget":{"used":{"connections":9}}}}`, true},
		{`{"action":"egress.connect","resource":{"type":"Host","id":"api.github.com"},"context":{"port":443,"budget":{"used":{"connections":10}}}}`, false},
	} {
		out, errOut, code := runPolicy(t, "", "explain", "--json", "--config", cfg, "--request", tt.req)
		var x ExplainReport
		if err := json.Unmarshal([]byte(out), &x); err != nil || code != 0 || x.Allow != tt.want || !x.PolicyAllow || !x.Config.Allow {
			t.Errorf("explain %s = %d, %q, %q; want allow %v", tt.req, code, out, errOut, tt.want)
		}
		if !tt.want {
			if out, _, _ := runPolicy(t, "", "explain", "--config", cfg, "--request", tt.req); !strings.Contains(out, "budget: deny: ") {
				t.Errorf("explain %s:\n%s\nwant a budget line", tt.req, out)
			}
		}
	}
}

// Every model call reserves at least one input token (its body is a
// JSON object; the broker reserves (bytes+3)/4 input tokens): with the
// input_tokens budget spent the runtime refuses every call, while
// explain reserved only the request and said allow. Observed in
// explain's verdict: deny at the budget stage, naming the limit.
// Control: one token below the limit, allow.
func TestPolicyExplainBudgetOfEveryModelCall(t *testing.T) {
	cfg := budgetConfig(t, `budgets:
  input_tokens: 1000
`)
	for _, tt := range []struct {
		used  string
		allow bool
		names string
	}{
		{`{"input_tokens":999}`, true, ""},
		{`{"input_tokens":1000}`, false, "input_tokens"},
	} {
		req := `{"action":"model.invoke","resource":{"type":"Model","id":"claude-x"},"context":{"budget":{"used":` + tt.used + `}}}`
		out, errOut, code := runPolicy(t, "", "explain", "--json", "--config", cfg, "--request", req)
		var x ExplainReport
		if err := json.Unmarshal([]byte(out), &x); err != nil || code != 0 {
			t.Fatalf("explain %s = %d, %q, %q", req, code, out, errOut)
		}
		if x.Allow != tt.allow || (!tt.allow && (x.DeniedAt != "budget" || !strings.Contains(x.Rule, tt.names))) {
			t.Errorf("explain with used %s = allow %v at %q rule %q; want allow %v (%s)", tt.used, x.Allow, x.DeniedAt, x.Rule, tt.allow, tt.names)
		}
	}
}
