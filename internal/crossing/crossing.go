package crossing

import (
	"context"
	"errors"
	"time"
)

// Identity is who is crossing, derived from the listener that accepted the
// connection — never from anything the agent sent.
type Identity struct {
	Workload  string `json:"workload"`
	Tenant    string `json:"tenant"`
	Purpose   string `json:"purpose"`
	SandboxID string `json:"sandbox_id"`
}

// Amount is a quantity of each budgeted resource. Zero fields are nothing.
type Amount struct {
	Requests     int64 `json:"requests,omitempty"`
	InputTokens  int64 `json:"input_tokens,omitempty"`
	OutputTokens int64 `json:"output_tokens,omitempty"`
	Bytes        int64 `json:"bytes,omitempty"`        // model request+response bytes
	EgressBytes  int64 `json:"egress_bytes,omitempty"` // bytes through the egress proxy
	Connections  int64 `json:"connections,omitempty"`  // egress connections
	// IngressConnections and IngressBytes are the connections admitted
	// through the declared inbound routes and the bytes relayed on them.
	IngressConnections int64 `json:"ingress_connections,omitempty"`
	IngressBytes       int64 `json:"ingress_bytes,omitempty"`
}

// Add returns a+b.
func (a Amount) Add(b Amount) Amount {
	return Amount{a.Requests + b.Requests, a.InputTokens + b.InputTokens, a.OutputTokens + b.OutputTokens,
		a.Bytes + b.Bytes, a.EgressBytes + b.EgressBytes, a.Connections + b.Connections,
		a.IngressConnections + b.IngressConnections, a.IngressBytes + b.IngressBytes}
}

// Reservation is budget held for one crossing until it is settled.
type Reservation struct {
	ID       int64     `json:"id"`
	Identity Identity  `json:"identity"`
	Broker   string    `json:"broker"`
	Held     Amount    `json:"held"`
	At       time.Time `json:"at"`
	// Policy is the decision the privileged side made for the crossing
	// the reservation is for (also set when policy denied it).
	Policy *PolicyDecision `json:"policy,omitempty"`
	// Approval is the approval of a crossing policy holds for one: the
	// one it used (State "consumed", or "approved" for a sandbox-scoped
	// approval kept for the sandbox's life), or, with ErrApprovalPending
	// or ErrApprovalDenied, the one it waits on or that refused it.
	Approval *ApprovalRef `json:"approval,omitempty"`
}

// ApprovalRef names an approval the privileged side used or waits on.
type ApprovalRef struct {
	ID      string    `json:"id"`
	State   string    `json:"state"`
	Expires time.Time `json:"expires"`
}

// Ask is what a crossing asks policy: the action and the resource. A
// broker attaches it to the context of the Reserve that opens the
// crossing (WithAsk); the privileged side evaluates policy on it with
// the sandbox's own identity as the principal.
type Ask struct {
	Action string `json:"action"` // "model.invoke", "egress.connect", "tool.call", …
	// Resource is the resource's entity type: "Model", "Host", "Tool",
	// "State".
	Resource string `json:"resource"`
	Target   string `json:"target"`           // its id: model id, host, "server/tool", scope
	Server   string `json:"server,omitempty"` // Tool: the MCP server
	Port     int    `json:"port,omitempty"`   // Host: the port
	// ArgumentDigest is "sha256:<hex>" of a tool call's canonical
	// arguments.
	ArgumentDigest string `json:"argument_digest,omitempty"`
	// RequestDigest is "sha256:<hex>" of the exact request the crossing
	// carries (a model request's body as the agent sent it): an approval
	// is bound to it.
	RequestDigest string `json:"request_digest,omitempty"`
	// RequestBytes is the size of that request, shown to an approver.
	RequestBytes int64 `json:"request_bytes,omitempty"`
	// Operation is the broker's name for what the request does (a model
	// request's API action, "anthropic.messages"), shown to an approver.
	Operation string `json:"operation,omitempty"`
}

type askKey struct{}

// WithAsk returns ctx carrying the policy question for the next Reserve.
func WithAsk(ctx context.Context, a Ask) context.Context {
	return context.WithValue(ctx, askKey{}, a)
}

// AskFrom returns the policy question bound to ctx.
func AskFrom(ctx context.Context) (Ask, bool) {
	a, ok := ctx.Value(askKey{}).(Ask)
	return a, ok
}

// BudgetState is the workload's budget after a decision: used (settled +
// held) against the limits. A zero limit means unlimited.
type BudgetState struct {
	Used   Amount `json:"used"`
	Limits Amount `json:"limits"`
	// Streams is the number of concurrent model streams held now.
	Streams int64 `json:"streams"`
}

