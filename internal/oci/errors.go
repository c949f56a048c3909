package oci

import (
	"fmt"

	"github.com/cordon-project/cordon/internal/failure"
)

// FieldError is a config.json field cordon refuses, with why. Its text
// names the field as the OCI runtime spec spells it, so an engine's error
// ("OCI runtime create failed: …") tells the user what to change.
type FieldError struct {
	Field  string
	Reason string
	// Unsafe: the field asks for something cordon cannot make safe
	// (policy_rejected); otherwise the bundle is malformed (usage).
	Unsafe bool
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("config.json: %s: %s", e.Field, e.Reason)
}

// Failure is e as a typed cordon failure.
func (e *FieldError) Failure() error {
	kind := failure.KindUsage
	if e.Unsafe {
		kind = failure.KindPolicyRejected
	}
	return failure.Fail(kind, "oci", e)
}

func refuse(field, format string, a ...any) error {
	return (&FieldError{Field: field, Reason: fmt.Sprintf(format, a...), Unsafe: true}).Failure()
}

func malformed(field, format string, a ...any) error {
	return (&FieldError{Field: field, Reason: fmt.Sprintf(format, a...)}).Failure()
}
