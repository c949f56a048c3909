// Package tool is the tool broker: an MCP server to the agent (streamable
// HTTP on the gateway's tools listener) and an MCP client to the upstream
// tool servers the trusted side started, each in its own sandbox.
//
// Every tools/call crosses the front door (frame size, strict JSON-RPC, no
// batches), then: the tool must be one the workload may call (tools it
// may not call are absent from tools/list); its arguments must satisfy
// the upstream tool's input schema with no unknown fields and within the
// size bound; the privileged side (Authority.Begin) checks replay, asks
// policy, reserves budget and consumes an approval when policy requires
// one; the upstream is called with its credential; the result is
// size-bounded, custodied values are redacted, it is marked untrusted;
// and the receipt, with the result's digest, is durable (Authority.End)
// before the agent sees the result.
//
// Replay: a retransmitted call — the same MCP session and JSON-RPC id, or
// the same idempotency key in _meta["cordon.dev/idempotency-key"] — gets
// the original result and receipt; it does not run again. A call whose
// outcome is unknown (timeout after send, connection lost) is quarantined
// by the privileged side until an operator reconciles it.
//
// Plane: unprivileged — it runs in the gateway process
// (internal/gateway/proc) and parses agent bytes; its trusted half, on
// the root side, is ./authority, reached over the tool broker's own
// authority channel (Remote, with the messages in remote.go); its
// configuration is Config.
//
// It must never call a tool the root side did not begin, never show the
// agent a result before its receipt is durable, never send a credential
// anywhere but its declared server, and never let an upstream's text
// through unredacted or unmarked as untrusted.
package tool
