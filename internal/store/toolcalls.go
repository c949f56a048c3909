package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cordon-project/cordon/internal/crossing"
)

// toolCallSchema holds tool calls for replay protection and quarantine
// (version 3). A call with a replay key is unique per workload: a
// retransmission finds the original instead of running again.
const toolCallSchema = `
CREATE TABLE IF NOT EXISTS tool_calls (
	id         INTEGER PRIMARY KEY,
	workload   TEXT    NOT NULL,
	sandbox_id TEXT    NOT NULL,
	key        TEXT    NOT NULL, -- replay key; '' when the call has none
	server     TEXT    NOT NULL,
	tool       TEXT    NOT NULL,
	digest     TEXT    NOT NULL, -- sha256 of the canonical arguments
	arguments  TEXT    NOT NULL CHECK (json_valid(arguments)),
	state      TEXT    NOT NULL CHECK (state IN ('started', 'done', 'quarantined', 'reconciled')),
	outcome    TEXT    NOT NULL DEFAULT '',
	result     TEXT    CHECK (result IS NULL OR json_valid(result)),
	receipt_id INTEGER NOT NULL DEFAULT 0,
	approval   TEXT    NOT NULL DEFAULT '',
	policy     TEXT    NOT NULL DEFAULT 'null' CHECK (json_valid(policy)),
	created    INTEGER NOT NULL, -- unix nanoseconds
	finished   INTEGER NOT NULL DEFAULT 0,
	note       TEXT    NOT NULL DEFAULT ''
) STRICT;
CREATE UNIQUE INDEX IF NOT EXISTS tool_calls_key ON tool_calls (workload, key) WHERE key != '';
CREATE INDEX IF NOT EXISTS tool_calls_workload ON tool_calls (workload, created);
CREATE INDEX IF NOT EXISTS tool_calls_state ON tool_calls (state) WHERE state IN ('started', 'quarantined');
`

// Tool call states.
const (
	CallStarted     = "started"     // sent (or about to be); outcome not known yet
	CallDone        = "done"        // answered; the result is stored for replay
	CallQuarantined = "quarantined" // outcome ambiguous: shown until reconciled
	CallReconciled  = "reconciled"  // an operator recorded what happened
)

// Errors of tool calls.
var (
	// ErrCallExists: a call with the same workload and key exists; the
	// *CallExistsError carries it.
	ErrCallExists = errors.New("tool call with this key exists")
	// ErrCallNotFound: no tool call has the id.
	ErrCallNotFound = errors.New("tool call not found")
	// ErrCallState: the call is not in a state the operation accepts.
	ErrCallState = errors.New("tool call is in the wrong state")
)

// CallExistsError is returned by BeginToolCall for a retransmission.
type CallExistsError struct{ Call ToolCall }

func (e *CallExistsError) Error() string {
	return fmt.Sprintf("%v: call %d is %s", ErrCallExists, e.Call.ID, e.Call.State)
}

func (e *CallExistsError) Unwrap() error { return ErrCallExists }

// ToolCall is one tools/call through the tool broker.
type ToolCall struct {
	ID        int64                    `json:"id"`
	Workload  string                   `json:"workload"`
	SandboxID string                   `json:"sandbox_id"`
	Key       string                   `json:"key,omitempty"`
	Server    string                   `json:"server"`
	Tool      string                   `json:"tool"`
	Digest    string                   `json:"digest"`
	Arguments json.RawMessage          `json:"arguments"`
	State     string                   `json:"state"`
	Outcome   string                   `json:"outcome,omitempty"`
	Result    json.RawMessage          `json:"result,omitempty"`
	ReceiptID int64                    `json:"receipt_id,omitempty"`
	Approval  string                   `json:"approval,omitempty"`
	Policy    *crossing.PolicyDecision `json:"policy,omitempty"`
	Created   time.Time                `json:"created"`
	Finished  time.Time                `json:"finished,omitzero"`
	Note      string                   `json:"note,omitempty"`
}

