package proto

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/cordon-project/cordon/internal/failure"
)

// Version is the protocol this package speaks. Peers compare it byte for
// byte; there is no negotiation.
const Version = "cordon-host/v1"

// Limits of one frame. They are part of the protocol: a peer that exceeds
// them is refused, never truncated.
const (
	// MaxFrame is the largest frame (one JSON message) in bytes.
	MaxFrame = 256 << 10
	// MaxFiles is the most descriptors one request may carry.
	MaxFiles = 8
	// MaxDepth is the deepest nesting of objects and arrays in a frame;
	// the frame's own object is depth 1.
	MaxDepth = 32
	// MaxID is the largest request ID: the largest integer every JSON
	// implementation represents exactly (2^53-1).
	MaxID = 1<<53 - 1
)

// Request is one call from a client. Args is the operation's argument
// object, absent when it has none; the operation defines its members.
type Request struct {
	Version string          `json:"version"`
	ID      uint64          `json:"id"`
	Op      string          `json:"op"`
	Args    json.RawMessage `json:"args,omitempty"`
}

// Response is one answer to a request. An operation may answer a request
// several times (exec: "started", then "exited"); Final marks the last
// one. A response with an Error is always final and has no Result. A
// response with ID 0 answers no request: it is the daemon refusing the
// whole connection, which it then closes.
type Response struct {
	Version string          `json:"version"`
	ID      uint64          `json:"id"`
	Final   bool            `json:"final"`
	Error   *Error          `json:"error,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	// Files travel beside the frame (SCM_RIGHTS), not in it. Only an
	// operation that defines them sends any (exec with a terminal: the
	// pty master with its started answer), and a client takes them only
	// where it asked for them (Client.CallFiles); anywhere else they
	// are refused like a malformed frame. The receiver owns them.
	Files []*os.File `json:"-"`
}

// Error is a refusal or failure sent on the wire. Kind is one of the Kind
// constants; Message is a sentence for a person and carries no secrets.
// Failure, when set, is the failure kind (package failure) the operation
// failed with, so policy_rejected or evidence_insufficient reach the client
// as they left the lifecycle, not flattened into Kind.
type Error struct {
	Kind    string       `json:"kind"`
	Message string       `json:"message"`
	Failure failure.Kind `json:"failure,omitempty"`
}

// FailureKind makes *Error a failure.Carrier.
func (e *Error) FailureKind() failure.Kind { return e.Failure }

func (e *Error) Error() string { return e.Kind + ": " + e.Message }

// The closed set of error kinds. Names are stable: clients map them to
// exit codes and messages.
const (
	// KindVersion: the peer speaks another protocol version.
	KindVersion = "version"
	// KindUnauthorized: the caller may not perform this operation, or
	// does not own a descriptor it passed.
	KindUnauthorized = "unauthorized"
	// KindBadRequest: the frame or its arguments are malformed, or a
	// name breaks the naming rule.
	KindBadRequest = "bad_request"
	// KindNotFound: the named sandbox, volume or object does not exist.
	KindNotFound = "not_found"
	// KindExists: the named object already exists.
	KindExists = "exists"
	// KindConflict: the object is in a state that forbids the operation.
	KindConflict = "conflict"
	// KindDrain: the host is draining (evidence drifted) and accepts no
	// new work until it is re-admitted.
	KindDrain = "drain"
	// KindUnavailable: the daemon cannot serve now (too many connections,
	// stopping, a dependency down); retrying later may succeed.
	KindUnavailable = "unavailable"
	// KindInternal: a bug or an unexpected host failure; details are in
	// the daemon's log, not on the wire.
	KindInternal = "internal"
	// KindTooLarge: a frame or a result exceeds MaxFrame.
	KindTooLarge = "too_large"
)

// kinds is the closed set, for validation and documentation.
var kinds = map[string]bool{
	KindVersion:      true,
	KindUnauthorized: true,
	KindBadRequest:   true,
	KindNotFound:     true,
	KindExists:       true,
	KindConflict:     true,
	KindDrain:        true,
	KindUnavailable:  true,
	KindInternal:     true,
	KindTooLarge:     true,
}

// KnownKind reports whether k is one of the Kind constants.
func KnownKind(k string) bool { return kinds[k] }

// Errorf builds an *Error of kind with a formatted message.
func Errorf(kind, format string, args ...any) *Error {
	return &Error{Kind: kind, Message: fmt.Sprintf(format, args...)}
}

// KindOf returns the Kind of the *Error in err's chain, or "" when there
// is none (a transport failure, for instance).
func KindOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return ""
}

// Peer is the caller as the kernel saw it when it connected (SO_PEERCRED),
// never as the caller describes itself. PID identifies the connecting
// process at connect time only: it may have exited and the number been
// reused, so authorise by UID and GID, never by PID.
type Peer struct {
	UID, GID uint32
	PID      int32
	// Groups are the supplementary groups the connecting process had
	// (SO_PEERGROUPS); nil when the kernel gave none.
	Groups []uint32
}

// InGroup reports whether the caller had group gid when it connected: its
// GID or one of its supplementary groups.
func (p Peer) InGroup(gid uint32) bool {
	if gid == p.GID {
		return true
	}
	for _, g := range p.Groups {
		if g == gid {
			return true
		}
	}
	return false
}

// Handler serves one request. It runs with the connection's context,
// which ends when the peer hangs up, the listener closes or Serve's
// context ends. It answers through reply, any number of times, marking the
// last answer Final; reply fills in Version and ID and is safe to call from
// several goroutines until the handler returns, after which it fails. If
// the handler returns without a final answer, the server sends one: the
// returned error (an *Error as is, anything else as KindInternal with the
// detail logged), or an empty final result when it returned nil.
//
// files are the descriptors that came with the request, close-on-exec;
// they are the handler's to close, whatever it returns. A handler
// authorises the operation for peer itself and validates every name with
// ValidName.
type Handler func(ctx context.Context, peer Peer, req Request, files []*os.File, reply func(Response) error) error