// Receipt is the record of one crossing.
type Receipt struct {
	ID            int64     `json:"id,omitempty"`
	Time          time.Time `json:"time"`
	Identity      Identity  `json:"identity"`
	Broker        string    `json:"broker"` // "model", "egress"
	Action        string    `json:"action"` // e.g. "anthropic.messages", "connect"
	Target        string    `json:"target"` // model id, host:port — never a secret
	RequestDigest string    `json:"request_digest"`
	Decision      string    `json:"decision"` // "allow" or "deny"
	Reason        string    `json:"reason"`
	// Rule names what denied a crossing: the Cedar forbid ids or "no
	// permit matched", the missing configuration line, the budget and its
	// window, or the approval's state (internal/denial). Set by the
	// privileged side when it records a denial; empty on an allow.
	Rule string `json:"rule,omitempty"`
	// ConfigDigest is the digest of the configuration the sandbox ran
	// with ("sha256:<hex>" of the file), set by the privileged side: what
	// cordon policy explain --receipt compares the current one with.
	ConfigDigest string      `json:"config_digest,omitempty"`
	Budget       BudgetState `json:"budget"`
	UpstreamCode int         `json:"upstream_status,omitempty"`
	BytesIn      int64       `json:"bytes_in"`  // from the agent
	BytesOut     int64       `json:"bytes_out"` // to the agent
	// Client is the host-side peer of an ingress connection
	// ("127.0.0.1:53122"), as the kernel gave it to the route's listener.
	Client    string        `json:"client,omitempty"`
	Usage     Amount        `json:"usage"`
	Untrusted []string      `json:"untrusted,omitempty"` // e.g. tool_use blocks passed through as data
	Duration  time.Duration `json:"duration_ns"`
	FirstByte time.Duration `json:"first_byte_ns,omitempty"`
	// Policy is the policy decision that let the crossing through (or
	// refused it); set by the privileged side.
	Policy *PolicyDecision `json:"policy,omitempty"`
	// Approval is the id of the approval this crossing consumed.
	Approval string `json:"approval,omitempty"`
	// CallKey is the tool call's replay key (idempotency key, or MCP
	// session and JSON-RPC id).
	CallKey string `json:"call_key,omitempty"`
	// ResultDigest is "sha256:<hex>" of the result returned to the agent
	// (readback).
	ResultDigest string `json:"result_digest,omitempty"`
	// TraceID and SpanID name the OpenTelemetry trace of the sandbox's
	// session and the span of this crossing in it (32 and 16 lowercase
	// hex digits; internal/telemetry). Only the root side sets them,
	// before the store records the receipt, from what it observed; any a
	// broker sends are overwritten. Set whether or not traces are
	// exported, so a receipt can be matched to a trace later.
	TraceID string `json:"trace_id,omitempty"`
	SpanID  string `json:"span_id,omitempty"`
}

// PolicyDecision is what policy said about one crossing.
type PolicyDecision struct {
	// Digest is "sha256:<hex>" of the policy set that decided.
	Digest string `json:"digest"`
	// Determining are the ids of the policies that decided: the permits
	// that allowed, or the forbids that denied.
	Determining []string `json:"determining,omitempty"`
	// Errors are evaluation errors (each is a deny).
	Errors []string `json:"errors,omitempty"`
	// ApprovalRequired is set when a determining permit requires approval.
	ApprovalRequired bool `json:"approval_required,omitempty"`
	// ApprovalScope is "sandbox" when every determining permit that
	// requires approval widens it to the sandbox's life
	// (@approval_scope("sandbox"), egress only); empty otherwise: one
	// approval per exact crossing.
	ApprovalScope string `json:"approval_scope,omitempty"`
}

// Decisions.
const (
	Allow = "allow"
	Deny  = "deny"
)

// ErrBudgetExceeded is returned by Reserve when the reservation would
// overspend a limit. Wrap it with which limit.
var ErrBudgetExceeded = errors.New("budget exceeded")

// ErrPolicyDenied is returned by Reserve when policy refuses the crossing;
// the Reservation returned with it carries the decision.
var ErrPolicyDenied = errors.New("denied by policy")

// ErrApprovalPending is returned by Reserve when policy requires an
// operator's approval of this exact crossing and none is given yet; the
// Reservation's Approval names the pending approval. The crossing is
// refused: the agent retries it once approved.
var ErrApprovalPending = errors.New("approval pending")

// ErrApprovalDenied is returned by Reserve when an operator denied this
// exact crossing (the denial stands until the denied approval expires),
// or the sandbox has too many approvals waiting.
var ErrApprovalDenied = errors.New("approval denied")

// ErrUnavailable means the authority (store) cannot be reached: the crossing
// must be refused, never let through.
var ErrUnavailable = errors.New("authority unavailable")

// Authority reserves budget before a crossing, settles it after, and records
// receipts. Implementations are safe for concurrent use. Reserve must be
// atomic across every process sharing the workload's budget: concurrent
// reservations can never together exceed a limit. streams > 0 also holds
// that many concurrent-stream slots until Settle.
type Authority interface {
	Reserve(ctx context.Context, id Identity, broker string, want Amount, streams int64) (Reservation, BudgetState, error)
	Settle(ctx context.Context, r Reservation, used Amount) (BudgetState, error)
	Record(ctx context.Context, rc Receipt) error
}

// SettleRecorder is an Authority that can settle a reservation and record the
// crossing's receipt in one step (one round trip, one commit). Brokers use
// it when the authority offers it; the receipt's Budget is filled from the
// settlement.
type SettleRecorder interface {
	SettleRecord(ctx context.Context, r Reservation, used Amount, rc Receipt) (BudgetState, error)
}

type identityKey struct{}

// WithIdentity returns ctx carrying id; the gateway calls it once per
// accepted connection.
func WithIdentity(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// IdentityFrom returns the identity the gateway bound to ctx; ok is false
// when there is none, and a broker must then refuse.
func IdentityFrom(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(Identity)
	return id, ok && id.Workload != ""
}

// Secrets resolves custodied secrets by name for a broker. Values never
// leave the broker: not into responses, logs, receipts or errors.
type Secrets interface {
	Secret(name string) ([]byte, error)
	// Values returns every custodied value, for redaction.
	Values() [][]byte
}
