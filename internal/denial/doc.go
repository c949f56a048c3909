// Package denial answers "why was this denied?" for a recorded crossing:
// Rule names what denied it (the Cedar forbid ids or "no permit matched",
// the configuration line that is missing, the budget and its window, or
// the approval's state), and Suggest builds the smallest change that
// would allow it — a configuration YAML snippet or a Cedar permit scoped
// to exactly that workload and target — for a human to read.
//
// Plane: root and CLI (the privileged side fills a denial receipt's Rule
// when it records it and logs the denial with Log; cordon receipts and
// cordon policy explain show the suggestions); it holds no state.
//
// It must never apply a suggestion, never be called on the agent's path
// (the agent's denial messages stay as the brokers write them), and never
// emit an untrusted string (a host, a model id, a tool name the agent
// chose) except quoted: a Cedar string literal or a YAML double-quoted
// scalar with every character outside printable ASCII escaped, so a
// snippet can never carry an extra policy, key or entry
// (FuzzSuggestCedar, FuzzSuggestConfig).
package denial
