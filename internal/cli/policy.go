package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cordon-project/cordon/internal/config"
	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/denial"
	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/gateway"
	"github.com/cordon-project/cordon/internal/launch"
	"github.com/cordon-project/cordon/internal/policy"
	"github.com/cordon-project/cordon/internal/store"
	"github.com/cordon-project/cordon/internal/textsafe"
)

// maxRequestBytes bounds the --request of cordon policy explain.
const maxRequestBytes = 1 << 20

func policyCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Check Cedar policy files and explain the decisions they make",
		Long: `Every crossing of the gateway — a model call, an egress connection, a tool
call, a state read or write — asks Cedar policy, in addition to the
configuration's allow-lists: both must allow, and a deny from either wins.
The configuration names the policy files (policy: [FILE...]); they are
validated against cordon's schema when a run starts, and an invalid policy
refuses to start. Each receipt records the policies that decided and the
digest of the policy set.

A request is: principal Workload::"<workload>" in Tenant::"<tenant>";
action Action::"model.invoke" | "egress.connect" | "tool.call" |
"state.read" | "state.write"; resource Model::"<model id>",
Host::"<host name>", Tool::"<server>/<tool>" in Server::"<server>", or
State::"<scope>"; context {purpose, argument_digest, port, budget} (the schema's optional
user is never set: a policy reading it is refused).
A permit annotated @approval("required") makes an allow it decides wait
for an operator's approval, on every action; @approval_scope("sandbox") on
an egress.connect permit makes one approval cover that host and port for the
sandbox's life. Any other annotation is refused. An evaluation error is a
deny.

Examples:

  # the schema policies are written against
  cordon policy schema

  # validate files before naming them in the configuration
  cordon policy check examples/policy/default.cedar examples/policy/approvals.cedar

  # what would policy say about a tool call from this configuration's workload?
  cordon policy explain --config cordon.yaml \
    --request '{"action":"tool.call","resource":{"type":"Tool","id":"fs/write_file"}}'

See docs/policy.md.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(policyCheckCmd(g), policyExplainCmd(g), policySchemaCmd(g))
	return cmd
}

// PolicyCheckReport is the --json output of cordon policy check.
type PolicyCheckReport struct {
	OK       bool          `json:"ok"`
	Files    []string      `json:"files"`
	Policies int           `json:"policies,omitempty"`
	IDs      []string      `json:"ids,omitempty"`
	Digest   string        `json:"digest,omitempty"`
	Errors   []PolicyError `json:"errors,omitempty"`
}

// PolicyError is one problem in a policy file.
type PolicyError struct {
	File    string `json:"file"`
	Line    int    `json:"line,omitempty"`
	Column  int    `json:"column,omitempty"`
	Policy  string `json:"policy,omitempty"`
	Message string `json:"message"`
}

func policyCheckCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "check FILE...",
		Short: "Validate Cedar policy files against cordon's schema",
		Long: `Parse the files as one policy set and validate every policy against cordon's
schema (cordon policy schema), as a run does at start. On success print the
number of policies and the set's digest — the digest receipts record — and
exit 0. Otherwise print each problem as FILE:LINE:COLUMN: policy ID: message
and exit 125: a syntax error, a type error (comparing a String to a Long, a
condition that is not a Bool), an unknown entity type, attribute or action,
an optional attribute read without "has", an action on a resource type it
does not apply to, a bad @approval or @approval_scope, a duplicate @id, or
an annotation cordon does not enforce (only @id, @approval and
@approval_scope are accepted). For a schema error
the position is where the policy starts.

Policy ids are @id("...") when present, else FILE-BASE-NAME:INDEX (from 0).

