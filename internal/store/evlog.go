package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/cordon-project/cordon/internal/crossing"
)

// The evidence log is an append-only Merkle tree (golang.org/x/mod/sumdb/tlog)
// whose leaves are receipts: leaf i's data is exactly the receipts.body text
// of the receipt log_leaves names at seq i+1. recordTx appends the leaf in the
// receipt's own transaction, so a receipt is never committed without its leaf
// and stored hashes. Checkpoints (signed tree heads) are made and checked by
// internal/evlog; the store only keeps them.

// logSchema holds the evidence log: the Merkle tree's stored hashes and
// the signed checkpoints (version 3).
//
// The triggers refuse UPDATE and DELETE on receipts and on the log: no code
// path of cordon changes evidence once written. They stop bugs, not an
// attacker who can write the database file (dropping a trigger is one
// statement); that attacker is what the signed checkpoints are for.
const logSchema = `
-- Version 3: the evidence log.
CREATE TABLE IF NOT EXISTS log_leaves (
	seq        INTEGER PRIMARY KEY,    -- leaf index + 1, no gaps: SQLite assigns max(seq) + 1
	receipt_id INTEGER NOT NULL UNIQUE -- receipts.id; its body is the leaf's data
) STRICT;
CREATE TABLE IF NOT EXISTS log_hashes (
	idx  INTEGER PRIMARY KEY,                   -- tlog stored-hash index (tlog.StoredHashIndex)
	hash BLOB    NOT NULL CHECK (length(hash) = 32)
) STRICT;
CREATE TABLE IF NOT EXISTS log_checkpoints (
	size INTEGER PRIMARY KEY, -- leaves the signed tree covers
	time INTEGER NOT NULL,    -- unix nanoseconds when it was signed
	note TEXT    NOT NULL     -- the signed note (golang.org/x/mod/sumdb/note)
) STRICT;
CREATE TRIGGER IF NOT EXISTS receipts_append_only_u BEFORE UPDATE ON receipts
	BEGIN SELECT RAISE(ABORT, 'receipts are append-only'); END;
CREATE TRIGGER IF NOT EXISTS receipts_append_only_d BEFORE DELETE ON receipts
	BEGIN SELECT RAISE(ABORT, 'receipts are append-only'); END;
CREATE TRIGGER IF NOT EXISTS log_leaves_append_only_u BEFORE UPDATE ON log_leaves
	BEGIN SELECT RAISE(ABORT, 'the evidence log is append-only'); END;
CREATE TRIGGER IF NOT EXISTS log_leaves_append_only_d BEFORE DELETE ON log_leaves
	BEGIN SELECT RAISE(ABORT, 'the evidence log is append-only'); END;
CREATE TRIGGER IF NOT EXISTS log_hashes_append_only_u BEFORE UPDATE ON log_hashes
	BEGIN SELECT RAISE(ABORT, 'the evidence log is append-only'); END;
CREATE TRIGGER IF NOT EXISTS log_hashes_append_only_d BEFORE DELETE ON log_hashes
	BEGIN SELECT RAISE(ABORT, 'the evidence log is append-only'); END;
CREATE TRIGGER IF NOT EXISTS log_checkpoints_append_only_u BEFORE UPDATE ON log_checkpoints
	BEGIN SELECT RAISE(ABORT, 'the evidence log is append-only'); END;
CREATE TRIGGER IF NOT EXISTS log_checkpoints_append_only_d BEFORE DELETE ON log_checkpoints
	BEGIN SELECT RAISE(ABORT, 'the evidence log is append-only'); END;
`

// ErrNotInLog: the receipt or leaf asked for is not in the evidence log.
var ErrNotInLog = errors.New("not in the evidence log")

// appendLeaf appends receipt receiptID, whose stored body is data, as the
// next leaf of the evidence log inside tx, with the tree hashes the leaf
// completes. It runs on every crossing: two statements, and a third to read
// the sibling hashes the leaf's new subtrees need (for half the leaves),
// unless lc holds them because this batch appended them.
func appendLeaf(ctx context.Context, tx *sql.Tx, lc *logCache, receiptID int64, data []byte) error {
	// The leaf's seq (its index + 1) is the rowid SQLite assigns: one more
	// than the largest, read off the b-tree's edge. Cheaper than reading
	// max() in a statement of our own, and just as serialized: the
	// transaction holds the write lock.
	res, err := tx.ExecContext(ctx, `INSERT INTO log_leaves (receipt_id) VALUES (?)`, receiptID)
	if err != nil {
		return fmt.Errorf("%w: append receipt %d to the evidence log: %v", crossing.ErrUnavailable, receiptID, err)
	}
	seq, err := res.LastInsertId()
	if err != nil {
		return fmt.Errorf("%w: append receipt %d to the evidence log: %v", crossing.ErrUnavailable, receiptID, err)
	}
	n := seq - 1
	var r tlog.HashReader = txHashReader{ctx: ctx, q: tx}
	if lc != nil {
		r = lc.reader(r)
	}
	hashes, err := tlog.StoredHashes(n, data, r)
	if err != nil {
		return fmt.Errorf("%w: append receipt %d to the evidence log: %v", crossing.ErrUnavailable, receiptID, err)
	}
	base := tlog.StoredHashIndex(0, n)
	args := make([]any, 0, 2*len(hashes))
	for i, h := range hashes {
		args = append(args, base+int64(i), h[:])
	}
	q := `INSERT INTO log_hashes (idx, hash) VALUES (?,?)` + strings.Repeat(`,(?,?)`, len(hashes)-1)
	if _, err := tx.ExecContext(ctx, q, args...); err != nil {
		return fmt.Errorf("%w: append receipt %d to the evidence log: %v", crossing.ErrUnavailable, receiptID, err)
	}
	lc.add(base, hashes)
	return nil
}

