package hostmgr

import (
	"strings"

	"github.com/cordon-project/cordon/internal/evidence"
	"github.com/cordon-project/cordon/internal/hostmgr/proto"
)

// Profile is a sandbox's control profile.
type Profile string

// Profiles. SAFE_GUIDED is the default and what every sandbox returns to.
const (
	SafeGuided     Profile = "SAFE_GUIDED"
	FullControlLab Profile = "FULL_CONTROL_LAB"
)

// AcceptPhrase is the exact risk acceptance FULL_CONTROL_LAB needs.
func AcceptPhrase(name string) string {
	return "I accept that sandbox " + name + " runs without policy, approval and budget gates"
}

// LabBypasses are the controls FULL_CONTROL_LAB bypasses, exactly. The OS
// boundary (namespaces, seccomp, Landlock, cgroups, no capabilities), the
// configuration's allow-lists, custody and redaction, and receipts stay.
var LabBypasses = []string{
	"policy: the sandbox's own Cedar policy set is replaced by permit-all for model, egress, tool and state crossings; the host policy directory and the configuration's allow-lists still decide",
	"approvals: permits marked @approval(\"required\") no longer wait for an operator",
	"budgets: the workload's budgets (requests, tokens, bytes, egress bytes, connections, tool calls) are not enforced for this sandbox; usage is still recorded",
}

// labUnverified are the evidence boundaries a lab sandbox cannot claim:
// its crossings are not mediated by policy, approval and budget.
var labUnverified = []string{evidence.Network, evidence.Credential, evidence.Resource}

// parseProfile checks a requested profile and its risk acceptance.
func parseProfile(p, accept, name string) (Profile, error) {
	switch Profile(p) {
	case "", SafeGuided:
		return SafeGuided, nil
	case FullControlLab:
		if accept != AcceptPhrase(name) {
			return "", proto.Errorf(proto.KindUnauthorized, "FULL_CONTROL_LAB bypasses: %v. To accept, pass exactly: %q", LabBypasses, AcceptPhrase(name))
		}
		return FullControlLab, nil
	}
	return "", proto.Errorf(proto.KindBadRequest, "profile %q: want SAFE_GUIDED or FULL_CONTROL_LAB", p)
}

// markBypassed records in the evidence that the lab profile bypasses
// layers: those boundaries are UNVERIFIED and the admitted level drops.
func markBypassed(rec *evidence.Record) {
	for _, name := range labUnverified {
		b := rec.Boundaries[name]
		b.Verified = false
		b.Facts = append(b.Facts, evidence.Check{Name: "profile", OK: false, Want: string(SafeGuided), Got: string(FullControlLab) + " (risk accepted)", Source: "cordon daemon profile"})
		rec.Boundaries[name] = b
	}
	rec.LevelAdmitted, rec.EnforcementMode = evidence.Admit(rec.Boundaries)
	rec.NonClaims = append(rec.NonClaims, "FULL_CONTROL_LAB: "+strings.Join(LabBypasses, "; "))
}

// ProfileArgs switch a running sandbox's profile.
type ProfileArgs struct {
	Name    string `json:"name"`
	Profile string `json:"profile"`
	Accept  string `json:"accept,omitempty"`
}
