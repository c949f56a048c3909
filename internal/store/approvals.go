package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// approvalSchema holds approval requests (version 3).
//
// state is the stored state; "expired" is also computed on read for a
// pending or approved row whose expires has passed. The partial unique
// index keeps at most one live (pending or approved) approval per exact
// request; RequestApproval marks stale live rows expired before it looks.
const approvalSchema = `
CREATE TABLE IF NOT EXISTS approvals (
	id         TEXT    NOT NULL PRIMARY KEY CHECK (length(id) = 28 AND substr(id, 1, 4) = 'apr_'),
	workload   TEXT    NOT NULL CHECK (workload <> ''),
	sandbox_id TEXT    NOT NULL,
	action     TEXT    NOT NULL CHECK (action <> ''),
	target     TEXT    NOT NULL,
	digest     TEXT    NOT NULL CHECK (digest <> ''),
	arguments  TEXT    NOT NULL CHECK (json_valid(arguments)),
	state      TEXT    NOT NULL CHECK (state IN ('pending', 'approved', 'denied', 'consumed', 'revoked', 'expired')),
	created    INTEGER NOT NULL, -- unix nanoseconds
	expires    INTEGER NOT NULL, -- unix nanoseconds
	decided    INTEGER NOT NULL DEFAULT 0,
	decided_by TEXT    NOT NULL DEFAULT '',
	consumed   INTEGER NOT NULL DEFAULT 0,
	revoked    INTEGER NOT NULL DEFAULT 0,
	revoked_by TEXT    NOT NULL DEFAULT '',
	receipt_id INTEGER NOT NULL DEFAULT 0
) STRICT;
CREATE UNIQUE INDEX IF NOT EXISTS approvals_live ON approvals (workload, digest) WHERE state IN ('pending', 'approved');
CREATE INDEX IF NOT EXISTS approvals_request ON approvals (workload, digest, created);
CREATE INDEX IF NOT EXISTS approvals_state ON approvals (state, created);
CREATE INDEX IF NOT EXISTS approvals_sandbox ON approvals (sandbox_id, state);
`

// Approval states. Pending and approved approvals whose Expires has passed
// are reported as ApprovalExpired. Denied, consumed, revoked and expired
// are final.
const (
	ApprovalPending  = "pending"  // waiting for a human
	ApprovalApproved = "approved" // approved, not yet used
	ApprovalDenied   = "denied"   // a human refused it
	ApprovalConsumed = "consumed" // used once by the call it was bound to
	ApprovalRevoked  = "revoked"  // withdrawn (by an operator, or its sandbox stopped)
	ApprovalExpired  = "expired"  // not decided, or not used, in time
)

// Approval errors. Inspect them with errors.Is (and errors.As for
// *ApprovalStateError).
var (
	// ErrApprovalNotFound: no approval has this id (unknown or forged), or
	// there is none for this exact request.
	ErrApprovalNotFound = errors.New("approval not found")
	// ErrApprovalPending: the request's approval waits for a decision.
	ErrApprovalPending = errors.New("approval pending")
	// ErrApprovalDenied: a human denied this exact request; the denial
	// stands until the denied approval's expiry.
	ErrApprovalDenied = errors.New("approval denied")
	// ErrApprovalDecided: the approval is no longer pending (approved,
	// denied, consumed, revoked or expired). Matched by *ApprovalStateError.
	ErrApprovalDecided = errors.New("approval already decided")
	// ErrApprovalExpired: the approval expired. An *ApprovalStateError
	// whose State is ApprovalExpired matches it as well as ErrApprovalDecided.
	ErrApprovalExpired = errors.New("approval expired")
)

// ApprovalStateError refuses an operation on an approval in the wrong
// state. It matches ErrApprovalDecided (and ErrApprovalExpired when State
// is ApprovalExpired).
type ApprovalStateError struct {
	ID    string
	State string
}