// logCache holds the stored hashes a batch (Tx) appended, so that the next
// leaf of the batch finds its sibling hashes in memory: consecutive leaves
// mostly need hashes their predecessors just wrote. It is valid only
// inside the batch's transaction, which holds the write lock, and must be
// reset when an operation rolls back to its savepoint. The zero value is
// empty; a nil *logCache caches nothing.
type logCache struct {
	hashes map[int64]tlog.Hash
}

// maxLogCache bounds the cache; a batch is 64 leaves (about 128 hashes).
const maxLogCache = 4096

func (c *logCache) add(base int64, hs []tlog.Hash) {
	if c == nil {
		return
	}
	if c.hashes == nil || len(c.hashes) > maxLogCache {
		c.hashes = make(map[int64]tlog.Hash)
	}
	for i, h := range hs {
		c.hashes[base+int64(i)] = h
	}
}

func (c *logCache) reset() { c.hashes = nil }

// reader reads from the cache, and what it lacks from r in one call.
func (c *logCache) reader(r tlog.HashReader) tlog.HashReader {
	return tlog.HashReaderFunc(func(indexes []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(indexes))
		var missing []int64
		for i, x := range indexes {
			h, ok := c.hashes[x]
			if !ok {
				missing = append(missing, x)
				continue
			}
			out[i] = h
		}
		if len(missing) == 0 {
			return out, nil
		}
		got, err := r.ReadHashes(missing)
		if err != nil {
			return nil, err
		}
		for i, j := 0, 0; i < len(indexes); i++ {
			if _, ok := c.hashes[indexes[i]]; !ok {
				out[i] = got[j]
				j++
			}
		}
		return out, nil
	})
}

type queryer interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
	QueryRowContext(context.Context, string, ...any) *sql.Row
}

// txHashReader is a tlog.HashReader over log_hashes; one query per call.
type txHashReader struct {
	ctx context.Context
	q   queryer
}

func (r txHashReader) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	switch len(indexes) {
	case 0:
		return nil, nil
	case 1: // the common case when appending; a single-row read is cheaper
		var b []byte
		err := r.q.QueryRowContext(r.ctx, `SELECT hash FROM log_hashes WHERE idx = ?`, indexes[0]).Scan(&b)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("read evidence log hash %d: %w", indexes[0], ErrNotInLog)
		}
		if err != nil {
			return nil, fmt.Errorf("read evidence log hash %d: %w", indexes[0], err)
		}
		if len(b) != tlog.HashSize {
			return nil, fmt.Errorf("read evidence log hash %d: %d bytes, want %d", indexes[0], len(b), tlog.HashSize)
		}
		return []tlog.Hash{tlog.Hash(b)}, nil
	}
	args := make([]any, len(indexes))
	for i, x := range indexes {
		args[i] = x
	}
	rows, err := r.q.QueryContext(r.ctx, `SELECT idx, hash FROM log_hashes WHERE idx IN (?`+strings.Repeat(`,?`, len(indexes)-1)+`)`, args...)
	if err != nil {
		return nil, fmt.Errorf("read evidence log hashes: %w", err)
	}
	defer rows.Close()
	got := make(map[int64]tlog.Hash, len(indexes))
	for rows.Next() {
		var idx int64
		var b []byte
		if err := rows.Scan(&idx, &b); err != nil {
			return nil, fmt.Errorf("read evidence log hashes: %w", err)
		}
		if len(b) != tlog.HashSize {
			return nil, fmt.Errorf("read evidence log hash %d: %d bytes, want %d", idx, len(b), tlog.HashSize)
		}
		got[idx] = tlog.Hash(b)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read evidence log hashes: %w", err)
	}
	out := make([]tlog.Hash, len(indexes))
	for i, x := range indexes {
		h, ok := got[x]
		if !ok {
			return nil, fmt.Errorf("read evidence log hash %d: %w", x, ErrNotInLog)
		}
		out[i] = h
	}
	return out, nil
}

