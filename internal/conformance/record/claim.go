package record

import (
	"fmt"
	"strings"

	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/sandbox/level"
)

// NoClaim is the claim admitted when the probes support none.
const NoClaim = "NONE"

// noClaimPrefix starts the non-claim a record without a claim carries.
const noClaimPrefix = "no isolation level is claimed: "

// Claim is the level requested and the claim the probes admit (contract
// section 11: the claim is no stronger than its evidence).
type Claim struct {
	Requested string `json:"level_requested"`
	Profile   string `json:"profile,omitempty"`
	// Ceiling is the highest level the provider said it could evidence
	// here, capped at the level requested.
	Ceiling string `json:"ceiling"`
	// Admitted is Ceiling when every class has a passing probe and no
	// probe failed, NoClaim otherwise.
	Admitted string `json:"admitted"`
	// Why says what kept the claim below the level requested.
	Why     []string             `json:"why,omitempty"`
	Classes map[Class]ClassCount `json:"classes"`
	Missing []Class              `json:"classes_without_pass,omitempty"`
	Failed  []string             `json:"failed,omitempty"`
}

// ClassCount counts a class's verdicts.
type ClassCount struct {
	Pass         int `json:"pass"`
	Fail         int `json:"fail"`
	NotEvidenced int `json:"not_evidenced"`
}

// Judge admits the claim: the ceiling is the level requested capped by
// the provider's capability; it is admitted only when every class has at
// least one pass and no probe failed; otherwise no level is claimed, and
// Why says why. A not_evidenced probe is never a pass.
func Judge(requested, profile string, capability sandbox.Capability, probes []ProbeResult) Claim {
	c := Claim{Requested: requested, Profile: profile, Classes: map[Class]ClassCount{}}
	for _, cl := range Classes() {
		c.Classes[cl] = ClassCount{}
	}
	for _, p := range probes {
		n, known := c.Classes[p.Class]
		if !known {
			c.Why = append(c.Why, fmt.Sprintf("probe %s has unknown class %q", p.ID, p.Class))
			c.Failed = append(c.Failed, p.ID)
			continue
		}
		switch p.Verdict {
		case Pass:
			n.Pass++
		case NotEvidenced:
			n.NotEvidenced++
		default: // fail, or anything else: never a pass
			n.Fail++
			c.Failed = append(c.Failed, p.ID)
		}
		c.Classes[p.Class] = n
	}
	req, err := level.Parse(requested)
	if err != nil {
		c.Why = append(c.Why, fmt.Sprintf("level requested %q: %v", requested, err))
	}
	ceiling := req
	if capability.MaxLevel < ceiling {
		ceiling = capability.MaxLevel
		c.Why = append(c.Why, fmt.Sprintf("provider %s evidences at most %s here", capability.Provider, capability.MaxLevel))
	}
	c.Ceiling = ceiling.String()
	for _, cl := range Classes() {
		if c.Classes[cl].Pass == 0 {
			c.Missing = append(c.Missing, cl)
		}
	}
	if len(c.Missing) > 0 {
		c.Why = append(c.Why, "no passing probe in class "+joinClasses(c.Missing))
	}
	if len(c.Failed) > 0 {
		c.Why = append(c.Why, "failed: "+strings.Join(c.Failed, ", "))
	}
	c.Admitted = NoClaim
	if err == nil && ceiling > level.LevelUnknown && len(c.Missing) == 0 && len(c.Failed) == 0 {
		c.Admitted = ceiling.String()
	}
	return c
}

// NonClaims are the record's own non-claims from the claim: each class
// not evidenced and each probe not evidenced.
func (c Claim) NonClaims() []string {
	var out []string
	if c.Admitted == NoClaim {
		out = append(out, noClaimPrefix+strings.Join(c.Why, "; "))
	}
	return out
}

func joinClasses(cs []Class) string {
	s := make([]string, len(cs))
	for i, c := range cs {
		s[i] = string(c)
	}
	return strings.Join(s, ", ")
}

