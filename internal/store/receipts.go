package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cordon-project/cordon/internal/crossing"
)

// ReceiptFilter selects receipts; zero fields match everything. Every
// field is a column of the receipts table (Decision and Since have
// indexes of their own, schema version 8): the store filters, never the
// caller after reading every body.
type ReceiptFilter struct {
	Workload, SandboxID, Broker string
	// Decision is crossing.Allow or crossing.Deny.
	Decision string
	// Since keeps receipts whose time is at or after it.
	Since time.Time
	Limit int
}

// ErrNoReceipt is returned by Receipt for an id the store does not hold.
var ErrNoReceipt = errors.New("no such receipt")

// Receipts lists receipts, oldest first (the last Limit when set).
func (s *Store) Receipts(ctx context.Context, f ReceiptFilter) ([]crossing.Receipt, error) {
	var where []string
	var args []any
	add := func(cond string, v any) {
		where = append(where, cond)
		args = append(args, v)
	}
	if f.Workload != "" {
		add("workload = ?", f.Workload)
	}
	if f.SandboxID != "" {
		add("sandbox_id = ?", f.SandboxID)
	}
	if f.Broker != "" {
		add("broker = ?", f.Broker)
	}
	if f.Decision != "" {
		add("decision = ?", f.Decision)
	}
	if !f.Since.IsZero() {
		add("time >= ?", f.Since.UnixNano())
	}
	q := `SELECT id, body FROM receipts`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY id DESC`
	if f.Limit > 0 {
		q += ` LIMIT ?`
		args = append(args, f.Limit)
	}
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []crossing.Receipt
	for rows.Next() {
		var id int64
		var body string
		if err := rows.Scan(&id, &body); err != nil {
			return nil, err
		}
		rc, err := decodeReceipt(id, body)
		if err != nil {
			return nil, err
		}
		out = append(out, rc)
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, rows.Err()
}

// Receipt reads one receipt by id (ErrNoReceipt when there is none).
func (s *Store) Receipt(ctx context.Context, id int64) (crossing.Receipt, error) {
	var body string
	err := s.db.QueryRowContext(ctx, `SELECT body FROM receipts WHERE id = ?`, id).Scan(&body)
	if errors.Is(err, sql.ErrNoRows) {
		return crossing.Receipt{}, fmt.Errorf("receipt %d: %w", id, ErrNoReceipt)
	}
	if err != nil {
		return crossing.Receipt{}, fmt.Errorf("receipt %d: %w", id, err)
	}
	return decodeReceipt(id, body)
}

func decodeReceipt(id int64, body string) (crossing.Receipt, error) {
	var rc crossing.Receipt
	if err := json.Unmarshal([]byte(body), &rc); err != nil {
		return rc, fmt.Errorf("receipt %d: %w", id, err)
	}
	rc.ID = id
	return rc, nil
}
