package denial

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/policy"
)

// Suggestion is the smallest change that would allow a denied crossing,
// for a human: never applied by cordon, never shown to the agent.
type Suggestion struct {
	// Kind is "config" (a YAML snippet for the configuration file),
	// "cedar" (a policy to add to a file the configuration names) or
	// "operator" (a command).
	Kind string `json:"kind"`
	// Text is the snippet or command; empty when no narrow change would
	// allow it (then Note says why).
	Text string `json:"text,omitempty"`
	Note string `json:"note,omitempty"`
}

// Suggest builds the suggestion for a denied receipt; nil for an allowed
// one or one no change of configuration or policy explains (a failed
// dial, a malformed request).
func Suggest(rc crossing.Receipt) *Suggestion {
	if rc.Decision == crossing.Allow {
		return nil
	}
	host, port := HostPort(rc.Target)
	switch Classify(rc) {
	case KindEgressHost, KindEgressPort:
		if strings.Contains(host, "*") {
			// Not a name the egress broker lets through (a forged
			// receipt's, or a request's): as an entry it would be a
			// wildcard pattern allowing every name under it.
			return &Suggestion{Kind: "config", Note: "the target is not a hostname: no egress.allow entry allows exactly it"}
		}
		return &Suggestion{Kind: "config", Text: EgressEntry(host, port),
			Note: "add this entry to egress.allow (or the port to the ports of the host's entry)"}
	case KindModelRoute:
		return &Suggestion{Kind: "config", Text: ModelGlob(rc.Target),
			Note: "add this id to the models list of the models[] route of its API"}
	case KindToolOffer:
		server, tool, _ := strings.Cut(rc.Target, "/")
		return &Suggestion{Kind: "config", Text: "allow: [" + yamlString(globLiteral(tool)) + "]",
			Note: "add this tool to the allow list of the tools[] server " + yamlString(server)}
	case KindBudget:
		return budgetSuggestion(rc.Budget)
	case KindApprovalPending, KindApprovalDenied:
		if id := approvalID.FindString(rc.Reason); id != "" && Classify(rc) == KindApprovalPending {
			return &Suggestion{Kind: "operator", Text: "cordon approvals approve " + id,
				Note: "an operator decides; the agent retries the same crossing once approved"}
		}
		return &Suggestion{Kind: "operator", Note: "retry the crossing and approve it (cordon approvals list)"}
	case KindCedarForbid:
		return &Suggestion{Kind: "cedar",
			Note: "forbid " + strings.Join(rc.Policy.Determining, ", ") + " wins over any permit: narrow or remove it (cordon policy explain --receipt shows its source)"}
	case KindCedarNoPermit:
		if q, ok := QuestionOf(rc); ok {
			return &Suggestion{Kind: "cedar", Text: CedarPermit(rc.Identity.Workload, q.Action, q.Resource.Type, q.Resource.ID, q.Port),
				Note: "add this permit to a policy file the configuration names"}
		}
	}
	return nil
}

var approvalID = regexp.MustCompile(`apr_[0-9a-f]+`)

func budgetSuggestion(b crossing.BudgetState) *Suggestion {
	for _, c := range amounts(b.Used, b.Limits) {
		if c.limit > 0 && c.used >= c.limit {
			return &Suggestion{Kind: "config", Text: fmt.Sprintf("budgets:\n  %s: %d\n", c.name, c.used+1),
				Note: "raise the limit (or wait for the budget's window to begin again)"}
		}
	}
	return &Suggestion{Kind: "config", Note: "raise the budgets limit the crossing needed (or wait for the window to begin again)"}
}

// Question is the policy question a crossing asked.
type Question struct {
	Action   string
	Resource policy.Resource
	Port     int
}

// QuestionOf is the policy question rc's crossing asked, from its broker,
// action and target.
func QuestionOf(rc crossing.Receipt) (Question, bool) {
	switch rc.Broker {
	case "egress":
		h, p := HostPort(rc.Target)
		return Question{Action: policy.ActionEgressConnect, Resource: policy.Resource{Type: "Host", ID: h}, Port: p}, h != ""
	case "model":
		return Question{Action: policy.ActionModelInvoke, Resource: policy.Resource{Type: "Model", ID: rc.Target}}, rc.Target != ""
	case "tool":
		server, _, ok := strings.Cut(rc.Target, "/")
		return Question{Action: policy.ActionToolCall, Resource: policy.Resource{Type: "Tool", ID: rc.Target, Server: server}}, ok
	case "state":
		a := policy.ActionStateRead
		switch rc.Action {
		case "put", "delete", "reset":
			a = policy.ActionStateWrite
		}
		return Question{Action: a, Resource: policy.Resource{Type: "State", ID: rc.Target}}, rc.Target != ""
	case "ingress":
		return Question{Action: policy.ActionIngressConnect, Resource: policy.Resource{Type: "Route", ID: rc.Target}}, rc.Target != ""
	}
	return Question{}, false
}

// CedarPermit is one permit for exactly this workload, action and
// resource (and, for an egress connection, port). Every untrusted string
// is a quoted Cedar literal.
func CedarPermit(workload, action, resourceType, id string, port int) string {
	if action == policy.ActionEgressConnect {
		id = policy.HostID(id) // the entity id the runtime asks about
	}
	var b strings.Builder
	fmt.Fprintf(&b, "permit(\n  principal == Workload::%s,\n  action == Action::%s,\n  resource == %s::%s\n)",
		cedarString(workload), cedarString(action), cedarIdent(resourceType), cedarString(id))
	if action == policy.ActionEgressConnect {
		fmt.Fprintf(&b, " when { context.port == %d }", port)
	}
	b.WriteString(";\n")
	return b.String()
}

// cedarIdent keeps an entity type only if it is one of the schema's:
// never a string a receipt carried.
func cedarIdent(t string) string {
	switch t {
	case "Host", "Model", "Tool", "State", "Route":
		return t
	}
	return "Unknown"
}

// EgressEntry is one egress.allow entry for exactly host and port.
func EgressEntry(host string, port int) string {
	return fmt.Sprintf("egress:\n  allow:\n    - host: %s\n      ports: [%d]\n", yamlString(host), port)
}

// ModelGlob is a models list with one glob matching exactly model.
func ModelGlob(model string) string {
	return "models: [" + yamlString(globLiteral(model)) + "]\n"
}
