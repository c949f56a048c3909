package policy

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalid is matched (errors.Is) by every *LoadError about a policy
// file's contents: a syntax error, a schema violation, a bad annotation, a
// duplicate id. A *LoadError for a file that cannot be read does not match.
var ErrInvalid = errors.New("invalid policy")

// ErrNoFiles is returned by Load without files; Default is the set to use
// when the configuration names none.
var ErrNoFiles = errors.New("no policy files")

// LoadError is one problem Load found. Load returns one *LoadError, or
// several joined with errors.Join in file and line order.
type LoadError struct {
	// File is the path as given to Load.
	File string
	// Line and Column are 1-based; 0 when the problem has no position
	// (an unreadable file). For a schema violation they are where the
	// policy starts: cedar-go's validator reports no finer position.
	Line, Column int
	// Policy is the id of the offending policy, when there is one.
	Policy string
	// Err is the problem.
	Err error
}

func (e *LoadError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d:%d", e.Line, e.Column)
	}
	b.WriteString(": ")
	if e.Policy != "" {
		fmt.Fprintf(&b, "policy %s: ", e.Policy)
	}
	b.WriteString(e.Err.Error())
	return b.String()
}

// Unwrap returns Err.
func (e *LoadError) Unwrap() error { return e.Err }

// invalid is a problem with a file's contents; it matches ErrInvalid.
type invalid string

func (e invalid) Error() string        { return string(e) }
func (e invalid) Is(target error) bool { return target == ErrInvalid }

func invalidf(format string, a ...any) error { return invalid(fmt.Sprintf(format, a...)) }
