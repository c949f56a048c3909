// Package authority is the tool broker's trusted half: it runs on the
// root side, in the process that owns the store, and answers the
// operations the gateway process sends on the tool broker's authority
// channel (filter, begin, await, end). It checks again that the
// configuration offers the tool, asks policy with the call's argument
// digest, refuses a replayed key with other arguments, binds approvals to
// the exact call, enforces the call limit, records each call before it is
// sent upstream and writes its receipt, with the result's digest, when it
// ends.
//
// Plane: root. It must never take identity, a policy decision or an
// approval from the gateway process, never let a call through that
// policy refused or that no approval covers, and never record a call as
// done that was not begun here.
package authority
