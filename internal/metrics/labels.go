package metrics

import (
	"strings"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/sandbox/level"
	"github.com/cordon-project/cordon/internal/store"
)

// Every label value below comes from one of these tables: nothing read off
// a receipt, a record or an error reaches a label unless it is equal to a
// table entry, and anything else becomes "other" (or "unknown").

// brokers are the receipt brokers a label may name.
var brokers = []string{"model", "egress", "tool", "state", "ingress", "gateway"}

// decisions are the receipt decisions a label may name.
var decisions = []string{crossing.Allow, crossing.Deny}

// Reason classes: a crossing's reason reduced to a small fixed set (the
// free-text reason stays in the receipt).
const (
	ReasonOK          = "ok"           // allowed
	ReasonPolicy      = "policy"       // Cedar denied (or an evaluation error)
	ReasonApproval    = "approval"     // waiting for, or refused by, an operator
	ReasonBudget      = "budget"       // a budget limit (tokens, bytes, connections, receipts)
	ReasonNotDeclared = "not_declared" // the configuration declares no such host, port, model, tool or route
	ReasonAddress     = "address"      // an IP literal, a denied address range, a name that did not resolve
	ReasonInvalid     = "invalid"      // the request did not parse or broke a protocol rule
	ReasonLimit       = "limit"        // a concurrency limit (streams, connections)
	ReasonUpstream    = "upstream"     // the upstream failed (dial, error, unreachable, timeout)
	ReasonUnavailable = "unavailable"  // the authority, a credential or the store was unavailable
	ReasonLost        = "lost"         // the gateway ended without a receipt (gateway_lost, receipt_missing)
	ReasonOther       = "other"
)

var reasonClasses = []string{ReasonOK, ReasonPolicy, ReasonApproval, ReasonBudget, ReasonNotDeclared, ReasonAddress,
	ReasonInvalid, ReasonLimit, ReasonUpstream, ReasonUnavailable, ReasonLost, ReasonOther}

// reasonCodes maps the brokers' fixed reason codes (the first word of a
// reason) to their class.
var reasonCodes = map[string]string{
	// egress (internal/broker/egress) and the checked dialer
	"bad-request": ReasonInvalid, "bad-host": ReasonInvalid, "host-mismatch": ReasonInvalid,
	"no-identity": ReasonUnavailable, "ip-literal": ReasonAddress, "host-not-allowed": ReasonNotDeclared,
	"port-not-allowed": ReasonNotDeclared, "resolve-failed": ReasonAddress, "address-denied": ReasonAddress,
	"budget-exceeded": ReasonBudget, "policy-denied": ReasonPolicy, "connection-limit": ReasonLimit,
	"approval-pending": ReasonApproval, "approval-denied": ReasonApproval, "authority-unavailable": ReasonUnavailable,
	"dial-failed": ReasonUpstream, "upstream-error": ReasonUpstream, "client-hello-timeout": ReasonInvalid,
	"client-hello-invalid": ReasonInvalid, "sni-missing": ReasonInvalid, "sni-mismatch": ReasonInvalid,
	"idle-timeout": ReasonUpstream, "client-gone": ReasonUpstream, "not-declared": ReasonNotDeclared,
	"peer-mismatch": ReasonUpstream, "unavailable": ReasonUnavailable, "busy": ReasonLimit,
	// ingress (internal/broker/ingress) and the gateway
	"concurrency-limit": ReasonLimit, "target-unreachable": ReasonUpstream, "ingress-bytes-exceeded": ReasonBudget,
	"stopped": ReasonUpstream, "not-admitted": ReasonNotDeclared,
	"receipt_budget_exhausted": ReasonBudget, "receipt_budget_refusals": ReasonBudget,
	"receipt_missing": ReasonLost, store.ReasonGatewayLost: ReasonLost,
}

// reasonWords classify free-text reasons (the model, tool and state
// brokers write sentences), first match wins.
var reasonWords = []struct{ word, class string }{
	{"unavailable", ReasonUnavailable}, // "the budget authority is unavailable" is not a budget refusal
	{"approval", ReasonApproval},
	{"budget", ReasonBudget},
	{"policy", ReasonPolicy},
	{"not allowed", ReasonNotDeclared},
	{"does not offer", ReasonNotDeclared},
	{"no tools[]", ReasonNotDeclared},
	{"no models[]", ReasonNotDeclared},
	{"no ingress[]", ReasonNotDeclared},
	{"too many", ReasonLimit},
	{"upstream", ReasonUpstream},
	{"timed out", ReasonUpstream},
	{"invalid", ReasonInvalid},
	{"must", ReasonInvalid},
	{"not valid", ReasonInvalid},
}

// maxReasonScan bounds how much of a reason is looked at.
const maxReasonScan = 256

// ReasonClass reduces a receipt to its reason class, one of a fixed set.
func ReasonClass(rc crossing.Receipt) string {
	if rc.Decision == crossing.Allow {
		return ReasonOK
	}
	if rc.Action == store.ReasonGatewayLost {
		return ReasonLost
	}
	r := rc.Reason
	if len(r) > maxReasonScan {
		r = r[:maxReasonScan]
	}
	code := r
	if i := strings.IndexAny(code, ": "); i >= 0 {
		code = code[:i]
	}
	if c, ok := reasonCodes[code]; ok {
		return c
	}
	lower := strings.ToLower(r)
	for _, w := range reasonWords {
		if strings.Contains(lower, w.word) {
			return w.class
		}
	}
	if rc.Policy != nil && (len(rc.Policy.Determining) > 0 || len(rc.Policy.Errors) > 0) {
		return ReasonPolicy
	}
	return ReasonOther
}

// oneOf returns v when it is in set, otherwise other.
func oneOf(v string, set []string, other string) string {
	for _, s := range set {
		if v == s {
			return v
		}
	}
	return other
}

// brokerLabel is the receipt's broker, bounded.
func brokerLabel(b string) string { return oneOf(b, brokers, "other") }

// decisionLabel is the receipt's decision, bounded.
func decisionLabel(d string) string { return oneOf(d, decisions, "other") }

// states are the daemon's record states.
var states = []string{store.DCreating, store.DCreated, store.DStarting, store.DRunning, store.DStopping, store.DStopped, store.DRemoving}

// levels are the isolation levels a sandbox can be admitted at.
func levels() []string {
	var ls []string
	for _, l := range level.Levels() {
		ls = append(ls, l.String())
	}
	return ls
}

// failureKinds are internal/failure's closed set.
var failureKinds = []string{
	string(failure.KindUsage), string(failure.KindPrivilege), string(failure.KindUnsupported), string(failure.KindPolicyRejected),
	string(failure.KindLeaseExhausted), string(failure.KindProvision), string(failure.KindStart), string(failure.KindEvidence),
	string(failure.KindExec), string(failure.KindTimeout), string(failure.KindStore), string(failure.KindCustody), string(failure.KindInternal),
}

// Lifecycle operations counted.
const (
	OpCreate = "create"
	OpStart  = "start"
	OpStop   = "stop"
)

var lifecycleOps = []string{OpCreate, OpStart, OpStop}

// budgetKinds are crossing.Amount's fields, as store.OverBudget names them.
var budgetKinds = []string{"requests", "input_tokens", "output_tokens", "bytes", "egress_bytes", "connections",
	"ingress_connections", "ingress_bytes"}

func amountOf(a crossing.Amount) [8]int64 {
	return [8]int64{a.Requests, a.InputTokens, a.OutputTokens, a.Bytes, a.EgressBytes, a.Connections, a.IngressConnections, a.IngressBytes}
}
