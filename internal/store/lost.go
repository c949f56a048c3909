package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/cordon-project/cordon/internal/crossing"
)

// ReasonGatewayLost is the reason of the receipt of a crossing whose
// outcome the trusted side never observed: its gateway ended (killed,
// crashed, or its owner died) while the crossing held a reservation. The
// crossing may have happened in full — a stream may already have reached
// the agent — so it is charged its whole reservation, as when an agent
// disconnects mid-stream.
const ReasonGatewayLost = "gateway_lost"

// LostCrossing is one reservation ChargeReservations settled.
type LostCrossing struct {
	Reservation crossing.Reservation
}

// ChargeReservations settles every reservation sandboxID still holds at
// its full held amount and records a receipt for each (decision allow,
// reason ReasonGatewayLost, usage = what was held), all in one write
// transaction: after it the budget counts them and nothing is left
// uncharged. b gives the receipts' budget limits (zero: not known here). annotate, when not nil, may add what the caller knows of
// each crossing (the identity's tenant and purpose, the target, the
// policy decision) before its receipt is written. It never drops a
// reservation: a reservation whose outcome is unknown is always charged.
func (s *Store) ChargeReservations(ctx context.Context, sandboxID string, b Budget, annotate func(*crossing.Receipt, crossing.Reservation)) (lost []LostCrossing, err error) {
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		lost, err = chargeIn(ctx, tx, sandboxID, b, annotate)
		return err
	})
	return lost, err
}

func chargeIn(ctx context.Context, tx *sql.Tx, sandboxID string, b Budget, annotate func(*crossing.Receipt, crossing.Reservation)) ([]LostCrossing, error) {
	rows, err := tx.QueryContext(ctx, `SELECT id, workload, broker, window_start, requests, input_tokens, output_tokens, bytes,
		egress_bytes, connections, created, ingress_connections, ingress_bytes FROM reservations WHERE sandbox_id = ? ORDER BY id`, sandboxID)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", crossing.ErrUnavailable, err)
	}
	type held struct {
		r   crossing.Reservation
		win int64
	}
	var hs []held
	for rows.Next() {
		var h held
		var created int64
		a := &h.r.Held
		if err := rows.Scan(&h.r.ID, &h.r.Identity.Workload, &h.r.Broker, &h.win, &a.Requests, &a.InputTokens, &a.OutputTokens,
			&a.Bytes, &a.EgressBytes, &a.Connections, &created, &a.IngressConnections, &a.IngressBytes); err != nil {
			rows.Close()
			return nil, fmt.Errorf("%w: %v", crossing.ErrUnavailable, err)
		}
		h.r.Identity.SandboxID = sandboxID
		h.r.At = time.Unix(0, created)
		hs = append(hs, h)
	}
	if err := rows.Close(); err != nil {
		return nil, fmt.Errorf("%w: %v", crossing.ErrUnavailable, err)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", crossing.ErrUnavailable, err)
	}
	now := time.Now()
	out := make([]LostCrossing, 0, len(hs))
	for _, h := range hs {
		rc := crossing.Receipt{
			Time: now.UTC(), Identity: h.r.Identity, Broker: h.r.Broker, Action: ReasonGatewayLost,
			Decision: crossing.Allow,
			Reason:   ReasonGatewayLost,
			Usage:    h.r.Held,
			Duration: now.Sub(h.r.At),
		}
		if annotate != nil {
			annotate(&rc, h.r)
			// What was charged and why are this function's, whatever the
			// annotation says.
			rc.Identity.Workload, rc.Identity.SandboxID = h.r.Identity.Workload, sandboxID
			rc.Decision, rc.Reason, rc.Usage, rc.Broker = crossing.Allow, ReasonGatewayLost, h.r.Held, h.r.Broker
		}
		// settleRecordIn deletes the reservation, adds the held amount to
		// the window it was made in and records the receipt with the
		// budget state after it.
		if _, err := settleRecordIn(ctx, tx, nil, h.r, h.r.Held, b, &rc); err != nil {
			return nil, err
		}
		out = append(out, LostCrossing{Reservation: h.r})
	}
	return out, nil
}

// CountReceipts is the number of receipts a sandbox's crossings added to
// the store: the evidence broker's (its signed session receipt, written by
// the trusted side at admission, never caused by the agent) are not
// counted against its bound.
func (s *Store) CountReceipts(ctx context.Context, workload, sandboxID string) (int64, error) {
	var n int64
	err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM receipts WHERE workload = ? AND sandbox_id = ? AND broker != 'evidence'`, workload, sandboxID).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("%w: count receipts: %v", crossing.ErrUnavailable, err)
	}
	return n, nil
}
