package denial

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/cordon-project/cordon/internal/crossing"
)

// Stages of a decision, in the runtime's order: the configuration's
// allow-lists, the budget, approvals, then Cedar policy. A Rule starts
// with the stage that denied.
const (
	StageConfig   = "config"
	StageBudget   = "budget"
	StageApproval = "approval"
	StageCedar    = "cedar"
)

// Egress reason codes (internal/broker/egress's, the first word of an
// egress receipt's reason). Repeated here, not imported: this package
// reads receipts, whichever cordon wrote them.
const (
	egressHostNotAllowed = "host-not-allowed"
	egressPortNotAllowed = "port-not-allowed"
	egressIPLiteral      = "ip-literal"
	egressAddressDenied  = "address-denied"
	egressResolveFailed  = "resolve-failed"
	egressBudget         = "budget-exceeded"
	egressPolicy         = "policy-denied"
	egressApprovalWait   = "approval-pending"
	egressApprovalDenied = "approval-denied"
	egressConnLimit      = "connection-limit"
)

// Kind is what kind of rule denied a receipt's crossing.
type Kind int

const (
	KindOther Kind = iota
	KindEgressHost
	KindEgressPort
	KindModelRoute
	KindToolOffer
	KindBudget
	KindApprovalPending
	KindApprovalDenied
	KindCedarForbid
	KindCedarNoPermit
	KindCedarError
)

// Classify reads what denied rc from what the receipt recorded: the
// broker's reason (a fixed code for egress, the broker's own words for
// the others) and the policy decision the privileged side attached.
func Classify(rc crossing.Receipt) Kind {
	reason := rc.Reason
	if rc.Broker == "egress" {
		code, _, _ := strings.Cut(reason, " ")
		switch code {
		case egressHostNotAllowed:
			return KindEgressHost
		case egressPortNotAllowed:
			return KindEgressPort
		case egressBudget:
			return KindBudget
		case egressPolicy:
			return cedarKind(rc.Policy)
		case egressApprovalWait:
			return KindApprovalPending
		case egressApprovalDenied:
			return KindApprovalDenied
		}
		return KindOther
	}
	switch {
	case strings.HasPrefix(reason, "model ") && strings.Contains(reason, " is not allowed for this workload"):
		return KindModelRoute
	case strings.Contains(reason, "budget is exhausted"):
		return KindBudget
	case strings.HasPrefix(reason, "approval pending"):
		return KindApprovalPending
	case strings.HasPrefix(reason, "an operator denied"):
		return KindApprovalDenied
	case strings.HasPrefix(reason, "denied by policy"),
		rc.Policy != nil && strings.Contains(reason, crossing.ErrPolicyDenied.Error()):
		return cedarKind(rc.Policy)
	case rc.Broker == "tool" && strings.Contains(reason, "does not offer"):
		return KindToolOffer
	}
	return KindOther
}

func cedarKind(d *crossing.PolicyDecision) Kind {
	switch {
	case d == nil:
		return KindCedarNoPermit
	case len(d.Errors) > 0:
		return KindCedarError
	case len(d.Determining) > 0:
		return KindCedarForbid
	}
	return KindCedarNoPermit
}

// Rule names what denied rc, starting with its stage ("config: egress.allow
// has no entry for example.com:443"). window is the workload's budget
// window (0: the workload's lifetime). An allowed receipt has no rule.
func Rule(rc crossing.Receipt, window time.Duration) string {
	if rc.Decision == crossing.Allow {
		return ""
	}
	host, port := HostPort(rc.Target)
	switch Classify(rc) {
	case KindEgressHost:
		return fmt.Sprintf("%s: egress.allow has no entry for %s", StageConfig, rc.Target)
	case KindEgressPort:
		return fmt.Sprintf("%s: egress.allow has an entry for %s but none lists port %d", StageConfig, host, port)
	case KindModelRoute:
		return fmt.Sprintf("%s: no models[] route allows model %s", StageConfig, strconv.Quote(rc.Target))
	case KindToolOffer:
		return fmt.Sprintf("%s: tools[] does not offer %s", StageConfig, strconv.Quote(rc.Target))
	case KindBudget:
		return StageBudget + ": " + budgetRule(rc.Budget, window)
	case KindApprovalPending:
		return StageApproval + ": waiting for an operator's approval"
	case KindApprovalDenied:
		return StageApproval + ": an operator denied it (or too many approvals wait)"
	case KindCedarForbid:
		return StageCedar + ": forbidden by " + strings.Join(rc.Policy.Determining, ", ")
	case KindCedarNoPermit:
		return StageCedar + ": no permit matched"
	case KindCedarError:
		return StageCedar + ": evaluation error (" + strings.Join(rc.Policy.Errors, "; ") + ")"
	}
	if rc.Broker == "egress" {
		code, _, _ := strings.Cut(rc.Reason, " ")
		switch code {
		case egressIPLiteral:
			return StageConfig + ": egress never allows an IP literal (egress.allow names hosts)"
		case egressAddressDenied:
			return StageConfig + ": " + host + " resolves to an address in a denied range (not in egress.unsafe_allow_ranges)"
		case egressResolveFailed:
			return StageConfig + ": " + host + " did not resolve (egress.resolve or DNS)"
		case egressConnLimit:
			return StageConfig + ": the workload's concurrent connection limit"
		}
		return "egress: " + code
	}
	return rc.Broker + ": " + firstLine(rc.Reason)
}

// budgetRule names the limit a budget state is at, and its window.
func budgetRule(b crossing.BudgetState, window time.Duration) string {
	w := "the workload's lifetime"
	if window > 0 {
		w = "window " + window.String()
	}
	for _, c := range amounts(b.Used, b.Limits) {
		if c.limit > 0 && c.used >= c.limit {
			return fmt.Sprintf("budgets.%s: %d used of %d (%s)", c.name, c.used, c.limit, w)
		}
	}
	// The crossing asked for more than what was left.
	for _, c := range amounts(b.Used, b.Limits) {
		if c.limit > 0 {
			return fmt.Sprintf("budgets.%s: %d used of %d, the crossing needed more (%s)", c.name, c.used, c.limit, w)
		}
	}
	return "a budget limit (" + w + ")"
}

type amount struct {
	name        string
	used, limit int64
}

func amounts(u, l crossing.Amount) []amount {
	return []amount{
		{"requests", u.Requests, l.Requests},
		{"input_tokens", u.InputTokens, l.InputTokens},
		{"output_tokens", u.OutputTokens, l.OutputTokens},
		{"bytes", u.Bytes, l.Bytes},
		{"egress_bytes", u.EgressBytes, l.EgressBytes},
		{"connections", u.Connections, l.Connections},
		{"ingress_connections", u.IngressConnections, l.IngressConnections},
		{"ingress_bytes", u.IngressBytes, l.IngressBytes},
	}
}

// HostPort splits an egress target "host:port" (port 0 when it has none).
func HostPort(target string) (string, int) {
	h, p, err := net.SplitHostPort(target)
	if err != nil {
		return target, 0
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		return target, 0
	}
	return h, n
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
