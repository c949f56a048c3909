// Command cordon runs untrusted programs and AI agents inside an evidenced
// Linux boundary. See README.md, and docs/architecture.md for how its
// packages divide the work between the planes.
//
// Plane: CLI, root, unprivileged and sandbox: it is the one binary, and
// argv[0] picks its personality — the sandbox init (package sbinit, which
// dispatches from its init function before main runs), the gateway
// process (package gateway), or the command line (package cli), which
// runs as root for `cordon run` and the daemon, and as the caller for the
// daemon's clients.
//
// main only wires: it marks every inherited descriptor close-on-exec and
// dispatches. It must never do work before that dispatch that a
// personality would inherit (no descriptor opened, no goroutine that
// holds one), and must never let an inherited descriptor beyond stdio
// reach a sandbox.
package main