func (e *ApprovalStateError) Error() string {
	switch e.State {
	case ApprovalExpired:
		return fmt.Sprintf("approval %s has expired", e.ID)
	case ApprovalRevoked:
		return fmt.Sprintf("approval %s was revoked", e.ID)
	default:
		return fmt.Sprintf("approval %s is already %s", e.ID, e.State)
	}
}

// Is matches ErrApprovalDecided, and ErrApprovalExpired for an expired one.
func (e *ApprovalStateError) Is(target error) bool {
	return target == ErrApprovalDecided || (target == ErrApprovalExpired && e.State == ApprovalExpired)
}

// approvalError is a sentinel with a message naming the object.
type approvalError struct {
	msg  string
	kind error
}

func (e *approvalError) Error() string { return e.msg }
func (e *approvalError) Unwrap() error { return e.kind }

func approvalNotFound(id string) error {
	return &approvalError{msg: fmt.Sprintf("approval %s not found", quoteID(id)), kind: ErrApprovalNotFound}
}

// quoteID renders an id for a message: as is when well formed, quoted and
// cut short when not (a forged id is untrusted text).
func quoteID(id string) string {
	if ValidApprovalID(id) {
		return id
	}
	if len(id) > 40 {
		id = id[:40] + "…"
	}
	return fmt.Sprintf("%q", id)
}

// Approval is one request for a human decision on one exact crossing.
type Approval struct {
	ID        string // "apr_" + 24 lowercase hex characters
	Workload  string
	SandboxID string
	Action    string // e.g. "tool.call"
	Target    string // e.g. "fs/write_file"
	// Digest is "sha256:<hex>" of the exact request (tool, canonical
	// arguments, workload), computed by the caller. The approval is good
	// for that request only.
	Digest string
	// Arguments are the exact canonical arguments shown to the approver.
	Arguments json.RawMessage
	State     string // one of the Approval… states
	Created   time.Time
	Expires   time.Time
	Decided   time.Time // zero until approved or denied
	DecidedBy string    // e.g. "cli uid 0", "console"
	Consumed  time.Time // zero until consumed
	Revoked   time.Time // zero unless revoked
	RevokedBy string    // e.g. "cli uid 0", "sandbox stopped"
	ReceiptID int64     // the receipt of the crossing that consumed it; 0 until known
}

// ApprovalFilter selects approvals; zero fields match everything. State
// is compared with the reported state (an expired pending approval
// matches ApprovalExpired, not ApprovalPending).
type ApprovalFilter struct {
	State    string
	Workload string
	Limit    int // the newest Limit, when > 0
}

const (
	approvalIDPrefix = "apr_"
	approvalIDLen    = len(approvalIDPrefix) + 24
	// maxApprovalArguments bounds what one approval stores and shows.
	maxApprovalArguments = 1 << 20
)

