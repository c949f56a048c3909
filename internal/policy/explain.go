package policy

import (
	"github.com/cordon-project/cordon/internal/crossing"
)

// Explanation is a decision with the policies that made it, for the
// operator (cordon policy explain). It carries policy source and file
// paths: never show it to the agent.
type Explanation struct {
	// Allow is the decision.
	Allow bool `json:"allow"`
	// Decision is what Decide returns, as the receipt records it.
	Decision crossing.PolicyDecision `json:"decision"`
	// Policies are the determining policies, in the order of
	// Decision.Determining.
	Policies []Explained `json:"policies,omitempty"`
}

// Explained is one determining policy.
type Explained struct {
	ID string `json:"id"`
	// Effect is "permit" or "forbid".
	Effect string `json:"effect"`
	// File, Line and Column are where the policy starts.
	File   string `json:"file"`
	Line   int    `json:"line"`
	Column int    `json:"column"`
	// ApprovalRequired is set for a permit annotated @approval("required").
	ApprovalRequired bool `json:"approval_required,omitempty"`
	// Source is the policy as Cedar text (normalised by cedar-go: comments
	// and layout are not kept).
	Source string `json:"source"`
}

// Explain decides r like Decide and says which policies decided it.
func (s *Set) Explain(r Request) Explanation {
	allow, d, determining := s.decide(r)
	x := Explanation{Allow: allow, Decision: d}
	for _, e := range determining {
		pos := e.policy.Position()
		effect := "permit"
		if e.forbid {
			effect = "forbid"
		}
		x.Policies = append(x.Policies, Explained{
			ID: string(e.id), Effect: effect, File: pos.Filename, Line: pos.Line, Column: pos.Column,
			ApprovalRequired: e.approval, Source: string(e.policy.MarshalCedar()),
		})
	}
	return x
}