// SuiteTCB, SuiteAssumptions and SuiteNonClaims are the suite's own,
// added to internal/evidence's.
var (
	SuiteTCB = []string{
		"the evidence log's signing key (<state-dir>/evidence/log.key) and the host that holds it: whoever holds it can sign a record",
		"the cordon binary running the suite is the binary under test (cordon.binary_sha256); its probe program (cordon __probe) runs inside each sandbox",
	}
	SuiteAssumptions = []string{
		"the probes' positive controls ran on the same host, kernel and boot as the probes (host.boot_id)",
		"no other process changed the host facts the probes observed during the window",
	}
	SuiteNonClaims = []string{
		"probes that need a test build (cordon_testhooks: kill at a point, a layer skipped as a positive control) are not evidenced by a release binary: they are contract-tested by `go test` only",
		"a probe not_evidenced is no claim: the provider or host could not support it, and the claim does not cover it",
		"the record evidences this host (kernel, boot id, host facts) in its window only, not another host, kernel or later boot",
		"the probes run cordon's own probe program inside the sandbox, not the agents: no claim about an agent's compatibility or behaviour",
		"what a probe inside printed (hint) is shown, never judged; facts are what the trusted side observed from outside",
		"cordon does not re-read the whole evidence log before a run: a run refuses a log whose newest signed tree no longer matches the stored hashes, and no checkpoint signs a receipt changed since it was appended, but a receipt body changed under an older checkpoint is found only by `cordon evidence verify` (run it, e.g. daily)",
	}
)

// Maturity labels (contract section 10); each is judged separately.
const (
	ContractTested         = "contract-tested"
	ReferenceAdapterProven = "reference-adapter-proven"
	EnvironmentEvidenced   = "environment-evidenced"
	ReferenceAdapter       = "linux-native"
)

// Maturity says which labels this record supports and why.
type Maturity struct {
	// Is lists the labels that hold ("none" when none): they are
	// separate claims, not steps of one scale.
	Is     string  `json:"is"`
	Labels []Label `json:"labels"`
}

// Label is one maturity label's verdict.
type Label struct {
	Label string `json:"label"`
	Holds bool   `json:"holds"`
	Why   string `json:"why"`
}

func judgeMaturity(r *Record) Maturity {
	ran := map[Class]bool{}
	for _, p := range r.Probes {
		if p.Verdict == Pass || p.Verdict == Fail {
			ran[p.Class] = true
		}
	}
	var notRun []Class
	for _, c := range Classes() {
		if !ran[c] {
			notRun = append(notRun, c)
		}
	}
	admitted := r.Claim.Admitted != NoClaim
	ct := Label{Label: ContractTested, Holds: len(notRun) == 0}
	if ct.Holds {
		ct.Why = "a probe of every class of contract section 2 item 5 ran and was judged from outside"
	} else {
		ct.Why = "no probe was judged in class " + joinClasses(notRun)
	}
	rap := Label{Label: ReferenceAdapterProven, Holds: admitted && r.Provider.Name == ReferenceAdapter}
	switch {
	case r.Provider.Name != ReferenceAdapter:
		rap.Why = fmt.Sprintf("provider %q is not cordon's reference adapter (%s)", r.Provider.Name, ReferenceAdapter)
	case !admitted:
		rap.Why = "the reference adapter ran, but the probes admit no claim"
	default:
		rap.Why = fmt.Sprintf("the reference adapter %s %s passed every class at %s", r.Provider.Name, r.Provider.Version, r.Claim.Admitted)
	}
	env := Label{Label: EnvironmentEvidenced, Holds: admitted}
	if admitted {
		env.Why = fmt.Sprintf("probes ran live on this host (kernel %s, boot %s) from %s to %s; it evidences this environment in that window only",
			r.Host.Kernel, r.Host.BootID, r.Window.Started.Format("2006-01-02T15:04:05Z"), r.Window.Finished.Format("2006-01-02T15:04:05Z"))
	} else {
		env.Why = "the probes on this host admit no claim"
	}
	m := Maturity{Labels: []Label{ct, rap, env}}
	var holds []string
	for _, l := range m.Labels {
		if l.Holds {
			holds = append(holds, l.Label)
		}
	}
	m.Is = "none"
	if len(holds) > 0 {
		m.Is = strings.Join(holds, ", ")
	}
	return m
}
