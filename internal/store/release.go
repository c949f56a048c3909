package store

import (
	"context"
	"errors"
)

// ReleaseCrossings ends what a sandbox still holds across the gateway,
// when its gateway stopped or its owner died: reservations are charged
// in full, each with a ReasonGatewayLost receipt (the trusted side did
// not see how those crossings ended), tool calls still started have no known outcome
// and are quarantined, and its pending or approved approvals are revoked —
// an approval never outlives the sandbox that asked for it.
func (s *Store) ReleaseCrossings(ctx context.Context, sandboxID string) error {
	_, err := s.ChargeReservations(ctx, sandboxID, Budget{}, nil)
	_, qerr := s.QuarantineStarted(ctx, sandboxID)
	_, rerr := s.RevokeApprovals(ctx, sandboxID)
	return errors.Join(err, qerr, rerr)
}
