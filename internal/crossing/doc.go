// Package crossing holds the vocabulary every broker shares: the identity
// a listener binds to a connection, budgets, reservations, receipts, the
// Authority interface brokers use to reserve budget before a crossing
// and to record its receipt after, and the messages of those metered
// operations on the authority channel (Remote).
//
// Plane: any (the brokers' agent-facing halves in the unprivileged gateway
// process and the trusted halves on the root side both speak it). It is
// vocabulary: it holds no secret, opens nothing, decides nothing and
// imports neither the store nor policy.
//
// It must never take identity from anything the agent sends: Identity is
// set by the gateway from the listener that accepted the connection.
package crossing
