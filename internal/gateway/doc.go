// Package gateway is the agent's only way out. For each sandbox the
// privileged side opens the gateway's listeners on 127.0.0.1 inside the
// sandbox's own network namespace (ports below 1024, which the agent cannot
// bind), then hands their descriptors to a gateway process that runs as
// nobody with no capabilities, no_new_privs and a read-only Landlock
// domain: it is the only code that parses agent traffic. The listener that
// accepted a connection is the identity of the sandbox and its workload.
//
// Budgets and receipts live in the store, which only the privileged side
// opens: the gateway reaches it through a small ledger protocol on a
// socketpair. The privileged side parses those messages (from the
// gateway, never from the agent) and nothing else.
//
// It must never accept identity from the agent, never open a listener
// outside the sandbox's namespace, and never fall back to a direct path
// when the gateway, a broker, the custodian or the store is unavailable.
package gateway
