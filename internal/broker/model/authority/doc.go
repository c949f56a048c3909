// Package authority is the model broker's trusted half, on the root side:
// the only policy question a model crossing may ask (model.invoke on a
// Model) and what an approval of a model call is bound to. Budgets,
// reservations and receipts of model calls are the sandbox's authority's
// (internal/gateway), which it shares with the egress broker.
//
// Plane: root. It must never accept a policy question of another broker,
// and never bind an approval to less than the exact request.
package authority
