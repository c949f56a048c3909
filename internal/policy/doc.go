// Package policy is cordon's Cedar policy layer: the schema every policy is
// written against (cordon.cedarschema, embedded), loading and validating
// policy files, and the decision for each crossing of the gateway.
//
// A crossing is one Cedar request: the workload (principal
// Workload::"w" in Tenant::"t") takes an action (model.invoke,
// egress.connect, tool.call, state.read, state.write, ingress.connect) on a resource
// (Model, Host, Tool in Server, State, Route) in a context (purpose, user,
// argument digest, port, budget state). Policy is asked in addition to the
// configuration's allow-lists: both must allow, and a deny from either
// wins.
//
// Load refuses a policy that does not parse or does not validate against
// the schema (strict mode of cedar-go's validator, which lives under x/exp
// and is pinned with the module at v1.9.1: its verdicts are tested here).
// Every decision names the policies that made it and the digest of the
// set, for the crossing's receipt.
//
// Plane: root and CLI (the gateway's root side asks it for every
// crossing; `cordon policy check|explain|schema` loads it for the
// operator). The unprivileged gateway process must never import it: an
// agent's bytes never reach the code that decides.
//
// Policy ids are the @id("...") annotation when a policy has one, else
// "<file base name>:<index>" with index counting the file's policies from
// 0. A permit annotated @approval("required") requires approval when it is
// one of the determining policies of an allow.
//
// This package must never allow on error: an evaluation error, an unknown
// action, a resource of the wrong type or a malformed request is a deny,
// recorded in the decision. It must never read policy from the sandbox,
// and the decisions it returns carry policy ids and messages, never policy
// source or host paths (Explain, for the operator's CLI, does).
package policy