Examples:

  cordon policy check examples/policy/default.cedar
  ok: 6 policies, digest sha256:…

  cordon policy check --json policy/*.cedar`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, files []string) error {
			s, err := policy.Load(files...)
			rep := PolicyCheckReport{OK: err == nil, Files: files}
			if err != nil {
				rep.Errors = policyErrors(err)
			} else {
				rep.Policies, rep.IDs, rep.Digest = s.Len(), s.IDs(), s.Digest()
			}
			switch {
			case asJSON:
				if err := writeJSON(g.stdout, rep); err != nil {
					return err
				}
			case err != nil:
				printPolicyErrors(g.stderr, rep.Errors)
			default:
				fmt.Fprintf(g.stdout, "ok: %d policies, digest %s\n", rep.Policies, rep.Digest)
			}
			if err != nil {
				return &exitError{code: failure.ExitRefused}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

// policyErrors lists the problems in an error from policy.Load.
func policyErrors(err error) []PolicyError {
	var out []PolicyError
	var walk func(error)
	walk = func(err error) {
		var le *policy.LoadError
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		if errors.As(err, &le) {
			out = append(out, PolicyError{File: le.File, Line: le.Line, Column: le.Column, Policy: le.Policy, Message: le.Err.Error()})
			return
		}
		out = append(out, PolicyError{Message: err.Error()})
	}
	walk(err)
	return out
}

func printPolicyErrors(w io.Writer, errs []PolicyError) {
	for _, e := range errs {
		var b strings.Builder
		if e.File != "" {
			b.WriteString(e.File)
			if e.Line > 0 {
				fmt.Fprintf(&b, ":%d:%d", e.Line, e.Column)
			}
			b.WriteString(": ")
		}
		if e.Policy != "" {
			fmt.Fprintf(&b, "policy %s: ", e.Policy)
		}
		b.WriteString(e.Message)
		fmt.Fprintln(w, textsafe.Line(b.String()))
	}
}

// explainRequest is the --request of cordon policy explain: the request
// without the identity, which comes from the configuration.
type explainRequest struct {
	Action   string          `json:"action"`
	User     string          `json:"user,omitempty"`
	Resource policy.Resource `json:"resource"`
	Context  policy.Context  `json:"context"`
	// API is a model call's protocol ("anthropic", "openai" or "gemini"; absent:
	// any configured route); Operation a state operation (get, put,
	// delete, list, export, reset; absent: get for state.read, put for
	// state.write). Neither is part of the Cedar request.
	API       string `json:"api,omitempty"`
	Operation string `json:"operation,omitempty"`
}

// ExplainReport is the --json output of cordon policy explain: the
// runtime's verdict, which needs both the configuration's checks and
// policy to allow.
type ExplainReport struct {
	// Allow is the verdict: Config.Allow and PolicyAllow.
	Allow bool `json:"allow"`
	// ApprovalRequired: the crossing is allowed once an operator approves
	// it (policy's @approval, when both halves allow).
	ApprovalRequired bool `json:"approval_required,omitempty"`
	// ApprovalScope is "sandbox" when one approval covers the sandbox's
	// life (egress, @approval_scope("sandbox")).
	ApprovalScope string `json:"approval_scope,omitempty"`
	// Config is the configuration's half.
	Config gateway.Admission `json:"config"`
	// Budget, when set, is why the configured budget refuses a crossing
	// both halves allow (from context.budget.used).
	Budget string `json:"budget_refusal,omitempty"`
	// PolicyAllow, Decision and Policies are policy's half.
	PolicyAllow bool                    `json:"policy_allow"`
	Decision    crossing.PolicyDecision `json:"decision"`
	Policies    []policy.Explained      `json:"policies,omitempty"`
	// Stages are the decision's stages in the runtime's order (config,
	// cedar, approval, budget), each with its verdict; DeniedAt names the
	// first that refuses, Rule what refuses there (as a denial receipt
	// names it) and Suggestion the smallest change that would allow it.
	Stages     []ExplainStage     `json:"stages"`
	DeniedAt   string             `json:"denied_at,omitempty"`
	Rule       string             `json:"rule,omitempty"`
	Suggestion *denial.Suggestion `json:"suggestion,omitempty"`
	// Replay compares a recorded receipt's answer with this one
	// (--receipt).
	Replay *ExplainReplay `json:"replay,omitempty"`

	budgetState crossing.BudgetState
	window      time.Duration
	budgetOver  string
}

// explain decides r for cfg's workload as the runtime does: the
// configuration's checks (the brokers' own code) and policy.
func explain(cfg *config.Config, set *policy.Set, r explainRequest) ExplainReport {
	// context.budget.limits are the configuration's budgets, as the
	// runtime gives them to policy (readExplainRequest refuses others).
	r.Context.Budget.Limits = cfg.Budgets.Limits()
	x := set.Explain(policy.Request{
		Workload: cfg.Workload, Tenant: cfg.Tenant, Purpose: cfg.Purpose, User: r.User,
		Action: r.Action, Resource: r.Resource, Context: r.Context,
	})
	adm := launch.AdmitConfig(cfg,
		gateway.AdmitRequest{Action: r.Action, Resource: r.Resource.ID, Server: r.Resource.Server, Port: r.Context.Port,
			API: r.API, Operation: r.Operation})
	rep := ExplainReport{Allow: adm.Allow && x.Allow, Config: adm, PolicyAllow: x.Allow, Decision: x.Decision, Policies: x.Policies}
	// The budget: a model call reserves a request, a connection a
	// connection, and the store refuses either past a limit whatever
	// policy says (tokens and bytes are reserved with the request's size,
	// known only when it is made: at least one input token and one byte,
	// its body being a JSON object).
	var want crossing.Amount
	switch r.Action {
	case policy.ActionModelInvoke:
		want.Requests, want.InputTokens, want.Bytes = 1, 1, 1
	case policy.ActionEgressConnect:
		want.Connections = 1
	case policy.ActionIngressConnect:
		want.IngressConnections = 1
	}
	why := store.OverBudget(r.Context.Budget.Used, want, r.Context.Budget.Limits)
	if why != "" && rep.Allow {
		rep.Allow, rep.Budget = false, why
	}
	if rep.Allow && x.Decision.ApprovalRequired {
		rep.ApprovalRequired, rep.ApprovalScope = true, x.Decision.ApprovalScope
	}
	rep.budgetState = crossing.BudgetState{Used: r.Context.Budget.Used, Limits: r.Context.Budget.Limits}
	rep.window, rep.budgetOver = cfg.Budgets.Window, why
	rep.stages(r, cfg.Workload)
	return rep
}

func policyExplainCmd(g *globals) *cobra.Command {
	var asJSON bool
	var cfgPath, reqArg string
	var receipt int64
	cmd := &cobra.Command{
		Use:   "explain --config FILE (--request JSON | --receipt ID)",
		Short: "Show what policy decides about one request, and which policies decided it",
		Long: `Decide one request with the policy files the configuration names (or the
built-in permit-all policy when it names none) and print the decision, the
determining policies with their source, whether approval is required, and
any evaluation error. The workload, tenant and purpose come from the
configuration; the request gives the rest as JSON (--request '{...}',
--request @FILE, or --request - for standard input):

  {"action":   "model.invoke" | "egress.connect" | "tool.call" | "state.read" | "state.write" | "ingress.connect",
   "resource": {"type": "Model" | "Host" | "Tool" | "State" | "Route",
                "id":   "claude-sonnet-4-5" | "api.github.com" | "fs/read_file" | "notes" | "ui",
                "server": "fs"},                               (Tool; default: id before "/")
   "context":  {"port": 443, "argument_digest": "sha256:…",
                "budget": {"used": {"requests": 3}, "streams": 0}},
                                            (budget.limits are the configuration's budgets)
   "api":       "anthropic" | "openai" | "gemini", (optional, model.invoke: the route's API)
   "operation": "get" | "put" | "delete" | "list" | "export" | "reset"}
                                            (optional, state: default get / put)

Absent fields are "" or 0, as the gateway sends them. The decision is the
runtime's: the configuration's checks — the models[] routes, the egress
allow-list and pinned addresses, the tools[] servers and their allow globs,
the state scope and quota, run with the brokers' own code — and policy must
both allow. Each half is shown. Checks that can only be made when the
crossing happens (a name's resolution, a value's size) are listed as notes.
The stages are printed in the runtime's order — config, cedar, approval,
budget — each with its verdict and what decided it; the first that refuses
is marked, with its rule (as a denial receipt names it) and the smallest
configuration or Cedar snippet that would allow exactly this request (for
you to read; never applied).

--receipt ID replays the question a recorded receipt asked (its workload,
broker, action and target) against the current configuration and policy
and the workload's budget spend in the store now, and says whether the
answer is the recorded one and, if not, why (the policy set's digest, the
rule). It reads the store: run it as root on the host.

Exit status 0 whatever the decision; 125 when the configuration, the policy
or the request is invalid.

Examples:

  cordon policy explain --config cordon.yaml \
    --request '{"action":"model.invoke","resource":{"type":"Model","id":"claude-sonnet-4-5"}}'

  cordon policy explain --config cordon.yaml --json \
    --request '{"action":"egress.connect","resource":{"type":"Host","id":"api.github.com"},"context":{"port":443}}'

  cordon policy explain --config cordon.yaml --request @request.json

  # why was receipt 42 denied, and would it be now?
  cordon policy explain --config cordon.yaml --receipt 42

See docs/denials.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runExplain(cmd, g, explainArgs{cfgPath: cfgPath, request: reqArg, receipt: receipt, asJSON: asJSON})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&cfgPath, "config", "", "the configuration whose workload asks and whose policy files decide")
	fl.StringVar(&reqArg, "request", "", "the request as JSON, @FILE, or - for standard input")
	fl.Int64Var(&receipt, "receipt", 0, "replay the question of this receipt (its workload, broker, action and target) against the current configuration, policy and budget spend")
	fl.BoolVar(&asJSON, "json", false, "print the explanation as JSON")
	return cmd
}

// explainArgs are cordon policy explain's flags.
type explainArgs struct {
	cfgPath, request string
	receipt          int64
	asJSON           bool
}

// runExplain loads the configuration and its policy, and explains the
// request or replays the receipt.
func runExplain(cmd *cobra.Command, g *globals, a explainArgs) error {
	if a.cfgPath == "" || (a.request == "") == (a.receipt == 0) {
		return failure.Failf(failure.KindUsage, "policy explain", "--config and one of --request or --receipt are required")
	}
	cfg, err := config.Load(a.cfgPath)
	if err != nil {
		return failure.Fail(failure.KindUsage, "config", err)
	}
	set := policy.Default()
	if len(cfg.Policy) > 0 {
		if set, err = policy.Load(cfg.Policy...); err != nil {
			if a.asJSON {
				_ = writeJSON(g.stdout, PolicyCheckReport{Files: cfg.Policy, Errors: policyErrors(err)})
			} else {
				printPolicyErrors(g.stderr, policyErrors(err))
			}
			return &exitError{code: failure.ExitRefused}
		}
	}
	if a.receipt != 0 {
		if err := requireRoot("policy explain --receipt"); err != nil {
			return err
		}
		st, err := g.openStore()
		if err != nil {
			return err
		}
		defer st.Close()
		x, err := replay(cmd.Context(), st, cfg, set, a.receipt)
		if err != nil {
			return err
		}
		if a.asJSON {
			return writeJSON(g.stdout, x)
		}
		printExplanation(g.stdout, x, len(cfg.Policy) == 0)
		return nil
	}
	r, err := readExplainRequest(a.request, cmd.InOrStdin())
	if err != nil {
		return failure.Fail(failure.KindUsage, "request", err)
	}
	if l := r.Context.Budget.Limits; l != (crossing.Amount{}) && l != cfg.Budgets.Limits() {
		return failure.Failf(failure.KindUsage, "request", "context.budget.limits: the runtime's limits are the configuration's budgets (%+v); leave them out", cfg.Budgets.Limits())
	}
	x := explain(cfg, set, r)
	if a.asJSON {
		return writeJSON(g.stdout, x)
	}
	printExplanation(g.stdout, x, len(cfg.Policy) == 0)
	return nil
}

// readExplainRequest decodes --request strictly: unknown fields and
// trailing data are errors.
func readExplainRequest(arg string, stdin io.Reader) (explainRequest, error) {
	var b []byte
	var err error
	switch {
	case arg == "-":
		b, err = io.ReadAll(io.LimitReader(stdin, maxRequestBytes+1))
	case strings.HasPrefix(arg, "@"):
		var f *os.File
		if f, err = os.Open(arg[1:]); err == nil {
			b, err = io.ReadAll(io.LimitReader(f, maxRequestBytes+1))
			f.Close()
		}
	default:
		b = []byte(arg)
	}
	var r explainRequest
	switch {
	case err != nil:
		return r, err
	case len(b) > maxRequestBytes:
		return r, fmt.Errorf("larger than %d bytes", maxRequestBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return r, fmt.Errorf("want a JSON object such as {\"action\":\"tool.call\",\"resource\":{\"type\":\"Tool\",\"id\":\"fs/read_file\"}}: %w", err)
	}
	if dec.More() {
		return r, fmt.Errorf("trailing data after the JSON object")
	}
	if r.User != "" {
		// What the runtime never sends cannot be explained: the answer
		// would not be the runtime's.
		return r, fmt.Errorf("user: no crossing carries a user (the gateway knows none), so the runtime decides without one; leave it out")
	}
	return r, nil
}

func printExplanation(w io.Writer, x ExplainReport, builtin bool) {
	verdict := func(ok bool) string {
		if ok {
			return "allow"
		}
		return "deny"
	}
	if x.DeniedAt != "" && !x.Allow {
		fmt.Fprintf(w, "decision: deny (at the %s stage)\n", x.DeniedAt)
	} else {
		fmt.Fprintf(w, "decision: %s\n", verdict(x.Allow))
	}
	if x.ApprovalRequired {
		if x.ApprovalScope == policy.ApprovalScopeSandbox {
			fmt.Fprintln(w, "approval: required (one approval covers this host and port for the sandbox's life)")
		} else {
			fmt.Fprintln(w, "approval: required (one approval per exact crossing, used once)")
		}
	}
	c := x.Config
	line := fmt.Sprintf("config (%s): %s", c.Check, verdict(c.Allow))
	if c.Rule != "" {
		line += ", rule " + textsafe.Line(c.Rule)
	}
	if c.Reason != "" {
		line += ": " + textsafe.Line(c.Reason)
	}
	fmt.Fprintln(w, line)
	for _, n := range c.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
	if x.Budget != "" {
		fmt.Fprintf(w, "budget: deny: %s\n", x.Budget)
	}
	fmt.Fprintf(w, "policy: %s\n", verdict(x.PolicyAllow))
	if x.Decision.ApprovalRequired && !x.ApprovalRequired {
		fmt.Fprintln(w, "  (policy requires approval, but the configuration refuses the crossing first)")
	}
	set := x.Decision.Digest
	if builtin {
		set += " (built in: the configuration names no policy files)"
	}
	fmt.Fprintf(w, "policy set: %s\n", set)
	switch {
	case len(x.Policies) == 0 && len(x.Decision.Errors) == 0:
		fmt.Fprintln(w, "determining: none (no permit matched: denied by default)")
	case len(x.Policies) > 0:
		fmt.Fprintln(w, "determining:")
	}
	for _, p := range x.Policies {
		extra := ""
		if p.ApprovalRequired {
			extra = ", requires approval"
		}
		fmt.Fprintf(w, "  %s (%s, %s:%d:%d%s)\n", p.ID, p.Effect, p.File, p.Line, p.Column, extra)
		for _, l := range strings.Split(strings.TrimRight(p.Source, "\n"), "\n") {
			fmt.Fprintf(w, "    %s\n", textsafe.Line(l))
		}
	}
	if len(x.Decision.Errors) > 0 {
		fmt.Fprintln(w, "errors (each is a deny):")
		for _, e := range x.Decision.Errors {
			fmt.Fprintf(w, "  %s\n", textsafe.Line(fmt.Sprint(e)))
		}
	}
	printStages(w, x)
}

func policySchemaCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "schema",
		Short: "Print the Cedar schema policies are validated against",
		Long: `Print cordon's Cedar schema (human-readable format). Policies are validated
against it in strict mode; save it to use with Cedar's own tools.

Example:

  cordon policy schema > cordon.cedarschema`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := io.WriteString(g.stdout, policy.Schema())
			return err
		},
	}
}