// LogHashReader returns a tlog.HashReader over the stored hashes. Each
// ReadHashes call is one query; stored hashes never change once written, so
// reads made while other processes append stay consistent.
func (s *Store) LogHashReader(ctx context.Context) tlog.HashReader {
	return txHashReader{ctx: ctx, q: s.db}
}

// LogSize returns the number of leaves in the evidence log (the highest leaf
// index plus one).
func (s *Store) LogSize(ctx context.Context) (int64, error) {
	var n int64
	if err := s.db.QueryRowContext(ctx, `SELECT coalesce(max(seq), 0) FROM log_leaves`).Scan(&n); err != nil {
		return 0, fmt.Errorf("evidence log size: %w", err)
	}
	return n, nil
}

// LogLeaf returns the receipt at leaf idx and its body, the leaf's data.
// It fails with ErrNotInLog when there is no such leaf, or when its receipt
// is gone.
func (s *Store) LogLeaf(ctx context.Context, idx int64) (receiptID int64, body []byte, err error) {
	var b sql.NullString
	err = s.db.QueryRowContext(ctx, `SELECT l.receipt_id, r.body FROM log_leaves l LEFT JOIN receipts r ON r.id = l.receipt_id
		WHERE l.seq = ?`, idx+1).Scan(&receiptID, &b)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil, fmt.Errorf("evidence log leaf %d: %w", idx, ErrNotInLog)
	}
	if err != nil {
		return 0, nil, fmt.Errorf("evidence log leaf %d: %w", idx, err)
	}
	if !b.Valid {
		return receiptID, nil, fmt.Errorf("evidence log leaf %d: receipt %d: %w", idx, receiptID, ErrNotInLog)
	}
	return receiptID, []byte(b.String), nil
}

// LogIndex returns the leaf index of a receipt, or ErrNotInLog.
func (s *Store) LogIndex(ctx context.Context, receiptID int64) (int64, error) {
	var idx int64
	err := s.db.QueryRowContext(ctx, `SELECT seq - 1 FROM log_leaves WHERE receipt_id = ?`, receiptID).Scan(&idx)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("receipt %d: %w", receiptID, ErrNotInLog)
	}
	if err != nil {
		return 0, fmt.Errorf("receipt %d: leaf index: %w", receiptID, err)
	}
	return idx, nil
}

// LogLeaf is one leaf as stored, with its receipt's body.
type LogLeaf struct {
	Index     int64
	ReceiptID int64
	Body      []byte // the leaf's data; nil when the receipt is gone
	Missing   bool   // no receipt has ReceiptID
}

// LogLeaves returns the stored leaves with index in [from, to), in order. A
// leaf row that is not stored is simply absent: callers checking the log
// look for gaps.
func (s *Store) LogLeaves(ctx context.Context, from, to int64) ([]LogLeaf, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT l.seq - 1, l.receipt_id, r.body FROM log_leaves l LEFT JOIN receipts r ON r.id = l.receipt_id
		WHERE l.seq > ? AND l.seq <= ? ORDER BY l.seq`, from, to)
	if err != nil {
		return nil, fmt.Errorf("evidence log leaves [%d, %d): %w", from, to, err)
	}
	defer rows.Close()
	var out []LogLeaf
	for rows.Next() {
		var l LogLeaf
		var b sql.NullString
		if err := rows.Scan(&l.Index, &l.ReceiptID, &b); err != nil {
			return nil, fmt.Errorf("evidence log leaves [%d, %d): %w", from, to, err)
		}
		if l.Missing = !b.Valid; !l.Missing {
			l.Body = []byte(b.String)
		}
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("evidence log leaves [%d, %d): %w", from, to, err)
	}
	return out, nil
}

// LogHashes returns the stored hashes with stored-hash index in [from, to),
// as stored (a tampered value may not be 32 bytes long). A missing index is
// absent from the map.
func (s *Store) LogHashes(ctx context.Context, from, to int64) (map[int64][]byte, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT idx, hash FROM log_hashes WHERE idx >= ? AND idx < ?`, from, to)
	if err != nil {
		return nil, fmt.Errorf("evidence log hashes [%d, %d): %w", from, to, err)
	}
	defer rows.Close()
	out := make(map[int64][]byte)
	for rows.Next() {
		var idx int64
		var b []byte
		if err := rows.Scan(&idx, &b); err != nil {
			return nil, fmt.Errorf("evidence log hashes [%d, %d): %w", from, to, err)
		}
		out[idx] = b
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("evidence log hashes [%d, %d): %w", from, to, err)
	}
	return out, nil
}

