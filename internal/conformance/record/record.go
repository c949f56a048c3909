package record

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cordon-project/cordon/internal/attest"
	"github.com/cordon-project/cordon/internal/evidence"
	"github.com/cordon-project/cordon/internal/sandbox"
)

// Schema versions the record; PredicateType is its in-toto predicate type.
const (
	Schema        = "cordon.conformance/v1"
	PredicateType = "https://cordon.dev/conformance/v1"
)

// None is the digest of a binding that was not given.
const None = "none"

// Subject names of the statement, one per binding given.
const (
	SubjectBinary = "cordon"
	SubjectConfig = "config"
	SubjectPolicy = "policy-set"
	SubjectRootfs = "rootfs"
)

// Record is the conformance record, the predicate of the statement.
type Record struct {
	Schema string `json:"schema"`
	// RunID names this run (random); verify --log finds the logged copy
	// of a changed record by it.
	RunID    string   `json:"run_id"`
	Cordon   Build    `json:"cordon"`
	Provider Provider `json:"provider"`
	Host     Host     `json:"host"`
	Bindings Bindings `json:"bindings"`
	Claim    Claim    `json:"claim"`
	// TCB, Assumptions and NonClaims publish what the claim rests on and
	// what it does not say (contract section 2 item 6, section 11).
	TCB         []string      `json:"tcb"`
	Assumptions []string      `json:"assumptions"`
	NonClaims   []string      `json:"non_claims"`
	Probes      []ProbeResult `json:"probes"`
	Window      Window        `json:"window"`
	Maturity    Maturity      `json:"maturity"`
}

// Build identifies the cordon binary under test (the one running the suite).
type Build struct {
	Version      string `json:"version"`
	Module       string `json:"module"`
	Commit       string `json:"commit"`   // vcs.revision, or "unknown"
	Modified     bool   `json:"modified"` // vcs.modified: built from a changed tree
	GoVersion    string `json:"go_version"`
	Platform     string `json:"platform"`
	BinarySHA256 string `json:"binary_sha256"` // hex
}

// Provider is the provider the suite judged and what it said it can do
// (a claim about the provider, never evidence).
type Provider struct {
	Name       string             `json:"name"`
	Version    string             `json:"version"`
	Capability sandbox.Capability `json:"capability"`
}

// Host is the machine the probes ran on.
type Host struct {
	evidence.Host
	Arch string `json:"arch,omitempty"`
	// CgroupMode is the host's cgroup layout ("v1 hybrid", "v2").
	CgroupMode string `json:"cgroup_mode,omitempty"`
	// Facts are other host facts found (provider probe features, sysctls).
	Facts map[string]string `json:"facts,omitempty"`
}

// Bindings are the digests of what was tested beside the binary, each
// "sha256:<hex>", or None when not given.
type Bindings struct {
	Config    string `json:"config_digest"`
	PolicySet string `json:"policy_set_digest"`
	Rootfs    string `json:"rootfs_digest"`
	// Paths are where the runner read them (informative, not bound).
	ConfigPath string `json:"config_path,omitempty"`
	PolicyPath string `json:"policy_path,omitempty"`
	RootfsPath string `json:"rootfs_path,omitempty"`
}

// Window is when the probes ran.
type Window struct {
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
}

// Inputs are what the runner knows before the first probe.
type Inputs struct {
	Build    Build
	Provider Provider
	Host     Host
	// Config, Policy and Rootfs are the paths given (each optional):
	// a config file, a policy directory or file, a rootfs directory.
	Config, Policy, Rootfs string
	Level                  string // level requested (DEDICATED_CONTAINER)
	Profile                string // daemon profile (SAFE_GUIDED)
	Now                    func() time.Time
}

// New starts a record: it digests the bindings given (an unreadable one
// is an error: a record never binds what it could not read) and opens the
// window. Finish completes it.
func New(in Inputs) (*Record, error) {
	now := time.Now
	if in.Now != nil {
		now = in.Now
	}
	var id [12]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, fmt.Errorf("conformance record: %w", err)
	}
	b, err := Bind(in.Config, in.Policy, in.Rootfs)
	if err != nil {
		return nil, err
	}
	r := &Record{
		Schema:      Schema,
		RunID:       hex.EncodeToString(id[:]),
		Cordon:      in.Build,
		Provider:    in.Provider,
		Host:        in.Host,
		Bindings:    b,
		Claim:       Claim{Requested: in.Level, Profile: in.Profile},
		TCB:         append(slices.Clone(evidence.TCB), SuiteTCB...),
		Assumptions: append(slices.Clone(evidence.Assumptions), SuiteAssumptions...),
		NonClaims:   append(slices.Clone(evidence.NonClaims), SuiteNonClaims...),
		Window:      Window{Started: now().UTC()},
	}
	return r, nil
}

