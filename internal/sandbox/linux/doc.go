// Package linux is the native Linux provider: it builds a sandbox from user,
// PID, mount, network, IPC, UTS and cgroup namespaces on a leased UID/GID
// range, cgroup limits (v1 and v2, per controller), an immutable base with
// bounded scratch, idmapped workspace binds, Landlock and seccomp, and
// admits it at a level only from evidence it reads off the live sandbox.
//
// Plane: root. It runs on the trusted side, as root, for `cordon run` and
// the daemon. It writes the write-ahead record and the lease through the
// store before any host resource exists. It must never parse
// anything the sandbox produces beyond the init's small control messages
// (bounded, JSON, treated as hints) and the one descriptor the "started"
// message may carry, or with the console at start the "console" message
// before "ready" (a pty master, checked as one: pty_linux.go,
// execs_linux.go; any
// other descriptor is closed and the sandbox ended) — the same for a
// daemon-mode or Spec.Execs exec's "started" on the exec channel (exec_linux.go: any
// other descriptor is closed and the exec refused) —, never follow a symlink in a
// user-supplied path, and never start the program before admission.
package linux
