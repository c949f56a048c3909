package dial

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"

	"github.com/cordon-project/cordon/internal/broker/egress"
	"github.com/cordon-project/cordon/internal/failure"
)

// Operations a broker process may ask for.
const (
	OpDial    = "dial"    // connect to host:port; the answer carries the socket
	OpResolve = "resolve" // resolve and check host (egress: before policy and budget)
)

// Reason codes of a refusal that are the dialer's own; a Policy may use
// others (the egress broker's Reason… codes).
const (
	ReasonNotDeclared = "not-declared"  // the configuration declares no such destination for this broker
	ReasonBadRequest  = "bad-request"   // the request does not parse
	ReasonBusy        = "busy"          // kept for the wire; the server now waits for a slot instead
	ReasonDialFailed  = "dial-failed"   // no checked address answered within the timeout
	ReasonPeer        = "peer-mismatch" // the connected peer is not the checked address
	ReasonUnavailable = "unavailable"   // the channel to the privileged side is gone
)

// Bounds of the wire format.
const (
	maxRequestBytes  = 512
	maxResponseBytes = 2048
	maxHostLen       = 255
	maxAddrs         = 8
)

// Request is one ask from a broker process.
type Request struct {
	ID   uint64 `json:"id"`
	Op   string `json:"op"`
	Host string `json:"host"`
	Port int    `json:"port,omitempty"` // OpDial only
}

// Response answers one Request. A successful OpDial carries exactly one
// descriptor (SCM_RIGHTS) with the message; Reason is empty then.
type Response struct {
	ID     uint64       `json:"id"`
	Reason string       `json:"reason,omitempty"`
	Addrs  []netip.Addr `json:"addrs,omitempty"` // OpResolve
}

// ParseRequest decodes and validates one request message: known fields
// only, a known op, a printable host of at most 255 bytes, a port in
// 1..65535 for a dial and none for a resolve.
func ParseRequest(b []byte) (Request, error) {
	var r Request
	if len(b) > maxRequestBytes {
		return r, failure.Failf(failure.KindUsage, "dial request", "%d bytes, limit %d", len(b), maxRequestBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return Request{}, failure.Fail(failure.KindUsage, "dial request", err)
	}
	if dec.More() {
		return Request{}, failure.Failf(failure.KindUsage, "dial request", "trailing data")
	}
	if r.Host == "" || len(r.Host) > maxHostLen || strings.IndexFunc(r.Host, func(c rune) bool { return c <= 0x20 || c >= 0x7f }) >= 0 {
		return Request{}, failure.Failf(failure.KindUsage, "dial request", "host is not 1 to %d printable ASCII bytes", maxHostLen)
	}
	switch r.Op {
	case OpDial:
		if r.Port < 1 || r.Port > 65535 {
			return Request{}, failure.Failf(failure.KindUsage, "dial request", "port %d out of range", r.Port)
		}
	case OpResolve:
		if r.Port != 0 {
			return Request{}, failure.Failf(failure.KindUsage, "dial request", "resolve takes no port")
		}
	default:
		return Request{}, failure.Failf(failure.KindUsage, "dial request", "unknown op %q", r.Op)
	}
	return r, nil
}

// Refused is a destination the privileged side would not dial (or could
// not reach), with the reason code it logged.
type Refused struct {
	Broker string
	Target string
	Why    string
}

func (e *Refused) Error() string {
	return fmt.Sprintf("dial %s for the %s broker: refused: %s", e.Target, e.Broker, e.Why)
}

// Refused is the egress broker's Refusal: a lookup keeps its reason.
var _ egress.Refusal = (*Refused)(nil)

// Reason is the refusal's reason code.
func (e *Refused) Reason() string { return e.Why }

// FailureKind: a refused destination is a policy decision; the channel
// being gone is the gateway being unavailable.
func (e *Refused) FailureKind() failure.Kind {
	switch e.Why {
	case ReasonUnavailable:
		return failure.KindInternal
	case ReasonDialFailed, ReasonBusy:
		return failure.KindTimeout
	}
	return failure.KindPolicyRejected
}
