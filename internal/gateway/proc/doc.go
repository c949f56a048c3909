// Package proc is the gateway process: the unprivileged side that parses
// agent bytes. The root side (internal/gateway) re-executes the binary as
// Argv0 with a per-sandbox uid and no capabilities; ChildMain sets
// no_new_privs, becomes non-dumpable, confines itself to a read-only
// Landlock domain, reads its Config from a pipe, and serves the listeners
// it was handed with the brokers' agent-facing halves
// (internal/broker/<name>). Each broker reaches the root side only over
// its own authority channel (internal/gateway/wire).
//
// Plane: unprivileged. It must never import the store or policy
// (TestUnprivilegedImportsNoStoreOrPolicy checks it), never take identity
// from the agent, never decide a crossing itself — the root side decides
// every one — and never write to any filesystem.
package proc
