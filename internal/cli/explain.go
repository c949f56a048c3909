package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/cordon-project/cordon/internal/config"
	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/denial"
	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/policy"
	"github.com/cordon-project/cordon/internal/store"
	"github.com/cordon-project/cordon/internal/textsafe"
)

// The verdicts of a stage.
const (
	verdictAllow = "allow"
	verdictDeny  = "deny"
	// verdictWait: the crossing waits for an operator's approval (the
	// first attempt is refused with approval-pending).
	verdictWait = "wait"
)

// ExplainStage is one stage of the runtime's decision, in the runtime's
// order: config (the brokers' allow-lists, run with their own code),
// cedar (the policy set), approval (a determining permit's @approval),
// budget (the store's reservation).
type ExplainStage struct {
	Stage   string `json:"stage"`
	Verdict string `json:"verdict"`
	// Decided is what decided: the rule that allowed, or why it denies.
	Decided string `json:"decided"`
}

// stages fills x's stages, the first one that refuses, its rule (named
// as a denial receipt names it) and the suggestion.
func (x *ExplainReport) stages(r explainRequest, workload string) {
	c := x.Config
	cfg := ExplainStage{Stage: denial.StageConfig, Verdict: verdictAllow, Decided: c.Check}
	if c.Rule != "" {
		cfg.Decided += " rule " + c.Rule
	}
	if !c.Allow {
		cfg.Verdict, cfg.Decided = verdictDeny, c.Check+": "+c.Reason
	}
	ced := ExplainStage{Stage: denial.StageCedar, Verdict: verdictAllow}
	switch {
	case x.PolicyAllow:
		ced.Decided = "permitted by " + strings.Join(x.Decision.Determining, ", ")
	case len(x.Decision.Errors) > 0:
		ced.Verdict, ced.Decided = verdictDeny, "evaluation error"
	case len(x.Decision.Determining) > 0:
		ced.Verdict, ced.Decided = verdictDeny, "forbidden by "+strings.Join(x.Decision.Determining, ", ")
	default:
		ced.Verdict, ced.Decided = verdictDeny, "no permit matched"
	}
	apr := ExplainStage{Stage: denial.StageApproval, Verdict: verdictAllow, Decided: "no determining permit requires approval"}
	if x.Decision.ApprovalRequired {
		apr.Verdict, apr.Decided = verdictWait, "a determining permit has @approval(\"required\"): the crossing waits for an operator"
	}
	bud := ExplainStage{Stage: denial.StageBudget, Verdict: verdictAllow, Decided: "within the budgets"}
	if x.budgetOver != "" {
		bud.Verdict, bud.Decided = verdictDeny, x.budgetOver
	}
	x.Stages = []ExplainStage{cfg, ced, apr, bud}
	for _, s := range x.Stages {
		if s.Verdict != verdictAllow {
			x.DeniedAt = s.Stage
			break
		}
	}
	if x.DeniedAt == "" {
		return
	}
	rc := x.asReceipt(r, workload)
	x.Rule = denial.Rule(rc, x.window)
	if x.DeniedAt == denial.StageConfig && denial.Classify(rc) == denial.KindOther {
		x.Rule = denial.StageConfig + ": " + c.Reason
	}
	x.Suggestion = denial.Suggest(rc)
}

