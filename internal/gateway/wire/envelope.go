package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/cordon-project/cordon/internal/broker/state"
	"github.com/cordon-project/cordon/internal/broker/tool"
	"github.com/cordon-project/cordon/internal/crossing"
)

// MaxMessage bounds one message either way (one SOCK_SEQPACKET datagram).
const MaxMessage = 256 << 10

// OpReady is the one op that names no broker operation: the gateway
// process reports that it serves its listeners.
const OpReady = "ready"

// Request is one message from a gateway process to the root side. Broker
// must be the broker the connection is bound to; the root side checks it.
type Request struct {
	ID     uint64          `json:"id"`
	Broker string          `json:"broker"`
	Op     string          `json:"op"`
	Body   json.RawMessage `json:"body,omitempty"`
}

// Response answers the Request with the same ID. A refusal carries an
// Error; Body may be set either way (a refusal's details, such as the
// policy decision that refused).
type Response struct {
	ID    uint64          `json:"id"`
	Error *Error          `json:"error,omitempty"`
	Body  json.RawMessage `json:"body,omitempty"`
}

// Error is a refusal: Kind is one of the closed set in kinds, Message is
// for people.
type Error struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

// KindUnavailable is the kind of every error that is not one of the typed
// refusals: the crossing is refused as crossing.ErrUnavailable.
const KindUnavailable = "unavailable"

// kinds is the one error table: each typed refusal and its wire kind, in
// the order they are matched (an error that wraps two is sent as the
// first). Both directions use it, so a kind cannot be sent that the
// other side does not map back.
var kinds = []struct {
	kind string
	err  error
}{
	{"state_not_found", state.ErrNotFound},
	{"state_precondition", state.ErrPrecondition},
	{"state_quota", state.ErrQuota},
	{"state_too_large", state.ErrTooLarge},
	{"state_invalid", state.ErrInvalid},
	{"budget", crossing.ErrBudgetExceeded},
	{"policy", crossing.ErrPolicyDenied},
	{"key_reused", tool.ErrKeyReused},
	{"in_progress", tool.ErrInProgress},
	{"quarantined", tool.ErrQuarantined},
	{"approval_denied", tool.ErrDenied},
	{"approval_pending", crossing.ErrApprovalPending},
	{"crossing_approval_denied", crossing.ErrApprovalDenied},
}

// Kind is err's wire kind: the first typed refusal it wraps, else
// KindUnavailable.
func Kind(err error) string {
	for _, k := range kinds {
		if errors.Is(err, k.err) {
			return k.kind
		}
	}
	return KindUnavailable
}

// ErrorOf is the Error that carries err; nil for nil.
func ErrorOf(err error) *Error {
	if err == nil {
		return nil
	}
	return &Error{Kind: Kind(err), Message: err.Error()}
}

// Err maps e back to its typed error (a kind it does not know is
// crossing.ErrUnavailable: fail closed); nil for nil.
func (e *Error) Err() error {
	if e == nil {
		return nil
	}
	for _, k := range kinds {
		if e.Kind == k.kind {
			return fmt.Errorf("%w: %s", k.err, e.Message)
		}
	}
	return fmt.Errorf("%w: %s", crossing.ErrUnavailable, e.Message)
}

// AppendRequest appends the encoding of r to dst. It equals json.Marshal
// of r, without re-validating Body, which must be valid JSON (it is the
// output of json.Marshal): the body is the bulk of a message, and the
// encoder would scan it again.
func AppendRequest(dst []byte, r Request) []byte {
	dst = append(dst, `{"id":`...)
	dst = strconv.AppendUint(dst, r.ID, 10)
	dst = append(dst, `,"broker":`...)
	dst = appendString(dst, r.Broker)
	dst = append(dst, `,"op":`...)
	dst = appendString(dst, r.Op)
	if len(r.Body) > 0 {
		dst = append(append(dst, `,"body":`...), r.Body...)
	}
	return append(dst, '}')
}

// AppendResponse appends the encoding of r to dst, like AppendRequest.
func AppendResponse(dst []byte, r Response) []byte {
	dst = append(dst, `{"id":`...)
	dst = strconv.AppendUint(dst, r.ID, 10)
	if r.Error != nil {
		dst = append(dst, `,"error":{"kind":`...)
		dst = appendString(dst, r.Error.Kind)
		dst = append(dst, `,"message":`...)
		dst = appendString(dst, r.Error.Message)
		dst = append(dst, '}')
	}
	if len(r.Body) > 0 {
		dst = append(append(dst, `,"body":`...), r.Body...)
	}
	return append(dst, '}')
}

// appendString appends s as a JSON string, as encoding/json writes it.
func appendString(dst []byte, s string) []byte {
	b, _ := json.Marshal(s)
	return append(dst, b...)
}
