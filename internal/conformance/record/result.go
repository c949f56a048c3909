package record

import "time"

// Class is one of the contract's probe classes (section 2, item 5).
type Class string

// The classes, in the order reports show them.
const (
	Allowed     Class = "allowed"
	Bypass      Class = "bypass"
	StaleState  Class = "stale_state"
	CrossTenant Class = "cross_tenant"
	Exhaustion  Class = "exhaustion"
	Failure     Class = "failure"
	Reset       Class = "reset_recovery"
)

// Classes lists every class; a run passes only when each has a passing probe.
func Classes() []Class {
	return []Class{Allowed, Bypass, StaleState, CrossTenant, Exhaustion, Failure, Reset}
}

// Verdict is the trusted side's judgement of one probe.
type Verdict string

const (
	// Pass: every fact the trusted side observed is as the claim needs,
	// and the probe's positive control was observed to work.
	Pass Verdict = "pass"
	// Fail: an observed fact contradicts the claim, or the probe broke.
	Fail Verdict = "fail"
	// NotEvidenced: the provider or host cannot support the probe, or it
	// could not be run; never counted as a pass, and it lowers the claim.
	NotEvidenced Verdict = "not_evidenced"
)

// Fact is one thing the trusted side observed from outside the sandbox
// (a listener's accept count, a host file, /proc/PID, the store). What
// the program inside reported is never a fact (it is the Hint).
type Fact struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Want   string `json:"want,omitempty"`
	Got    string `json:"got"`
	Source string `json:"source"` // where the trusted side read it
	// Control marks a positive control: the same attempt by a permitted
	// route (from the host, or with the layer under test absent) that
	// must work, showing that the boundary is what denies the attempt.
	Control bool `json:"control,omitempty"`
}

// ProbeResult is one probe's entry in the conformance record.
type ProbeResult struct {
	ID      string  `json:"id"`
	Class   Class   `json:"class"`
	Clause  string  `json:"clause"` // the contract clause it evidences
	Title   string  `json:"title"`
	Verdict Verdict `json:"verdict"`
	// Reason says why, in one line, for fail and not_evidenced.
	Reason string `json:"reason,omitempty"`
	Facts  []Fact `json:"facts"`
	// Hint is what the program inside printed: shown, never judged.
	Hint     string        `json:"hint,omitempty"`
	Started  time.Time     `json:"started"`
	Duration time.Duration `json:"duration_ns"`
}
