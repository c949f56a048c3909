// Package launch is the sandbox lifecycle, written once: validate the
// spec (a list of small named checks), select the provider (fail closed),
// provision, start, admit from evidence (one rule, Admit), assemble and
// start the gateway and its tool servers (gateway.go builds
// gateway.StartOptions from the configuration), run, then stop and
// deprovision. `cordon run` (package cli) and the daemon (package
// hostmgr) both go through it; neither builds a sandbox or a gateway
// another way.
//
// Plane: root. It owns the order of the lifecycle and the assembly of a
// sandbox's way out; it reaches providers only through the seam
// (sandbox.Provider and sandbox.Sandbox), never a concrete provider.
//
// It must never admit a level from anything but the evidence record the
// trusted side read, never start a program or a gateway in a sandbox that
// was not admitted, never run a gateway without the sandbox's own leased
// identity (no shared uid fallback), and never open a host path a daemon
// client named (daemon plans are detached: DetachedPlan).
package launch