// ValidApprovalID reports whether id has the form of an approval id. It
// says nothing about whether the approval exists.
func ValidApprovalID(id string) bool {
	if len(id) != approvalIDLen || !strings.HasPrefix(id, approvalIDPrefix) {
		return false
	}
	for _, c := range id[len(approvalIDPrefix):] {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func newApprovalID() (string, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return approvalIDPrefix + hex.EncodeToString(b[:]), nil
}

// ValidDigest accepts "sha256:" and 64 lowercase hex characters: the
// form of every request digest an approval is bound to.
func ValidDigest(d string) bool {
	h, ok := strings.CutPrefix(d, "sha256:")
	if !ok || len(h) != 64 {
		return false
	}
	for _, c := range h {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func (s *Store) clock() time.Time {
	if s.now != nil {
		return s.now()
	}
	return time.Now()
}

const approvalColumns = `id, workload, sandbox_id, action, target, digest, arguments, state,
	created, expires, decided, decided_by, consumed, revoked, revoked_by, receipt_id`

func scanApproval(row interface{ Scan(...any) error }, now time.Time) (Approval, error) {
	var a Approval
	var args string
	var created, expires, decided, consumed, revoked int64
	if err := row.Scan(&a.ID, &a.Workload, &a.SandboxID, &a.Action, &a.Target, &a.Digest, &args, &a.State,
		&created, &expires, &decided, &a.DecidedBy, &consumed, &revoked, &a.RevokedBy, &a.ReceiptID); err != nil {
		return Approval{}, err
	}
	a.Arguments = json.RawMessage(args)
	a.Created, a.Expires = unixTime(created), unixTime(expires)
	a.Decided, a.Consumed, a.Revoked = unixTime(decided), unixTime(consumed), unixTime(revoked)
	a.State = reportedState(a.State, expires, now)
	return a, nil
}

// unixTime reads a stored time; 0 is the zero time.
func unixTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}

// reportedState turns a live state whose time has passed into expired.
func reportedState(stored string, expires int64, now time.Time) string {
	if (stored == ApprovalPending || stored == ApprovalApproved) && expires <= now.UnixNano() {
		return ApprovalExpired
	}
	return stored
}

type querier interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}

// RequestApproval asks for a human decision on a.Digest for a.Workload.
// If an unexpired pending or approved approval already exists for the same
// (Workload, Digest), it is returned unchanged: the agent retries, and
// every retry waits on the same approval. Otherwise a new pending approval
// expiring at now+ttl is stored and returned. a.ID, a.State and the times
// are ignored; Arguments must be valid JSON (nil is stored as null).
func (s *Store) RequestApproval(ctx context.Context, a Approval, ttl time.Duration) (Approval, error) {
	return s.RequestApprovalLimited(ctx, a, ttl, 0)
}

// ApprovalLimitError refuses a new approval request: its sandbox already
// has Pending requests waiting, the limit.
type ApprovalLimitError struct{ Pending, Limit int }

func (e *ApprovalLimitError) Error() string {
	return fmt.Sprintf("%d approval requests of this sandbox are already waiting (the limit is %d)", e.Pending, e.Limit)
}

// RequestApprovalLimited is RequestApproval with at most maxPending
// unexpired pending approvals of a.SandboxID (0: no limit), counted in
// the same write transaction as the insert (the store's transactions take
// the write lock up front, so SQLite serializes it with every other
// request), so that concurrent requests cannot
// all pass the count. Past the limit it fails with *ApprovalLimitError,
// unless the request already has a live approval, which is returned.
func (s *Store) RequestApprovalLimited(ctx context.Context, a Approval, ttl time.Duration, maxPending int) (Approval, error) {
	if len(a.Arguments) == 0 {
		a.Arguments = json.RawMessage("null")
	}
	switch {
	case a.Workload == "":
		return Approval{}, errors.New("request approval: empty workload")
	case a.Action == "":
		return Approval{}, errors.New("request approval: empty action")
	case !ValidDigest(a.Digest):
		return Approval{}, fmt.Errorf("request approval: digest %q is not sha256:<64 hex>", a.Digest)
	case len(a.Arguments) > maxApprovalArguments:
		return Approval{}, fmt.Errorf("request approval: arguments are %d bytes, over %d", len(a.Arguments), maxApprovalArguments)
	case !json.Valid(a.Arguments):
		return Approval{}, errors.New("request approval: arguments are not valid JSON")
	case ttl <= 0:
		return Approval{}, fmt.Errorf("request approval: ttl %v must be positive", ttl)
	}
	id, err := newApprovalID()
	if err != nil {
		return Approval{}, fmt.Errorf("request approval: %w", err)
	}
	var out Approval
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		now := s.clock()
		// Expire stale live rows first: the unique index admits one live row
		// per request.
		if _, err := tx.ExecContext(ctx, `UPDATE approvals SET state = 'expired'
			WHERE workload = ? AND digest = ? AND state IN ('pending', 'approved') AND expires <= ?`,
			a.Workload, a.Digest, now.UnixNano()); err != nil {
			return fmt.Errorf("request approval: %w", err)
		}
		out, err = scanApproval(tx.QueryRowContext(ctx, `SELECT `+approvalColumns+` FROM approvals
			WHERE workload = ? AND digest = ? AND state IN ('pending', 'approved')`, a.Workload, a.Digest), now)
		if err == nil {
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("request approval: %w", err)
		}
		if maxPending > 0 {
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM approvals WHERE sandbox_id = ? AND state = 'pending' AND expires > ?`,
				a.SandboxID, now.UnixNano()).Scan(&n); err != nil {
				return fmt.Errorf("request approval: %w", err)
			}
			if n >= maxPending {
				return &ApprovalLimitError{Pending: n, Limit: maxPending}
			}
		}
		out = Approval{ID: id, Workload: a.Workload, SandboxID: a.SandboxID, Action: a.Action, Target: a.Target,
			Digest: a.Digest, Arguments: append(json.RawMessage(nil), a.Arguments...), State: ApprovalPending,
			Created: unixTime(now.UnixNano()), Expires: unixTime(now.Add(ttl).UnixNano())}
		_, err = tx.ExecContext(ctx, `INSERT INTO approvals (id, workload, sandbox_id, action, target, digest, arguments, state, created, expires)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, out.ID, out.Workload, out.SandboxID, out.Action, out.Target, out.Digest,
			string(out.Arguments), out.State, out.Created.UnixNano(), out.Expires.UnixNano())
		if err != nil {
			return fmt.Errorf("request approval: %w", err)
		}
		return nil
	})
	return out, err
}