const toolCallCols = `id, workload, sandbox_id, key, server, tool, digest, arguments, state, outcome, result, receipt_id, approval, policy, created, finished, note`

func scanToolCall(row interface{ Scan(...any) error }) (ToolCall, error) {
	var c ToolCall
	var args, pol string
	var result sql.NullString
	var created, finished int64
	if err := row.Scan(&c.ID, &c.Workload, &c.SandboxID, &c.Key, &c.Server, &c.Tool, &c.Digest, &args, &c.State, &c.Outcome,
		&result, &c.ReceiptID, &c.Approval, &pol, &created, &finished, &c.Note); err != nil {
		return c, err
	}
	c.Arguments = json.RawMessage(args)
	if result.Valid {
		c.Result = json.RawMessage(result.String)
	}
	if pol != "null" {
		c.Policy = &crossing.PolicyDecision{}
		if err := json.Unmarshal([]byte(pol), c.Policy); err != nil {
			return c, fmt.Errorf("tool call %d: policy: %w", c.ID, err)
		}
	}
	c.Created = time.Unix(0, created).UTC()
	if finished != 0 {
		c.Finished = time.Unix(0, finished).UTC()
	}
	return c, nil
}

// findCall reads the call with this workload and replay key.
func findCall(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, workload, key string) (ToolCall, error) {
	return scanToolCall(q.QueryRowContext(ctx, `SELECT `+toolCallCols+` FROM tool_calls WHERE workload = ? AND key = ?`, workload, key))
}

// LookupToolCall returns the call with this workload and replay key.
func (s *Store) LookupToolCall(ctx context.Context, workload, key string) (ToolCall, error) {
	if key == "" {
		return ToolCall{}, ErrCallNotFound
	}
	c, err := findCall(ctx, s.db, workload, key)
	if errors.Is(err, sql.ErrNoRows) {
		return c, ErrCallNotFound
	}
	if err != nil {
		return c, fmt.Errorf("%w: %v", crossing.ErrUnavailable, err)
	}
	return c, nil
}

