// Package cli is cordon's command line: flag parsing, printing, exit
// statuses, and the host-protocol client of the daemon. A run's lifecycle
// (validation, provider selection, admission, gateway assembly) is
// package launch's; cli wires the native provider and the store into it.
//
// Plane: CLI (cordon run executes it as root; `cordon sandbox` as the
// caller). It must never pass a shell string to anything (argv only),
// never let the host environment reach the sandbox, never exit 0 for a
// program that did not run admitted at the requested level, and never
// build a sandbox or a gateway except through package launch.
package cli