// ConsumeApproval uses the approval of one exact request, once: in one
// write transaction, the approved, unexpired approval for (workload,
// digest) becomes consumed and is returned. Otherwise it fails with
// ErrApprovalPending (a decision is awaited; the pending approval is
// returned), ErrApprovalDenied (a human denied this request and the denial
// has not expired; the denied approval is returned), or
// ErrApprovalNotFound (nothing live: never requested, or expired, revoked
// or already consumed — a consumed approval never authorizes again).
func (s *Store) ConsumeApproval(ctx context.Context, workload, digest string) (Approval, error) {
	return s.useApproval(ctx, workload, digest, false)
}

// HoldApproval is ConsumeApproval for an approval that covers every
// identical crossing of its sandbox for the sandbox's life (an egress
// connection under @approval_scope("sandbox")): the approved approval
// stays approved, its expiry is lifted (it ends when revoked — by an
// operator, or when its sandbox stops), and it is returned. Refusals are
// ConsumeApproval's.
func (s *Store) HoldApproval(ctx context.Context, workload, digest string) (Approval, error) {
	return s.useApproval(ctx, workload, digest, true)
}

// HeldApprovalExpires is the expiry of a held approval: it ends when it
// is revoked, never by time.
var HeldApprovalExpires = time.Unix(0, math.MaxInt64).UTC()

func (s *Store) useApproval(ctx context.Context, workload, digest string, hold bool) (Approval, error) {
	var out Approval
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		now := s.clock()
		n := now.UnixNano()
		var err error
		use := `UPDATE approvals SET state = 'consumed', consumed = ?`
		if hold {
			use = `UPDATE approvals SET expires = ?`
			n = math.MaxInt64
		}
		out, err = scanApproval(tx.QueryRowContext(ctx, use+`
			WHERE workload = ? AND digest = ? AND state = 'approved' AND expires > ?
			RETURNING `+approvalColumns, n, workload, digest, now.UnixNano()), now)
		if err == nil {
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("consume approval: %w", err)
		}
		// Nothing to consume: say why, from the newest unexpired approval
		// that is pending or denied.
		out, err = scanApproval(tx.QueryRowContext(ctx, `SELECT `+approvalColumns+` FROM approvals
			WHERE workload = ? AND digest = ? AND state IN ('pending', 'denied') AND expires > ?
			ORDER BY (state = 'pending') DESC, created DESC LIMIT 1`, workload, digest, now.UnixNano()), now)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			out = Approval{}
			return &approvalError{msg: "no approval for this request", kind: ErrApprovalNotFound}
		case err != nil:
			return fmt.Errorf("consume approval: %w", err)
		case out.State == ApprovalPending:
			return &approvalError{msg: fmt.Sprintf("approval %s is pending", out.ID), kind: ErrApprovalPending}
		default:
			return &approvalError{msg: fmt.Sprintf("approval %s was denied by %s", out.ID, out.DecidedBy), kind: ErrApprovalDenied}
		}
	})
	return out, err
}

