package failure

import (
	"errors"
	"fmt"
)

// Kind is a failure kind from the closed taxonomy below. Names are stable:
// users, tests and evidence records rely on them.
type Kind string

// The closed set of failure kinds (openclaw RFC 0032 "closed failure
// taxonomy"). Every error cordon reports to a user carries exactly one.
const (
	// KindUsage: the request itself is invalid (flags, paths, limits).
	KindUsage Kind = "usage"
	// KindPrivilege: cordon lacks the privilege it needs (not root).
	KindPrivilege Kind = "privilege"
	// KindUnsupported: the host lacks a feature the boundary needs.
	KindUnsupported Kind = "unsupported"
	// KindPolicyRejected: the request is refused by policy, e.g. a refused
	// bind or a level no provider can offer. Never falls back.
	KindPolicyRejected Kind = "policy_rejected"
	// KindLeaseExhausted: no UID/GID range is free.
	KindLeaseExhausted Kind = "lease_exhausted"
	// KindProvision: creating host resources (cgroups, mounts, store) failed.
	KindProvision Kind = "provision_failed"
	// KindStart: the sandbox init failed while building the boundary.
	KindStart Kind = "start_failed"
	// KindEvidence: evidence could not be collected or does not support the
	// requested level; the program did not run.
	KindEvidence Kind = "evidence_insufficient"
	// KindExec: the program could not be executed.
	KindExec Kind = "exec_failed"
	// KindTimeout: the run exceeded its timeout.
	KindTimeout Kind = "timeout"
	// KindStore: the embedded store is unavailable or inconsistent.
	KindStore Kind = "store_unavailable"
	// KindCustody: a declared secret cannot be resolved by the custodian.
	KindCustody Kind = "custodian_unavailable"
	// KindInternal: a bug; reported rather than hidden.
	KindInternal Kind = "internal"
)

// Error is a failure with its kind. Msg is safe to show to the user.
type Error struct {
	Kind Kind
	Op   string
	Err  error
}

func (e *Error) Error() string {
	if e.Op == "" {
		return fmt.Sprintf("%s: %v", e.Kind, e.Err)
	}
	return fmt.Sprintf("%s: %s: %v", e.Kind, e.Op, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Fail builds an *Error.
func Fail(kind Kind, op string, err error) error {
	return &Error{Kind: kind, Op: op, Err: err}
}

// Failf builds an *Error from a format.
func Failf(kind Kind, op, format string, args ...any) error {
	return &Error{Kind: kind, Op: op, Err: fmt.Errorf(format, args...)}
}

// Carrier is an error that carries a kind without being an *Error: an
// error decoded from the host protocol, for instance. KindOf honours it, so
// a kind is kept across a hop.
type Carrier interface {
	error
	FailureKind() Kind
}

// KindOf returns the kind of err, or KindInternal when it carries none.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	var c Carrier
	if errors.As(err, &c) && Known(c.FailureKind()) {
		return c.FailureKind()
	}
	return KindInternal
}

// kinds is the closed set.
var kinds = map[Kind]bool{
	KindUsage: true, KindPrivilege: true, KindUnsupported: true, KindPolicyRejected: true,
	KindLeaseExhausted: true, KindProvision: true, KindStart: true, KindEvidence: true,
	KindExec: true, KindTimeout: true, KindStore: true, KindCustody: true, KindInternal: true,
}

// Known reports whether k is one of the kinds above.
func Known(k Kind) bool { return kinds[k] }

// Exit statuses of the command line (documented in the README). A
// program's own status passes through unchanged; these are cordon's.
const (
	ExitTimeout  = 124 // the run exceeded its timeout
	ExitRefused  = 125 // cordon refused or failed; the kind is printed on stderr
	ExitNoExec   = 126 // the program could not be executed
	ExitNotFound = 127 // the program was not found
)