// asReceipt is the denial receipt the runtime would write for r at the
// stage that refuses it — so the rule and the suggestion are named by
// the code that names a recorded denial's.
func (x *ExplainReport) asReceipt(r explainRequest, workload string) crossing.Receipt {
	rc := crossing.Receipt{Identity: crossing.Identity{Workload: workload}, Decision: crossing.Deny, Target: r.Resource.ID, Action: r.Operation}
	egress := false
	switch r.Action {
	case policy.ActionModelInvoke:
		rc.Broker = "model"
	case policy.ActionEgressConnect:
		rc.Broker, egress = "egress", true
		rc.Target = fmt.Sprintf("%s:%d", r.Resource.ID, r.Context.Port)
	case policy.ActionToolCall:
		rc.Broker = "tool"
	case policy.ActionStateRead, policy.ActionStateWrite:
		rc.Broker = "state"
		if rc.Action == "" && r.Action == policy.ActionStateWrite {
			rc.Action = "put"
		}
	case policy.ActionIngressConnect:
		rc.Broker = "ingress"
	}
	pick := func(egressCode, text string) string {
		if egress {
			return egressCode
		}
		return text
	}
	switch x.DeniedAt {
	case denial.StageConfig:
		rc.Reason = x.Config.Reason
		if r.Action == policy.ActionModelInvoke && strings.HasPrefix(rc.Reason, "no models[] route") {
			rc.Reason = fmt.Sprintf("model %q is not allowed for this workload", r.Resource.ID)
		}
		if r.Action == policy.ActionToolCall && strings.Contains(rc.Reason, "does not offer") {
			rc.Reason = "tools[] does not offer it"
		}
	case denial.StageCedar:
		d := x.Decision
		rc.Policy, rc.Reason = &d, pick("policy-denied", "denied by policy")
	case denial.StageApproval:
		rc.Reason = pick("approval-pending", "approval pending")
	case denial.StageBudget:
		// The state a refusal records: the spend before the crossing.
		rc.Reason, rc.Budget = pick("budget-exceeded", "the workload's budget is exhausted"), x.budgetState
	}
	return rc
}

// ExplainReplay is --receipt's comparison: the recorded answer and the
// one the current configuration and policy give to the same question.
type ExplainReplay struct {
	Receipt          int64  `json:"receipt"`
	RecordedDecision string `json:"recorded_decision"`
	RecordedRule     string `json:"recorded_rule,omitempty"`
	RecordedPolicy   string `json:"recorded_policy_digest,omitempty"`
	RecordedConfig   string `json:"recorded_config_digest,omitempty"`
	// Config is the current configuration file's digest.
	Config string `json:"config_digest,omitempty"`
	// Decision is the current answer: allow, deny, or wait (an approval).
	Decision string `json:"decision"`
	Rule     string `json:"rule,omitempty"`
	Changed  bool   `json:"changed"`
	// Why says what changed (or what could not be compared).
	Why []string `json:"why,omitempty"`
}

// replayQuestion is the question a receipt's crossing asked, as an
// explain request, and the identity that asked it.
func replayQuestion(rc crossing.Receipt) (explainRequest, error) {
	q, ok := denial.QuestionOf(rc)
	if !ok {
		return explainRequest{}, fmt.Errorf("receipt %d (broker %s, action %s) asked no policy question that can be replayed", rc.ID, textsafe.Line(rc.Broker), textsafe.Line(rc.Action))
	}
	r := explainRequest{Action: q.Action, Resource: q.Resource, Context: policy.Context{Port: q.Port, ArgumentDigest: rc.RequestDigest}}
	switch rc.Broker {
	case "model":
		// "anthropic.messages": the route's API is the action's first word.
		if api, _, ok := strings.Cut(rc.Action, "."); ok {
			r.API = api
		}
		r.Context.ArgumentDigest = ""
	case "state":
		r.Operation = rc.Action
		r.Context.ArgumentDigest = ""
	case "egress", "ingress":
		r.Context.ArgumentDigest = ""
	}
	return r, nil
}

