// Package state is the state broker: the agent's durable state (its
// "Mind"), served over plain HTTP on the gateway's state listener
// (127.0.0.1:83 inside every sandbox, /v1/state). The agent gets, puts,
// deletes, lists and exports entries of bytes under short path-like keys,
// and may reset its state; versions (ETags) detect lost updates.
//
// The scope of every entry — tenant, workload and purpose — is the
// sandbox's identity, bound by the listener; no part of a request names
// it. This package only parses and answers HTTP: the privileged side
// (Authority) owns the store, asks policy (state.read, state.write), checks
// the quota and records a receipt for every operation. It re-checks what
// this package checks (key syntax, value size), so a gateway compromised
// through a parser bug still reaches no other scope.
//
// Plane: unprivileged — it runs in the gateway process
// (internal/gateway/proc) and parses agent bytes; its trusted half, on
// the root side, is ./authority, reached over the state broker's own
// authority channel with the Request/Response messages (Remote).
//
// It must never take a scope from the request, never answer a read of
// another scope's entry differently from a read of an absent one, and
// never answer from anything but the privileged side's reply: when the
// authority is unavailable the operation fails.
package state
