// Package authority is the state broker's trusted half: it runs on the
// root side, in the process that owns the store, and answers the state
// operations the gateway process sends on the state broker's authority
// channel. It stamps the sandbox's own scope (tenant, workload, purpose)
// on every operation, checks the operation again, asks policy
// (state.read, state.write), uses approvals, enforces the quotas and
// writes each operation's receipt in the operation's transaction.
//
// Plane: root. It must never take a scope, identity or receipt field from
// the gateway process, never apply an operation policy refused, and
// never answer an operation the store did not commit.
package authority
