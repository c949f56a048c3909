// Package crossing holds the vocabulary every broker shares: the identity
// a listener binds to a connection, budgets, reservations, receipts, the
// Authority interface brokers use to reserve budget before a crossing
// and to record its receipt after, and the messages of those metered
// operations on the authority channel (Remote).
//
// Plane: shared by the gateway process and the root side; it imports
// neither the store nor policy. It must never take identity from
// anything the agent sends: Identity is set by the gateway from the
// listener that accepted the connection.
package crossing