// DecideApproval approves or denies a pending, unexpired approval and
// records who did (e.g. "cli uid 0", "console"). An unknown or malformed id
// fails with ErrApprovalNotFound; an approval in any other state with an
// *ApprovalStateError (ErrApprovalDecided).
func (s *Store) DecideApproval(ctx context.Context, id string, approve bool, by string) (Approval, error) {
	if !ValidApprovalID(id) {
		return Approval{}, approvalNotFound(id)
	}
	state := ApprovalDenied
	if approve {
		state = ApprovalApproved
	}
	var out Approval
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		now := s.clock()
		var err error
		out, err = scanApproval(tx.QueryRowContext(ctx, `UPDATE approvals SET state = ?, decided = ?, decided_by = ?
			WHERE id = ? AND state = 'pending' AND expires > ? RETURNING `+approvalColumns,
			state, now.UnixNano(), by, id, now.UnixNano()), now)
		if errors.Is(err, sql.ErrNoRows) {
			return refuse(ctx, tx, id, now)
		}
		if err != nil {
			return fmt.Errorf("decide approval %s: %w", id, err)
		}
		return nil
	})
	if err != nil {
		return Approval{}, err
	}
	return out, nil
}

// refuse explains why approval id was not changed: it does not exist, or
// its state.
func refuse(ctx context.Context, q querier, id string, now time.Time) error {
	a, err := scanApproval(q.QueryRowContext(ctx, `SELECT `+approvalColumns+` FROM approvals WHERE id = ?`, id), now)
	if errors.Is(err, sql.ErrNoRows) {
		return approvalNotFound(id)
	}
	if err != nil {
		return fmt.Errorf("read approval %s: %w", id, err)
	}
	return &ApprovalStateError{ID: id, State: a.State}
}

// RevokeApproval withdraws one pending or approved, unexpired approval: it
// will never authorize anything. Other states fail as in DecideApproval.
func (s *Store) RevokeApproval(ctx context.Context, id, by string) (Approval, error) {
	if !ValidApprovalID(id) {
		return Approval{}, approvalNotFound(id)
	}
	var out Approval
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		now := s.clock()
		var err error
		out, err = scanApproval(tx.QueryRowContext(ctx, `UPDATE approvals SET state = 'revoked', revoked = ?, revoked_by = ?
			WHERE id = ? AND state IN ('pending', 'approved') AND expires > ? RETURNING `+approvalColumns,
			now.UnixNano(), by, id, now.UnixNano()), now)
		if errors.Is(err, sql.ErrNoRows) {
			return refuse(ctx, tx, id, now)
		}
		if err != nil {
			return fmt.Errorf("revoke approval %s: %w", id, err)
		}
		return nil
	})
	if err != nil {
		return Approval{}, err
	}
	return out, nil
}

