// Package telemetry makes one OpenTelemetry trace per sandbox session —
// a `cordon run`, or a daemon sandbox from create to removal — and
// exports it over OTLP/HTTP when the operator turns export on (the
// config's telemetry.traces section or the standard OTEL_* variables;
// off by default).
//
// Every span is made here, on the root side, from what the root side
// itself observed: the lifecycle phases internal/launch runs, and the
// reservations, settlements, tool calls, state operations and receipts
// the gateway's Authority serves. Causality between crossings that
// arrive on different connections is an attribution rule of this
// package (Session): a model turn's span parents the tool calls begun
// after it; the latest tool call of the turn (else the turn) parents an
// egress connection or a state operation. The trace and span ids are
// written into every receipt the root side records (crossing.Receipt
// TraceID, SpanID) whether or not anything is exported.
//
// Plane: root. It must never take a trace or span id, a parent or a span
// name from a broker process or the agent (brokers are unprivileged and
// may be compromised: what they send is at most an attribute value,
// length-capped); never put a custodied value (keys, tokens), a request
// or response body, or an agent-chosen string in a span name; never let
// export block or fail a crossing (a bounded queue that drops, a short
// flush at session end); and never hand its settings or the OTEL_*
// variables to a sandbox.
package telemetry
