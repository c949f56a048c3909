// Package dial is the checked dialer between the privileged side and the
// broker processes (design decision 13, contract section 5: only the
// relevant broker reaches its target). A broker process lives in an empty
// network namespace and may not create sockets; when it needs an
// upstream it asks the privileged side over its own channel, and the
// privileged side checks the destination against what the configuration
// declares FOR THAT BROKER (Policy), resolves it, dials it with a
// timeout, checks the connected peer again, and hands the connected
// socket back (SCM_RIGHTS).
//
// Two halves live here: Server runs on the privileged (root) side, one
// per broker process; Client runs in the unprivileged broker process and
// is its http.Transport's DialContext (and the egress broker's Resolver).
// The wire format (wire.go) is the only thing the privileged side parses
// from a broker process here; it is strict and fuzzed.
//
// Plane: root (Server and the policies) and unprivileged (Client, linked
// into the broker processes). The Client holds no authority: it can only
// ask.
//
// It must never dial a destination its Policy did not approve for that
// broker, dial a name it has not just resolved and checked, let one broker
// process open unbounded sockets (MaxConcurrent, Timeout), or hand a
// connected socket to any process but the one whose channel asked.
package dial
