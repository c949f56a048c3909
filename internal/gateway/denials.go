package gateway

import (
	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/denial"
)

// denied fills a denial receipt's rule — what denied it, named by this
// side from what the receipt records (the broker's reason code, the
// policy decision this side made, the budget) — before it is recorded.
// An allow carries no rule.
func (s *Authority) denied(rc *crossing.Receipt) {
	rc.ConfigDigest = s.ConfigDigest
	rc.Rule = ""
	if rc.Decision != crossing.Allow {
		rc.Rule = denial.Rule(*rc, s.Budget.Window)
	}
}

// logDenial is the host's one line per denial, whichever broker denied:
// the receipt (0 when the store gave no id), the broker, the target and
// the rule, every agent-chosen string escaped. WARN, so a run's log at
// its default level shows it.
func (s *Authority) logDenial(id int64, rc crossing.Receipt) {
	denial.Log(s.log(), id, rc)
}
