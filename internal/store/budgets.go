package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/cordon-project/cordon/internal/crossing"
)

// Budget is a workload's declared budget. Zero limits are unlimited.
type Budget struct {
	Limits  crossing.Amount
	Streams int64         // concurrent model streams
	Window  time.Duration // 0: for the workload's lifetime
}

func (b Budget) windowStart(now time.Time) int64 {
	if b.Window <= 0 {
		return 0
	}
	w := int64(b.Window / time.Second)
	if w <= 0 {
		w = 1
	}
	return now.Unix() / w * w
}

type amountCols struct{ a crossing.Amount }

func (c *amountCols) scan(row interface{ Scan(...any) error }) error {
	return row.Scan(&c.a.Requests, &c.a.InputTokens, &c.a.OutputTokens, &c.a.Bytes, &c.a.EgressBytes, &c.a.Connections,
		&c.a.IngressConnections, &c.a.IngressBytes)
}

// used returns settled usage in the window plus every held reservation.
func used(ctx context.Context, tx querier, workload string, win int64) (crossing.Amount, int64, error) {
	var settled, held amountCols
	err := settled.scan(tx.QueryRowContext(ctx, `SELECT requests, input_tokens, output_tokens, bytes, egress_bytes, connections,
		ingress_connections, ingress_bytes FROM budget_usage WHERE workload = ? AND window_start = ?`, workload, win))
	if err != nil && err != sql.ErrNoRows {
		return crossing.Amount{}, 0, err
	}
	var streams int64
	err = tx.QueryRowContext(ctx, `SELECT coalesce(sum(requests),0), coalesce(sum(input_tokens),0), coalesce(sum(output_tokens),0),
		coalesce(sum(bytes),0), coalesce(sum(egress_bytes),0), coalesce(sum(connections),0), coalesce(sum(streams),0),
		coalesce(sum(ingress_connections),0), coalesce(sum(ingress_bytes),0) FROM reservations WHERE workload = ? AND window_start = ?`, workload, win).
		Scan(&held.a.Requests, &held.a.InputTokens, &held.a.OutputTokens, &held.a.Bytes, &held.a.EgressBytes, &held.a.Connections, &streams,
			&held.a.IngressConnections, &held.a.IngressBytes)
	if err != nil {
		return crossing.Amount{}, 0, err
	}
	return settled.a.Add(held.a), streams, nil
}

// OverBudget names the first limit that used+want would exceed, or "":
// Reserve's check, for `cordon policy explain`.
func OverBudget(used, want, lim crossing.Amount) string { return over(used, want, lim) }

// over names the first limit that used+want would exceed, or "".
func over(used, want, lim crossing.Amount) string {
	check := []struct {
		name    string
		u, w, l int64
	}{
		{"requests", used.Requests, want.Requests, lim.Requests},
		{"input_tokens", used.InputTokens, want.InputTokens, lim.InputTokens},
		{"output_tokens", used.OutputTokens, want.OutputTokens, lim.OutputTokens},
		{"bytes", used.Bytes, want.Bytes, lim.Bytes},
		{"egress_bytes", used.EgressBytes, want.EgressBytes, lim.EgressBytes},
		{"connections", used.Connections, want.Connections, lim.Connections},
		{"ingress_connections", used.IngressConnections, want.IngressConnections, lim.IngressConnections},
		{"ingress_bytes", used.IngressBytes, want.IngressBytes, lim.IngressBytes},
	}
	for _, c := range check {
		if c.l > 0 && c.w > 0 && c.w > c.l-c.u { // u+w > l, without overflow
			return fmt.Sprintf("%s: %d used of %d, %d more requested", c.name, c.u, c.l, c.w)
		}
	}
	return ""
}

// Reserve holds want (and streams concurrent-stream slots) against the
// workload's budget in one write transaction, so reservations from every
// process sharing this store can never together exceed a limit.
func (s *Store) Reserve(ctx context.Context, id crossing.Identity, broker string, want crossing.Amount, streams int64, b Budget) (r crossing.Reservation, st crossing.BudgetState, err error) {
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		r, st, err = reserveIn(ctx, tx, id, broker, want, streams, b)
		return err
	})
	return r, st, err
}

