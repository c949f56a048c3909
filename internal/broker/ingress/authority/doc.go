// Package authority is the ingress broker's trusted half: the one policy
// question an ingress connection may ask (ingress.connect on a Route)
// and what an approval of one is bound to. The budget, reservations and
// receipts are the sandbox's authority's (internal/gateway), shared with
// the other metered brokers.
//
// Plane: root. It must never take the sandbox identity, the policy
// decision or the approval from the broker process.
package authority
