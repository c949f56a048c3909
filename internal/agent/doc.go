// Package agent holds the presets behind `cordon run --agent NAME`: for
// each coding agent a user installs on the host as usual (npm install -g,
// or a directory named with --agent-path), what the sandbox needs to run
// it unmodified — the agent's package and runtime bound read-only, its
// per-user state in a host directory the user chooses (or a managed
// default), its environment and flags, and a built-in gateway
// configuration that sends its model traffic through the model broker
// with the key custodied.
//
// Each agent is one file (claude.go, codex.go, …) whose init registers a
// *Preset; docs/adding-an-agent.md says how to add one.
//
// Plane: CLI and root. It resolves host paths the caller named (as the
// caller, string and stat work) and seeds files into the agent's home on
// the trusted side.
//
// It must never write through a symlink or replace anything in the
// agent's home (the agent controlled that directory on its last run: a
// seed file is created exclusively, only when absent, in a directory
// opened without following symlinks), never bind a host home directory
// or anything but the agent's package, its runtime and its own home, and
// never put a real credential in the sandbox (the agent gets the
// gateway's placeholder keys; the real key stays with the custodian).
package agent