// BeginToolCall records a call as started before it is sent. limit > 0
// bounds the workload's calls since windowStart (its tool-call budget):
// over it, crossing.ErrBudgetExceeded. A call whose key exists already
// gets a *CallExistsError with the original.
func (s *Store) BeginToolCall(ctx context.Context, c ToolCall, limit int64, windowStart time.Time) (ToolCall, error) {
	pol, err := json.Marshal(c.Policy)
	if err != nil {
		return c, err
	}
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		if c.Key != "" {
			old, err := findCall(ctx, tx, c.Workload, c.Key)
			if err == nil {
				return &CallExistsError{Call: old}
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("%w: %v", crossing.ErrUnavailable, err)
			}
		}
		if limit > 0 {
			var n int64
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM tool_calls WHERE workload = ? AND created >= ?`,
				c.Workload, windowStart.UnixNano()).Scan(&n); err != nil {
				return fmt.Errorf("%w: %v", crossing.ErrUnavailable, err)
			}
			if n >= limit {
				return fmt.Errorf("%w: tool_calls: %d used of %d", crossing.ErrBudgetExceeded, n, limit)
			}
		}
		c.State, c.Created = CallStarted, time.Now().UTC()
		res, err := tx.ExecContext(ctx, `INSERT INTO tool_calls (workload, sandbox_id, key, server, tool, digest, arguments, state, approval, policy, created)
			VALUES (?,?,?,?,?,?,?,?,?,?,?)`, c.Workload, c.SandboxID, c.Key, c.Server, c.Tool, c.Digest, string(c.Arguments),
			c.State, c.Approval, string(pol), c.Created.UnixNano())
		if err != nil {
			return fmt.Errorf("%w: %v", crossing.ErrUnavailable, err)
		}
		c.ID, _ = res.LastInsertId()
		return nil
	})
	return c, err
}

// EndToolCall finishes a started call of sandboxID in one transaction:
// it records the receipt (stamped with the call's key, policy decision and
// approval as stored at Begin, not as reported), stores the result for
// replay — or quarantines the call when outcome is ambiguous — and
// returns the receipt's id and the call as it was begun.
func (s *Store) EndToolCall(ctx context.Context, id int64, sandboxID, outcome string, ambiguous bool, result json.RawMessage, rc crossing.Receipt) (int64, ToolCall, error) {
	var rid int64
	var c ToolCall
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		c, err = scanToolCall(tx.QueryRowContext(ctx, `SELECT `+toolCallCols+` FROM tool_calls WHERE id = ? AND sandbox_id = ?`, id, sandboxID))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: %d", ErrCallNotFound, id)
		}
		if err != nil {
			return fmt.Errorf("%w: %v", crossing.ErrUnavailable, err)
		}
		if c.State != CallStarted {
			return fmt.Errorf("%w: call %d is %s", ErrCallState, id, c.State)
		}
		rc.CallKey, rc.Policy, rc.Approval, rc.RequestDigest = c.Key, c.Policy, c.Approval, c.Digest
		rc.Target = c.Server + "/" + c.Tool
		if rid, err = recordTx(ctx, tx, rc); err != nil {
			return err
		}
		state, res := CallDone, sql.NullString{String: string(result), Valid: result != nil}
		if ambiguous {
			state, res = CallQuarantined, sql.NullString{}
		}
		_, err = tx.ExecContext(ctx, `UPDATE tool_calls SET state = ?, outcome = ?, result = ?, receipt_id = ?, finished = ? WHERE id = ?`,
			state, outcome, res, rid, time.Now().UnixNano(), id)
		if err != nil {
			return fmt.Errorf("%w: %v", crossing.ErrUnavailable, err)
		}
		return nil
	})
	return rid, c, err
}

// QuarantineStarted quarantines every call of sandboxID still started:
// its gateway ended before reporting an outcome. It returns how many.
func (s *Store) QuarantineStarted(ctx context.Context, sandboxID string) (int64, error) {
	res, err := s.db.ExecContext(ctx, `UPDATE tool_calls SET state = 'quarantined', outcome = 'ambiguous', finished = ?,
		note = 'the gateway ended before the outcome was known' WHERE sandbox_id = ? AND state = 'started'`, time.Now().UnixNano(), sandboxID)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// ToolCallFilter selects tool calls; zero fields match everything.
type ToolCallFilter struct {
	Workload, State string
	Limit           int
}

// ToolCalls lists calls, newest first.
func (s *Store) ToolCalls(ctx context.Context, f ToolCallFilter) ([]ToolCall, error) {
	q := `SELECT ` + toolCallCols + ` FROM tool_calls WHERE (? = '' OR workload = ?) AND (? = '' OR state = ?) ORDER BY id DESC`
	args := []any{f.Workload, f.Workload, f.State, f.State}
	if f.Limit > 0 {
		q += ` LIMIT ?`
		args = append(args, f.Limit)
	}
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []ToolCall
	for rows.Next() {
		c, err := scanToolCall(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// ReconcileToolCall records an operator's finding about a quarantined
// call (what happened, e.g. "ran" or "did not run"); the call stays
// unreplayable: a retransmission is still refused.
func (s *Store) ReconcileToolCall(ctx context.Context, id int64, note string) (ToolCall, error) {
	var c ToolCall
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		c, err = scanToolCall(tx.QueryRowContext(ctx, `SELECT `+toolCallCols+` FROM tool_calls WHERE id = ?`, id))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: %d", ErrCallNotFound, id)
		}
		if err != nil {
			return err
		}
		if c.State != CallQuarantined {
			return fmt.Errorf("%w: call %d is %s, only a quarantined call can be reconciled", ErrCallState, id, c.State)
		}
		c.State, c.Note = CallReconciled, note
		_, err = tx.ExecContext(ctx, `UPDATE tool_calls SET state = 'reconciled', note = ? WHERE id = ?`, note, id)
		return err
	})
	return c, err
}