func reserveIn(ctx context.Context, tx *sql.Tx, id crossing.Identity, broker string, want crossing.Amount, streams int64, b Budget) (crossing.Reservation, crossing.BudgetState, error) {
	if err := nonNegative(want); err != nil || streams < 0 {
		return crossing.Reservation{}, crossing.BudgetState{}, fmt.Errorf("reserve: negative amount (%v, streams %d)", err, streams)
	}
	now := time.Now()
	win := b.windowStart(now)
	u, held, err := used(ctx, tx, id.Workload, win)
	if err != nil {
		return crossing.Reservation{}, crossing.BudgetState{}, fmt.Errorf("%w: %v", crossing.ErrUnavailable, err)
	}
	st := crossing.BudgetState{Used: u, Limits: b.Limits, Streams: held}
	if why := over(u, want, b.Limits); why != "" {
		return crossing.Reservation{}, st, fmt.Errorf("%w: %s", crossing.ErrBudgetExceeded, why)
	}
	if streams > 0 && b.Streams > 0 && held+streams > b.Streams {
		return crossing.Reservation{}, st, fmt.Errorf("%w: concurrent streams: %d of %d in use", crossing.ErrBudgetExceeded, held, b.Streams)
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO reservations (workload, sandbox_id, broker, window_start, requests, input_tokens,
		output_tokens, bytes, egress_bytes, connections, streams, created, ingress_connections, ingress_bytes)
		VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)`,
		id.Workload, id.SandboxID, broker, win, want.Requests, want.InputTokens, want.OutputTokens, want.Bytes,
		want.EgressBytes, want.Connections, streams, now.UnixNano(), want.IngressConnections, want.IngressBytes)
	if err != nil {
		return crossing.Reservation{}, st, fmt.Errorf("%w: %v", crossing.ErrUnavailable, err)
	}
	rid, _ := res.LastInsertId()
	st.Used = u.Add(want)
	st.Streams = held + streams
	return crossing.Reservation{ID: rid, Identity: id, Broker: broker, Held: want, At: now}, st, nil
}

// BudgetState is the workload's budget now (settled and held in the
// current window, and the streams held), as a crossing's policy question
// reads it in context.budget.
func (s *Store) BudgetState(ctx context.Context, workload string, b Budget) (crossing.BudgetState, error) {
	return budgetState(ctx, s.db, workload, b)
}

func budgetState(ctx context.Context, q querier, workload string, b Budget) (crossing.BudgetState, error) {
	u, held, err := used(ctx, q, workload, b.windowStart(time.Now()))
	if err != nil {
		return crossing.BudgetState{}, fmt.Errorf("%w: %v", crossing.ErrUnavailable, err)
	}
	return crossing.BudgetState{Used: u, Limits: b.Limits, Streams: held}, nil
}

// inTx runs fn in one write transaction and commits it. When a receipt
// observer is set, the receipts fn recorded are told to it after the
// commit (observe.go).
func (s *Store) inTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("%w: %v", crossing.ErrUnavailable, err)
	}
	defer tx.Rollback()
	obs := s.watch(tx)
	if obs != nil {
		defer obs.done()
	}
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("%w: %v", crossing.ErrUnavailable, err)
	}
	obs.committed()
	return nil
}

// Settle releases a reservation and adds what was really used to the
// window the reservation was made in.
func (s *Store) Settle(ctx context.Context, r crossing.Reservation, usage crossing.Amount, b Budget) (crossing.BudgetState, error) {
	return s.SettleRecord(ctx, r, usage, b, nil)
}

// SettleRecord settles a reservation and, when rc is not nil, records its
// receipt (with the budget state after the settlement) in the same write
// transaction: one commit per crossing instead of two.
func (s *Store) SettleRecord(ctx context.Context, r crossing.Reservation, usage crossing.Amount, b Budget, rc *crossing.Receipt) (st crossing.BudgetState, err error) {
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		st, err = settleRecordIn(ctx, tx, nil, r, usage, b, rc)
		return err
	})
	return st, err
}

func settleRecordIn(ctx context.Context, tx *sql.Tx, lc *logCache, r crossing.Reservation, usage crossing.Amount, b Budget, rc *crossing.Receipt) (crossing.BudgetState, error) {
	if err := nonNegative(usage); err != nil {
		return crossing.BudgetState{}, fmt.Errorf("settle: %w", err)
	}
	var win int64
	// Only the sandbox that holds a reservation may settle it, and only
	// as the broker it holds it for.
	if err := tx.QueryRowContext(ctx, `DELETE FROM reservations WHERE id = ? AND sandbox_id = ? AND workload = ? AND broker = ? RETURNING window_start`,
		r.ID, r.Identity.SandboxID, r.Identity.Workload, r.Broker).Scan(&win); err != nil {
		return crossing.BudgetState{}, fmt.Errorf("settle reservation %d: %w", r.ID, err)
	}
	_, err := tx.ExecContext(ctx, addUsage,
		r.Identity.Workload, win, usage.Requests, usage.InputTokens, usage.OutputTokens, usage.Bytes, usage.EgressBytes, usage.Connections,
		usage.IngressConnections, usage.IngressBytes)
	if err != nil {
		return crossing.BudgetState{}, fmt.Errorf("%w: %v", crossing.ErrUnavailable, err)
	}
	u, held, err := used(ctx, tx, r.Identity.Workload, win)
	if err != nil {
		return crossing.BudgetState{}, fmt.Errorf("%w: %v", crossing.ErrUnavailable, err)
	}
	st := crossing.BudgetState{Used: u, Limits: b.Limits, Streams: held}
	if rc != nil {
		rc.Budget = st
		id, err := recordIn(ctx, tx, lc, *rc)
		if err != nil {
			return crossing.BudgetState{}, err
		}
		rc.ID = id // for the caller's log line; the recorded body is as it was

	}
	return st, nil
}

// Batch runs several budget and receipt operations in one write transaction (group
// commit): each runs under its own savepoint, so one that fails leaves
// the others intact. If the commit fails, every operation failed.
func (s *Store) Batch(ctx context.Context, fn func(*Tx)) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		fn(&Tx{ctx: ctx, tx: tx})
		return nil
	})
}

// BudgetState is Store.BudgetState within the batch.
func (t *Tx) BudgetState(workload string, b Budget) (crossing.BudgetState, error) {
	return budgetState(t.ctx, t.tx, workload, b)
}

// Tx is a batch's transaction.
type Tx struct {
	ctx context.Context
	tx  *sql.Tx
	log logCache // evidence log hashes this batch appended (evlog.go)
}

// op runs fn under a savepoint, rolled back to if fn fails.
func (t *Tx) op(fn func() error) error {
	if _, err := t.tx.ExecContext(t.ctx, "SAVEPOINT ledger_op"); err != nil {
		return fmt.Errorf("%w: %v", crossing.ErrUnavailable, err)
	}
	mark := receiptsMark(t.tx)
	err := fn()
	if err != nil {
		_, _ = t.tx.ExecContext(t.ctx, "ROLLBACK TO ledger_op")
		t.log.reset() // it may hold hashes the rollback removed
		receiptsRollback(t.tx, mark)
	}
	if _, rerr := t.tx.ExecContext(t.ctx, "RELEASE ledger_op"); rerr != nil && err == nil {
		err = fmt.Errorf("%w: %v", crossing.ErrUnavailable, rerr)
	}
	return err
}

// Reserve is Store.Reserve inside the batch.
func (t *Tx) Reserve(id crossing.Identity, broker string, want crossing.Amount, streams int64, b Budget) (r crossing.Reservation, st crossing.BudgetState, err error) {
	err = t.op(func() error {
		r, st, err = reserveIn(t.ctx, t.tx, id, broker, want, streams, b)
		return err
	})
	return r, st, err
}

// SettleRecord is Store.SettleRecord inside the batch.
func (t *Tx) SettleRecord(r crossing.Reservation, usage crossing.Amount, b Budget, rc *crossing.Receipt) (st crossing.BudgetState, err error) {
	err = t.op(func() error {
		st, err = settleRecordIn(t.ctx, t.tx, &t.log, r, usage, b, rc)
		return err
	})
	return st, err
}

// Record is Store.RecordReceipt inside the batch.
func (t *Tx) Record(rc crossing.Receipt) (id int64, err error) {
	err = t.op(func() error {
		id, err = recordIn(t.ctx, t.tx, &t.log, rc)
		return err
	})
	return id, err
}

// DropReservations releases every reservation a sandbox still holds;
// nothing is counted. Only for reservations known never to have been
// used: a gateway that ended without settling is ChargeReservations'.
func (s *Store) DropReservations(ctx context.Context, sandboxID string) error {
	_, err := s.db.ExecContext(ctx, `DELETE FROM reservations WHERE sandbox_id = ?`, sandboxID)
	return err
}

// RecordReceipt appends a receipt, and its leaf in the evidence log, in one
// write transaction and returns its id.
func (s *Store) RecordReceipt(ctx context.Context, rc crossing.Receipt) (id int64, err error) {
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		id, err = recordTx(ctx, tx, rc)
		return err
	})
	return id, err
}

// recordTx inserts a receipt and appends it to the evidence log (evlog.go)
// in tx: the receipt commits with its leaf or not at all.
func recordTx(ctx context.Context, tx *sql.Tx, rc crossing.Receipt) (int64, error) {
	return recordIn(ctx, tx, nil, rc)
}

// recordIn is recordTx with a batch's cache of the log's hashes (nil: none).
func recordIn(ctx context.Context, tx *sql.Tx, lc *logCache, rc crossing.Receipt) (int64, error) {
	body, err := json.Marshal(rc)
	if err != nil {
		return 0, err
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO receipts (time, workload, sandbox_id, broker, decision, body) VALUES (?,?,?,?,?,?)`,
		rc.Time.UnixNano(), rc.Identity.Workload, rc.Identity.SandboxID, rc.Broker, rc.Decision, string(body))
	if err != nil {
		return 0, fmt.Errorf("%w: record receipt: %v", crossing.ErrUnavailable, err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		return 0, fmt.Errorf("%w: record receipt: %v", crossing.ErrUnavailable, err)
	}
	// The leaf's data is exactly the body text stored above.
	if err := appendLeaf(ctx, tx, lc, id, body); err != nil {
		return 0, err
	}
	rc.ID = id
	recorded(tx, rc)
	return id, nil
}