// LogStats are counts a checker compares with what the log's size implies,
// all read at one instant.
type LogStats struct {
	Size          int64 // the highest leaf index plus one (LogSize)
	Leaves        int64 // leaf rows
	Hashes        int64 // stored-hash rows
	MaxHash       int64 // highest stored-hash index; -1 when none
	Receipts      int64 // receipt rows
	Unlogged      []int64
	DuplicateLeaf []int64 // receipt ids named by more than one leaf
}

// maxListed bounds the ids LogStats lists.
const maxListed = 1000

// LogStats counts the log's rows and lists (the first 1000) receipts that
// no leaf names and receipts named by several leaves. It reads every table
// once: for checking, not for the hot path.
func (s *Store) LogStats(ctx context.Context) (LogStats, error) {
	var st LogStats
	err := s.db.QueryRowContext(ctx, `SELECT (SELECT coalesce(max(seq), 0) FROM log_leaves), (SELECT count(*) FROM log_leaves),
		(SELECT count(*) FROM log_hashes), (SELECT coalesce(max(idx), -1) FROM log_hashes), (SELECT count(*) FROM receipts)`).
		Scan(&st.Size, &st.Leaves, &st.Hashes, &st.MaxHash, &st.Receipts)
	if err != nil {
		return LogStats{}, fmt.Errorf("evidence log stats: %w", err)
	}
	list := func(q string) ([]int64, error) {
		rows, err := s.db.QueryContext(ctx, q, maxListed)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		var ids []int64
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				return nil, err
			}
			ids = append(ids, id)
		}
		return ids, rows.Err()
	}
	if st.Unlogged, err = list(`SELECT id FROM receipts WHERE id NOT IN (SELECT receipt_id FROM log_leaves) ORDER BY id LIMIT ?`); err != nil {
		return LogStats{}, fmt.Errorf("evidence log stats: receipts not in the log: %w", err)
	}
	if st.DuplicateLeaf, err = list(`SELECT receipt_id FROM log_leaves GROUP BY receipt_id HAVING count(*) > 1 ORDER BY receipt_id LIMIT ?`); err != nil {
		return LogStats{}, fmt.Errorf("evidence log stats: duplicate leaves: %w", err)
	}
	return st, nil
}

// Checkpoint is a signed tree head as stored. The store does not check
// it: internal/evlog makes and verifies checkpoints.
type Checkpoint struct {
	Size int64     // leaves it covers
	Time time.Time // when it was signed
	Note []byte    // the signed note
}

// SaveCheckpoint stores a checkpoint. A checkpoint of the same size is
// already stored when another process signed that tree first; the first
// one is kept and saved reports false.
func (s *Store) SaveCheckpoint(ctx context.Context, c Checkpoint) (saved bool, err error) {
	res, err := s.db.ExecContext(ctx, `INSERT INTO log_checkpoints (size, time, note) VALUES (?,?,?) ON CONFLICT (size) DO NOTHING`,
		c.Size, c.Time.UnixNano(), string(c.Note))
	if err != nil {
		return false, fmt.Errorf("save checkpoint of size %d: %w", c.Size, err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// Checkpoints returns up to limit stored checkpoints (all when limit <= 0)
// whose size is above after, smallest first. Pass after = -1 to start at
// the beginning.
func (s *Store) Checkpoints(ctx context.Context, after int64, limit int) ([]Checkpoint, error) {
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	rows, err := s.db.QueryContext(ctx, `SELECT size, time, note FROM log_checkpoints WHERE size > ? ORDER BY size LIMIT ?`, after, limit)
	if err != nil {
		return nil, fmt.Errorf("checkpoints: %w", err)
	}
	defer rows.Close()
	var out []Checkpoint
	for rows.Next() {
		c, err := scanCheckpoint(rows)
		if err != nil {
			return nil, fmt.Errorf("checkpoints: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("checkpoints: %w", err)
	}
	return out, nil
}

// LatestCheckpoint returns the stored checkpoint of the largest size; ok is
// false when there is none.
func (s *Store) LatestCheckpoint(ctx context.Context) (c Checkpoint, ok bool, err error) {
	c, err = scanCheckpoint(s.db.QueryRowContext(ctx, `SELECT size, time, note FROM log_checkpoints ORDER BY size DESC LIMIT 1`))
	if errors.Is(err, sql.ErrNoRows) {
		return Checkpoint{}, false, nil
	}
	if err != nil {
		return Checkpoint{}, false, fmt.Errorf("latest checkpoint: %w", err)
	}
	return c, true, nil
}

func scanCheckpoint(row interface{ Scan(...any) error }) (Checkpoint, error) {
	var c Checkpoint
	var t int64
	var note string
	if err := row.Scan(&c.Size, &t, &note); err != nil {
		return Checkpoint{}, err
	}
	c.Time, c.Note = time.Unix(0, t).UTC(), []byte(note)
	return c, nil
}