// replay decides a recorded receipt's question now: the receipt's
// workload, the current configuration, policy and budget spend.
func replay(ctx context.Context, st *store.Store, cfg *config.Config, set *policy.Set, id int64) (ExplainReport, error) {
	rc, err := st.Receipt(ctx, id)
	if errors.Is(err, store.ErrNoReceipt) {
		return ExplainReport{}, failure.Fail(failure.KindUsage, "policy explain", err)
	}
	if err != nil {
		return ExplainReport{}, failure.Fail(failure.KindStore, "policy explain", err)
	}
	r, err := replayQuestion(rc)
	if err != nil {
		return ExplainReport{}, failure.Fail(failure.KindUsage, "policy explain", err)
	}
	var why []string
	c := *cfg
	if rc.Identity.Workload != "" && rc.Identity.Workload != c.Workload {
		why = append(why, fmt.Sprintf("replayed as the receipt's workload %s (the configuration's is %s)", textsafe.Line(rc.Identity.Workload), textsafe.Line(c.Workload)))
		c.Workload = rc.Identity.Workload
	}
	if rc.Identity.Tenant != "" {
		c.Tenant = rc.Identity.Tenant
	}
	if rc.Identity.Purpose != "" {
		c.Purpose = rc.Identity.Purpose
	}
	// The budget is the workload's spend in the store now.
	bs, err := st.BudgetState(ctx, c.Workload, store.Budget{Limits: c.Budgets.Limits(), Window: c.Budgets.Window})
	if err != nil {
		return ExplainReport{}, failure.Fail(failure.KindStore, "policy explain: read the budget", err)
	}
	r.Context.Budget.Used = bs.Used
	x := explain(&c, set, r)
	rp := ExplainReplay{Receipt: rc.ID, RecordedDecision: rc.Decision, RecordedRule: rc.Rule, Decision: verdictAllow, Rule: x.Rule,
		RecordedConfig: rc.ConfigDigest, Config: cfg.Digest}
	if rp.RecordedRule == "" && rc.Decision != crossing.Allow {
		rp.RecordedRule = denial.Rule(rc, c.Budgets.Window)
	}
	if rc.Policy != nil {
		rp.RecordedPolicy = rc.Policy.Digest
	}
	switch {
	case !x.Allow:
		rp.Decision = verdictDeny
	case x.ApprovalRequired && rc.Approval == "":
		rp.Decision = verdictWait
	}
	recorded := rc.Decision
	if recorded != crossing.Allow && strings.HasPrefix(rp.RecordedRule, denial.StageApproval+": waiting") {
		recorded = verdictWait
	}
	rp.Changed = recorded != rp.Decision || (recorded != crossing.Allow && rp.RecordedRule != rp.Rule)
	if rp.RecordedConfig != "" && rp.RecordedConfig != rp.Config {
		why = append(why, fmt.Sprintf("the configuration changed: recorded %s, now %s", rp.RecordedConfig, rp.Config))
	}
	if rp.RecordedPolicy != "" && rp.RecordedPolicy != x.Decision.Digest {
		why = append(why, fmt.Sprintf("the policy set changed: recorded %s, now %s", rp.RecordedPolicy, x.Decision.Digest))
	}
	if stage, _, _ := strings.Cut(rp.RecordedRule, ":"); recorded == crossing.Deny && !isStage(stage) {
		why = append(why, "the recorded denial was made when the crossing happened (a resolution, a dial, the request's shape): explain decides only the stages")
	}
	if rp.Changed {
		why = append(why, fmt.Sprintf("recorded %s (%s), now %s (%s)", recorded, orNone(rp.RecordedRule), rp.Decision, orNone(rp.Rule)))
	}
	rp.Why = why
	x.Replay = &rp
	return x, nil
}

func isStage(s string) bool {
	switch s {
	case denial.StageConfig, denial.StageCedar, denial.StageApproval, denial.StageBudget:
		return true
	}
	return false
}

func orNone(s string) string {
	if s == "" {
		return "no rule"
	}
	return s
}

// printStages prints the stages, the first refusing one marked, its
// rule and suggestion, and a replay's comparison.
func printStages(w io.Writer, x ExplainReport) {
	fmt.Fprintln(w, "stages (the runtime's order):")
	for _, s := range x.Stages {
		mark := "  "
		if s.Stage == x.DeniedAt {
			mark = "=>"
		}
		fmt.Fprintf(w, "%s %-8s %-5s %s\n", mark, s.Stage, s.Verdict, textsafe.Line(s.Decided))
	}
	if x.DeniedAt != "" {
		fmt.Fprintf(w, "first refusal: %s\n", textsafe.Line(x.Rule))
		printSuggestion(w, x.Suggestion)
	}
	if rp := x.Replay; rp != nil {
		fmt.Fprintf(w, "receipt %d: recorded %s (%s); now %s", rp.Receipt, textsafe.Line(rp.RecordedDecision), textsafe.Line(orNone(rp.RecordedRule)), rp.Decision)
		if rp.Changed {
			fmt.Fprintln(w, ": the answer changed")
		} else {
			fmt.Fprintln(w, ": the same answer")
		}
		for _, y := range rp.Why {
			fmt.Fprintf(w, "  %s\n", textsafe.Line(y))
		}
	}
}
