// Package ingress is the agent-facing half of the ingress broker: the
// declared inbound routes (contract section 3, network ingress). For each
// route it accepts connections on a listener the privileged side opened on
// the HOST address the configuration declares, asks the authority
// (policy ingress.connect on the Route, the ingress budgets) before any
// byte moves, has the privileged side's checked dialer connect a socket
// created INSIDE the sandbox's network namespace to 127.0.0.1:<port>, and
// relays the bytes both ways (half-close included), metering them
// against budgets.ingress_bytes. Every connection, admitted or refused,
// ends in one receipt: route, client address, bytes each way, duration,
// decision and reason.
//
// Plane: unprivileged. It runs in its own broker process (cordon-gateway
// ingress) as the sandbox's gateway uid, with no capabilities, in an
// empty network namespace, under the broker seccomp filter: the bytes it
// relays come from the sandbox's program and are never parsed. Its
// trusted half is ./authority (the policy question it may ask).
//
// It must never: import the store or policy (TestUnprivilegedImportsNoStoreOrPolicy);
// open a socket of its own (it has none to open: its only sockets are
// the host listeners it was given and the connections the checked
// dialer hands it, which reach only the declared ports on the sandbox's
// loopback); relay a byte before the authority admitted the connection;
// relay past the byte budget; or let a connection through when the
// authority cannot be reached (fail closed).
package ingress
