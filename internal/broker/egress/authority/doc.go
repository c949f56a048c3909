// Package authority is the egress broker's trusted half, on the root
// side: the only policy question an egress crossing may ask
// (egress.connect to a Host) and what an approval of a connection is
// bound to. Budgets, reservations and receipts of connections and their
// byte chunks are the sandbox's authority's (internal/gateway), which it
// shares with the model broker.
//
// Plane: root. It must never accept a policy question of another broker,
// and never widen an approval beyond its host and port.
package authority
