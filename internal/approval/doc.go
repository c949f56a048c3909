// Package approval is the human side of approvals: the operator's web
// console that lists pending approvals with their exact arguments, takes
// the approve and deny decisions, and shows the recent receipts. The
// approvals themselves (request, decide, consume once, expire, revoke) live
// in the store, bound to the exact request digest; the console declares
// the slice of the store it uses (ConsoleStore, in console.go).
//
// Plane: root (the operator's `cordon approvals console`, on the host; it
// opens the store).
//
// The console is a trusted-side, host-only surface. It listens on a
// loopback address of the host's network namespace, which no sandbox can
// reach (each sandbox has its own network namespace with only lo). It is
// also not open to every host user: a request needs a session cookie that
// only the holder of the random login token can obtain; a decision must be
// a POST carrying the session's CSRF token from a page of the console's own
// origin; and the Host header must name the listener exactly (DNS
// rebinding). Pages carry no script at all.
//
// It must never listen on a non-loopback address, never change state on a
// GET, never render agent-supplied text without escaping (arguments are
// HTML-escaped by html/template and invisible characters are shown as
// escapes), and never let anything inside a sandbox decide an approval.
package approval
