// Package gateway is the root side of the agent's only way out. For each
// sandbox it opens the gateway's listeners on 127.0.0.1 inside the
// sandbox's own network namespace (ports below 1024, which the agent
// cannot bind), hands their descriptors to the gateway process
// (internal/gateway/proc) that runs as a per-sandbox uid with no
// capabilities, no_new_privs and a read-only Landlock domain — the only
// code that parses agent traffic — and answers that process's requests
// as the sandbox's Authority. The listener that accepted a connection is
// the identity of the sandbox and its workload.
//
// Budgets, approvals, policy and receipts live here, with the store,
// which only the root side opens. The gateway process reaches them over
// authority channels, one per broker (internal/gateway/wire: one
// envelope, one error table): Authority.Serve binds each channel to its
// broker and refuses any message for another. What is a broker's own —
// the checks and store operations of its crossings — is its trusted half
// in internal/broker/<name>/authority; this package keeps what the
// sandbox's brokers share (the receipt budget, the crossing rate, the
// reservations a lost gateway leaves open, approvals) and the registry
// of the halves.
//
// The one way in is a declared inbound route (ingress_linux.go): its
// listener is opened on the host address the configuration declares
// (loopback unless unsafe_listen), served by the unprivileged ingress
// broker process, and each admitted connection reaches only the declared
// port on the sandbox's 127.0.0.1, through a socket created inside the
// sandbox's namespace and connected by the checked dialer.
//
// Plane: root. It must never accept identity from the agent or from the
// gateway process, never open a listener outside the sandbox's
// namespace other than a declared route's, never parse agent bytes itself, and never fall back to a
// direct path when the gateway, a broker, the custodian or the store is
// unavailable.
package gateway