// RevokeApprovals revokes every pending or approved, unexpired approval of
// a sandbox (it stopped: nothing it asked for may run later) and returns
// how many. Its expired live approvals are marked expired.
func (s *Store) RevokeApprovals(ctx context.Context, sandboxID string) (int, error) {
	var n int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		now := s.clock().UnixNano()
		if _, err := tx.ExecContext(ctx, `UPDATE approvals SET state = 'expired'
			WHERE sandbox_id = ? AND state IN ('pending', 'approved') AND expires <= ?`, sandboxID, now); err != nil {
			return fmt.Errorf("revoke approvals of %s: %w", sandboxID, err)
		}
		res, err := tx.ExecContext(ctx, `UPDATE approvals SET state = 'revoked', revoked = ?, revoked_by = 'sandbox stopped'
			WHERE sandbox_id = ? AND state IN ('pending', 'approved')`, now, sandboxID)
		if err != nil {
			return fmt.Errorf("revoke approvals of %s: %w", sandboxID, err)
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}

// SetApprovalReceipt records the receipt of the crossing that consumed
// approval id. It only fills an empty receipt id of a consumed approval.
func (s *Store) SetApprovalReceipt(ctx context.Context, id string, receiptID int64) error {
	if !ValidApprovalID(id) {
		return approvalNotFound(id)
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE approvals SET receipt_id = ? WHERE id = ? AND state = 'consumed' AND receipt_id = 0`, receiptID, id)
		if err != nil {
			return fmt.Errorf("set receipt of approval %s: %w", id, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			if err := refuse(ctx, tx, id, s.clock()); !errors.Is(err, ErrApprovalDecided) {
				return err
			}
			return fmt.Errorf("set receipt of approval %s: not consumed, or receipt already set", id)
		}
		return nil
	})
}

// Approval returns one approval. An unknown or malformed id fails with
// ErrApprovalNotFound.
func (s *Store) Approval(ctx context.Context, id string) (Approval, error) {
	if !ValidApprovalID(id) {
		return Approval{}, approvalNotFound(id)
	}
	a, err := scanApproval(s.db.QueryRowContext(ctx, `SELECT `+approvalColumns+` FROM approvals WHERE id = ?`, id), s.clock())
	if errors.Is(err, sql.ErrNoRows) {
		return Approval{}, approvalNotFound(id)
	}
	if err != nil {
		return Approval{}, fmt.Errorf("read approval %s: %w", id, err)
	}
	return a, nil
}

// Approvals lists approvals, oldest first (the newest Limit when set),
// with expired ones reported as ApprovalExpired.
func (s *Store) Approvals(ctx context.Context, f ApprovalFilter) ([]Approval, error) {
	now := s.clock()
	n := now.UnixNano()
	q := `SELECT ` + approvalColumns + ` FROM approvals WHERE (? = '' OR workload = ?)`
	args := []any{f.Workload, f.Workload}
	switch f.State {
	case "":
	case ApprovalPending, ApprovalApproved:
		q += ` AND state = ? AND expires > ?`
		args = append(args, f.State, n)
	case ApprovalExpired:
		q += ` AND (state = 'expired' OR (state IN ('pending', 'approved') AND expires <= ?))`
		args = append(args, n)
	case ApprovalDenied, ApprovalConsumed, ApprovalRevoked:
		q += ` AND state = ?`
		args = append(args, f.State)
	default:
		return nil, fmt.Errorf("list approvals: unknown state %q", f.State)
	}
	q += ` ORDER BY created DESC, id DESC`
	if f.Limit > 0 {
		q += ` LIMIT ?`
		args = append(args, f.Limit)
	}
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list approvals: %w", err)
	}
	defer rows.Close()
	var out []Approval
	for rows.Next() {
		a, err := scanApproval(rows, now)
		if err != nil {
			return nil, fmt.Errorf("list approvals: %w", err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list approvals: %w", err)
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, nil
}

// PendingApprovals counts the sandbox's approval requests still waiting
// for a human (unexpired): the privileged side caps them, so an agent
// cannot bury a real request under a flood of others.
func (s *Store) PendingApprovals(ctx context.Context, sandboxID string) (int, error) {
	var n int
	err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM approvals WHERE sandbox_id = ? AND state = 'pending' AND expires > ?`,
		sandboxID, s.clock().UnixNano()).Scan(&n)
	return n, err
}
