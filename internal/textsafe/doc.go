// Package textsafe is the one place that makes untrusted text safe to show a
// person: anything that came from the agent, a model or tool upstream, or a
// sandbox (receipt targets, tool names and arguments, file names, log lines,
// error text) goes through Line or Block before it is printed to a terminal
// or a page. AppendJSONString is the one hand-built JSON string writer.
//
// Plane: root, CLI and unprivileged (printing, and the JSON string writer
// the broker processes build error bodies with); it holds no state.
//
// It must never pass through a byte that a terminal would interpret: C0 and
// C1 controls (ESC, CSI, OSC introducers), DEL, bidirectional overrides and
// isolates, zero-width and other invisible format characters, or invalid
// UTF-8. Machine output (--json) keeps exact values and does not use it.
package textsafe
