// Package setns runs a function inside another process's namespace (its
// network, IPC or UTS namespace) on one locked OS thread, and brings the
// thread back: how the trusted side opens listeners and sock_diag sockets
// in a sandbox's network namespace and reads its IPC and UTS facts. It
// also checks an engine's network namespace before a sandbox may join it
// (OpenEngineNet: not the host's, owned by the host's user namespace).
//
// Plane: root. It must never let a thread that could not return to its own
// namespace run anything else (it stays locked, so the Go runtime discards
// it), never run agent-supplied code in the namespace it enters, and never pass
// a network namespace owned by another user namespace as an engine's.
package setns