// nonNegative refuses negative amounts (a negative hold or settlement
// would hand budget back) and amounts over MaxAmount.
func nonNegative(a crossing.Amount) error {
	for _, v := range []int64{a.Requests, a.InputTokens, a.OutputTokens, a.Bytes, a.EgressBytes, a.Connections, a.IngressConnections, a.IngressBytes} {
		if v < 0 {
			return fmt.Errorf("negative amount %d", v)
		}
		if v > MaxAmount {
			return fmt.Errorf("amount %d over the bound of %d", v, int64(MaxAmount))
		}
	}
	return nil
}

// MaxAmount bounds each quantity of one reservation or settlement (2^50:
// a pebibyte, 10^15 tokens). The budget is a sum of them in int64: a
// gateway that could hold or settle amounts near math.MaxInt64 would make
// the sums wrap (and a limit stop limiting) or SQLite refuse them (and
// every crossing of the workload fail).
const MaxAmount = 1 << 50

// maxUsage caps what a window's settled usage counts (2^61, far past any
// limit): the sum saturates there instead of leaving int64, so settled
// usage plus what a sandbox can hold (maxOpen reservations of MaxAmount)
// still fits.
const maxUsage = 1 << 61

// addUsage adds a settlement to its window's usage, saturating at maxUsage.
var addUsage = fmt.Sprintf(`INSERT INTO budget_usage (workload, window_start, requests, input_tokens, output_tokens, bytes, egress_bytes, connections, ingress_connections, ingress_bytes)
		VALUES (?,?,?,?,?,?,?,?,?,?) ON CONFLICT (workload, window_start) DO UPDATE SET
		requests = min(requests + excluded.requests, %[1]d), input_tokens = min(input_tokens + excluded.input_tokens, %[1]d),
		output_tokens = min(output_tokens + excluded.output_tokens, %[1]d), bytes = min(bytes + excluded.bytes, %[1]d),
		egress_bytes = min(egress_bytes + excluded.egress_bytes, %[1]d), connections = min(connections + excluded.connections, %[1]d),
		ingress_connections = min(ingress_connections + excluded.ingress_connections, %[1]d),
		ingress_bytes = min(ingress_bytes + excluded.ingress_bytes, %[1]d)`, int64(maxUsage))