// Finish records the results, closes the window and judges the claim
// and the maturity labels from them.
func (r *Record) Finish(results []ProbeResult, now time.Time) {
	r.Probes = slices.Clone(results)
	if r.Probes == nil {
		r.Probes = []ProbeResult{}
	}
	r.Window.Finished = now.UTC()
	r.Claim = Judge(r.Claim.Requested, r.Claim.Profile, r.Provider.Capability, r.Probes)
	r.Maturity = judgeMaturity(r)
	// Finish may run again (a record re-judged): drop the previous claim's.
	r.NonClaims = slices.DeleteFunc(r.NonClaims, func(s string) bool { return strings.HasPrefix(s, noClaimPrefix) })
	r.NonClaims = append(r.NonClaims, r.Claim.NonClaims()...)
}

// Statement is the in-toto statement of the record: its subjects are the
// binary and each binding given.
func (r *Record) Statement() (attest.Statement, error) {
	body, err := json.Marshal(r)
	if err != nil {
		return attest.Statement{}, err
	}
	subs := []attest.Subject{}
	add := func(name, digest string) error {
		if digest == "" || digest == None {
			return nil
		}
		d, err := hexOf(digest)
		if err != nil {
			return fmt.Errorf("conformance record: subject %s: %w", name, err)
		}
		subs = append(subs, attest.Subject{Name: name, Digest: map[string]string{"sha256": d}})
		return nil
	}
	if err := add(SubjectBinary, "sha256:"+r.Cordon.BinarySHA256); err != nil {
		return attest.Statement{}, err
	}
	for _, s := range [][2]string{{SubjectConfig, r.Bindings.Config}, {SubjectPolicy, r.Bindings.PolicySet}, {SubjectRootfs, r.Bindings.Rootfs}} {
		if err := add(s[0], s[1]); err != nil {
			return attest.Statement{}, err
		}
	}
	return attest.Statement{Type: attest.StatementType, Subject: subs, PredicateType: PredicateType, Predicate: body}, nil
}

// Sign signs the record with the evidence log's key.
func Sign(r *Record, k attest.Key) (attest.Envelope, error) {
	st, err := r.Statement()
	if err != nil {
		return attest.Envelope{}, err
	}
	return attest.Sign(st, k)
}

// FromStatement decodes a verified statement's record strictly (no
// unknown fields) and checks that the statement's subjects are exactly
// the record's bindings.
func FromStatement(st attest.Statement) (*Record, error) {
	if st.PredicateType != PredicateType {
		return nil, &attest.FieldError{Field: "statement.predicateType", Problem: fmt.Sprintf("%q, want %q", st.PredicateType, PredicateType), Err: attest.ErrMalformed}
	}
	var r Record
	if err := strictDecode(st.Predicate, &r); err != nil {
		return nil, &attest.FieldError{Field: "statement.predicate", Problem: err.Error(), Err: attest.ErrMalformed}
	}
	if r.Schema != Schema {
		return nil, &attest.FieldError{Field: "statement.predicate.schema", Problem: fmt.Sprintf("%q, want %q", r.Schema, Schema), Err: attest.ErrMalformed}
	}
	want, err := r.Statement()
	if err != nil {
		return nil, &attest.FieldError{Field: "statement.predicate", Problem: err.Error(), Err: attest.ErrMalformed}
	}
	if !slices.EqualFunc(want.Subject, st.Subject, func(a, b attest.Subject) bool {
		return a.Name == b.Name && a.Digest["sha256"] == b.Digest["sha256"]
	}) {
		return nil, &attest.FieldError{Field: "statement.subject", Problem: "the subjects are not the record's binary and bindings", Err: attest.ErrMalformed}
	}
	return &r, nil
}
