package store

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/cordon-project/cordon/internal/crossing"
)

// stateSchema holds the state broker's entries (version 5): a workload's
// durable state ("Mind"), scoped by tenant, workload and purpose. Every
// query names the whole scope, so an entry of another scope cannot be
// addressed at all: to a reader it is the same as no entry.
//
// state_scopes keeps each scope's last version — versions increase
// within a scope and are never reused, even after a delete or a reset, so
// a stale version can never match a later entry — and what the scope
// holds, kept by triggers on every insert, update and delete of an entry
// (whichever code path makes it), so the quota check reads one row.
const stateSchema = `
CREATE TABLE IF NOT EXISTS state_scopes (
	tenant       TEXT    NOT NULL,
	workload     TEXT    NOT NULL,
	purpose      TEXT    NOT NULL,
	last_version INTEGER NOT NULL DEFAULT 0 CHECK (last_version >= 0),
	bytes        INTEGER NOT NULL DEFAULT 0 CHECK (bytes >= 0),   -- keys and values of its entries
	entries      INTEGER NOT NULL DEFAULT 0 CHECK (entries >= 0),
	PRIMARY KEY (tenant, workload, purpose)
) STRICT;
CREATE TABLE IF NOT EXISTS state_entries (
	tenant     TEXT    NOT NULL,
	workload   TEXT    NOT NULL,
	purpose    TEXT    NOT NULL,
	key        TEXT    NOT NULL,
	size       INTEGER NOT NULL CHECK (size >= 0),    -- bytes of the value
	version    INTEGER NOT NULL CHECK (version > 0),
	created    INTEGER NOT NULL,                      -- unix nanoseconds
	updated    INTEGER NOT NULL,                      -- unix nanoseconds of the last write
	expires    INTEGER NOT NULL DEFAULT 0,            -- unix nanoseconds; 0: kept until deleted
	sandbox_id TEXT    NOT NULL,                      -- provenance: the sandbox that wrote the value
	receipt_id INTEGER NOT NULL,                      -- provenance: the write's receipt
	value      BLOB    NOT NULL,
	PRIMARY KEY (tenant, workload, purpose, key)
) STRICT;
CREATE INDEX IF NOT EXISTS state_entries_expires ON state_entries (expires) WHERE expires != 0;
CREATE TRIGGER IF NOT EXISTS state_entries_usage_i AFTER INSERT ON state_entries BEGIN
	INSERT INTO state_scopes (tenant, workload, purpose, bytes, entries)
		VALUES (new.tenant, new.workload, new.purpose, length(CAST(new.key AS BLOB)) + new.size, 1)
		ON CONFLICT (tenant, workload, purpose) DO UPDATE SET bytes = bytes + excluded.bytes, entries = entries + 1;
END;
CREATE TRIGGER IF NOT EXISTS state_entries_usage_u AFTER UPDATE OF tenant, workload, purpose, key, size ON state_entries BEGIN
	UPDATE state_scopes SET bytes = bytes - (length(CAST(old.key AS BLOB)) + old.size), entries = entries - 1
		WHERE tenant = old.tenant AND workload = old.workload AND purpose = old.purpose;
	INSERT INTO state_scopes (tenant, workload, purpose, bytes, entries)
		VALUES (new.tenant, new.workload, new.purpose, length(CAST(new.key AS BLOB)) + new.size, 1)
		ON CONFLICT (tenant, workload, purpose) DO UPDATE SET bytes = bytes + excluded.bytes, entries = entries + 1;
END;
CREATE TRIGGER IF NOT EXISTS state_entries_usage_d AFTER DELETE ON state_entries BEGIN
	UPDATE state_scopes SET bytes = bytes - (length(CAST(old.key AS BLOB)) + old.size), entries = entries - 1
		WHERE tenant = old.tenant AND workload = old.workload AND purpose = old.purpose;
END;
`

// Errors of managed state.
var (
	// ErrStateNotFound: the scope has no (live) entry with the key. An
	// entry of another scope, or one past its retention, is not found.
	ErrStateNotFound = errors.New("state entry not found")
	// ErrStateStale: a write's version precondition failed; the
	// *StateStaleError carries the current version.
	ErrStateStale = errors.New("state entry version precondition failed")
	// ErrStateQuota: the write would exceed the scope's quota; the
	// *StateQuotaError says which.
	ErrStateQuota = errors.New("state quota exceeded")
)

// StateStaleError is a failed version precondition. It matches
// ErrStateStale.
type StateStaleError struct {
	Current int64 // the entry's version; 0 when it does not exist
}

func (e *StateStaleError) Error() string {
	if e.Current == 0 {
		return fmt.Sprintf("%v: the entry does not exist", ErrStateStale)
	}
	return fmt.Sprintf("%v: the entry is at version %d", ErrStateStale, e.Current)
}

func (e *StateStaleError) Unwrap() error { return ErrStateStale }

// StateQuotaError is a write refused by the scope's quota. It matches
// ErrStateQuota.
type StateQuotaError struct {
	Quota     string // "bytes" or "entries"
	Limit     int64
	Used      int64 // before the write
	Requested int64 // what the scope would hold after it
}

func (e *StateQuotaError) Error() string {
	return fmt.Sprintf("%v: %s: %d used of %d, the write needs %d", ErrStateQuota, e.Quota, e.Used, e.Limit, e.Requested)
}

func (e *StateQuotaError) Unwrap() error { return ErrStateQuota }

// StateScope is whose state an entry is: the tenant, workload and
// purpose of the sandbox that wrote it, as the privileged side knows them
// (never as the agent says).
type StateScope struct {
	Tenant   string `json:"tenant"`
	Workload string `json:"workload"`
	Purpose  string `json:"purpose"`
}

func (sc StateScope) valid() error {
	if sc.Tenant == "" || sc.Workload == "" || sc.Purpose == "" {
		return fmt.Errorf("state scope %+v: tenant, workload and purpose are required", sc)
	}
	return nil
}

// StateEntry is one entry of a scope.
type StateEntry struct {
	Key     string
	Value   []byte // nil in listings
	Size    int64  // bytes of the value
	Version int64
	Created time.Time
	Updated time.Time // time of the last write
	Expires time.Time // zero: kept until deleted or reset
	// Provenance of the value: the sandbox that wrote it and the
	// receipt of that write.
	SandboxID string
	ReceiptID int64
}

// Charged is what the entry counts against the scope's byte quota: its
// key and its value.
func (e StateEntry) Charged() int64 { return int64(len(e.Key)) + e.Size }

// StateLimits bound a scope. Zero quotas are unlimited.
type StateLimits struct {
	QuotaBytes   int64         // keys and values
	QuotaEntries int64         // entries
	Retention    time.Duration // an entry not written for this long is removed; 0: kept
}

// StateWrite is one write. At most one of IfMatch, IfExists and IfAbsent
// is set.
type StateWrite struct {
	Key       string
	Value     []byte
	SandboxID string // provenance
	IfMatch   int64  // the entry must exist at this version
	IfExists  bool   // the entry must exist
	IfAbsent  bool   // the entry must not exist
}

// StateUsage is what a scope holds.
type StateUsage struct {
	Bytes   int64 `json:"bytes"` // keys and values
	Entries int64 `json:"entries"`
}

// StateQuery selects a page of a scope's entries, in key order.
type StateQuery struct {
	Prefix string // only keys starting with it
	After  string // only keys after it
	Limit  int    // at most this many (> 0)
	// Values includes the values; MaxBytes then bounds their sum in one
	// page, except that a page always holds at least one entry.
	Values   bool
	MaxBytes int64
}

// StatePage is one page of entries.
type StatePage struct {
	Entries []StateEntry
	// More is set when entries after the last one match: ask again with
	// After set to the last key.
	More  bool
	Usage StateUsage
}

const stateCols = `key, size, version, created, updated, expires, sandbox_id, receipt_id`

func scanStateEntry(row interface{ Scan(...any) error }, value bool) (StateEntry, error) {
	var e StateEntry
	var created, updated, expires int64
	dst := []any{&e.Key, &e.Size, &e.Version, &created, &updated, &expires, &e.SandboxID, &e.ReceiptID}
	if value {
		dst = append(dst, &e.Value)
	}
	if err := row.Scan(dst...); err != nil {
		return e, err
	}
	if value && e.Value == nil {
		e.Value = []byte{}
	}
	e.Created, e.Updated, e.Expires = unixTime(created), unixTime(updated), unixTime(expires)
	return e, nil
}

// live is the SQL condition of an entry not past its retention at ?now.
const live = `(expires = 0 OR expires > ?)`

func unavailable(err error) error { return fmt.Errorf("%w: %v", crossing.ErrUnavailable, err) }

func digestOf(b []byte) string {
	h := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(h[:])
}

// GetState returns the entry key of sc, with its value. When rc is not
// nil it is recorded in the same transaction, with BytesOut and
// ResultDigest (sha256 of the value) set; it returns the receipt's id.
// An absent, expired or foreign entry is ErrStateNotFound, and nothing is
// recorded.
func (s *Store) GetState(ctx context.Context, sc StateScope, key string, rc *crossing.Receipt) (StateEntry, int64, error) {
	if err := sc.valid(); err != nil {
		return StateEntry{}, 0, err
	}
	var e StateEntry
	var rid int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		e, err = getStateIn(ctx, tx, sc, key, s.clock(), true)
		if err != nil {
			return err
		}
		if rc != nil {
			rc.BytesOut, rc.ResultDigest = e.Size, digestOf(e.Value)
			rc.Reason = appendReason(rc.Reason, fmt.Sprintf("version %d", e.Version))
			rid, err = recordTx(ctx, tx, *rc)
		}
		return err
	})
	return e, rid, err
}

func entries(n int64) string {
	if n == 1 {
		return "1 entry"
	}
	return fmt.Sprintf("%d entries", n)
}

func appendReason(r, more string) string {
	if r == "" {
		return more
	}
	return r + "; " + more
}

func getStateIn(ctx context.Context, tx *sql.Tx, sc StateScope, key string, now time.Time, value bool) (StateEntry, error) {
	cols := stateCols
	if value {
		cols += `, value`
	}
	e, err := scanStateEntry(tx.QueryRowContext(ctx, `SELECT `+cols+` FROM state_entries
		WHERE tenant = ? AND workload = ? AND purpose = ? AND key = ? AND `+live,
		sc.Tenant, sc.Workload, sc.Purpose, key, now.UnixNano()), value)
	if errors.Is(err, sql.ErrNoRows) {
		return StateEntry{}, ErrStateNotFound
	}
	if err != nil {
		return StateEntry{}, unavailable(err)
	}
	return e, nil
}

// purgeExpired removes every entry past its retention, of every scope.
func purgeExpired(ctx context.Context, tx *sql.Tx, now time.Time) (int64, error) {
	res, err := tx.ExecContext(ctx, `DELETE FROM state_entries WHERE expires != 0 AND expires <= ?`, now.UnixNano())
	if err != nil {
		return 0, unavailable(err)
	}
	return res.RowsAffected()
}

// usageIn is what sc holds. Entries past their retention count until
// they are removed: callers purge first.
func usageIn(ctx context.Context, tx *sql.Tx, sc StateScope) (StateUsage, error) {
	var u StateUsage
	err := tx.QueryRowContext(ctx, `SELECT bytes, entries FROM state_scopes WHERE tenant = ? AND workload = ? AND purpose = ?`,
		sc.Tenant, sc.Workload, sc.Purpose).Scan(&u.Bytes, &u.Entries)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return u, unavailable(err)
	}
	return u, nil
}

// PutState writes an entry of sc in one write transaction: it removes
// every entry past its retention, checks the version precondition
// (*StateStaleError), checks the quota against what the scope holds
// (*StateQuotaError), writes the entry with the scope's next version and,
// when rc is not nil, records rc with BytesIn and RequestDigest set. A
// write that does not grow the scope is allowed even over a quota (so a
// scope over a lowered quota can shrink). It returns the entry (without
// its value), whether it was created, and the receipt's id.
func (s *Store) PutState(ctx context.Context, sc StateScope, w StateWrite, lim StateLimits, rc *crossing.Receipt) (StateEntry, bool, int64, error) {
	if err := sc.valid(); err != nil {
		return StateEntry{}, false, 0, err
	}
	if w.Key == "" {
		return StateEntry{}, false, 0, errors.New("put state: empty key")
	}
	var e StateEntry
	var created bool
	var rid int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		now := s.clock()
		if _, err := purgeExpired(ctx, tx, now); err != nil {
			return err
		}
		old, err := getStateIn(ctx, tx, sc, w.Key, now, false)
		exists := err == nil
		if err != nil && !errors.Is(err, ErrStateNotFound) {
			return err
		}
		switch {
		case w.IfMatch != 0 && (!exists || old.Version != w.IfMatch),
			w.IfExists && !exists, w.IfAbsent && exists:
			return &StateStaleError{Current: old.Version}
		}
		u, err := usageIn(ctx, tx, sc)
		if err != nil {
			return err
		}
		size := int64(len(w.Value))
		newBytes := u.Bytes - old.Charged() + int64(len(w.Key)) + size
		if !exists {
			newBytes = u.Bytes + int64(len(w.Key)) + size
			if lim.QuotaEntries > 0 && u.Entries+1 > lim.QuotaEntries {
				return &StateQuotaError{Quota: "entries", Limit: lim.QuotaEntries, Used: u.Entries, Requested: u.Entries + 1}
			}
		}
		if lim.QuotaBytes > 0 && newBytes > lim.QuotaBytes && newBytes > u.Bytes {
			return &StateQuotaError{Quota: "bytes", Limit: lim.QuotaBytes, Used: u.Bytes, Requested: newBytes}
		}
		var version int64
		if err := tx.QueryRowContext(ctx, `INSERT INTO state_scopes (tenant, workload, purpose, last_version) VALUES (?,?,?,1)
			ON CONFLICT (tenant, workload, purpose) DO UPDATE SET last_version = last_version + 1 RETURNING last_version`,
			sc.Tenant, sc.Workload, sc.Purpose).Scan(&version); err != nil {
			return unavailable(err)
		}
		if rc != nil {
			rc.BytesIn, rc.RequestDigest = size, digestOf(w.Value)
			rc.Reason = appendReason(rc.Reason, fmt.Sprintf("version %d", version))
			if rid, err = recordTx(ctx, tx, *rc); err != nil {
				return err
			}
		}
		e = StateEntry{Key: w.Key, Size: size, Version: version, Created: now.UTC(), Updated: now.UTC(), SandboxID: w.SandboxID, ReceiptID: rid}
		if exists {
			e.Created = old.Created
		}
		var expires int64
		if lim.Retention > 0 {
			e.Expires = now.Add(lim.Retention).UTC()
			expires = e.Expires.UnixNano()
		}
		value := w.Value
		if value == nil {
			value = []byte{}
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO state_entries (tenant, workload, purpose, key, size, version, created, updated, expires, sandbox_id, receipt_id, value)
			VALUES (?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT (tenant, workload, purpose, key) DO UPDATE SET
			size = excluded.size, version = excluded.version, updated = excluded.updated, expires = excluded.expires,
			sandbox_id = excluded.sandbox_id, receipt_id = excluded.receipt_id, value = excluded.value`,
			sc.Tenant, sc.Workload, sc.Purpose, w.Key, size, version, e.Created.UnixNano(), now.UnixNano(), expires, w.SandboxID, rid, value)
		if err != nil {
			return unavailable(err)
		}
		created = !exists
		return nil
	})
	return e, created, rid, err
}

// DeleteState removes the entry key of sc; ifMatch, when not 0, is the
// version it must have (*StateStaleError otherwise). rc, when not nil, is
// recorded in the same transaction. An absent entry is ErrStateNotFound.
func (s *Store) DeleteState(ctx context.Context, sc StateScope, key string, ifMatch int64, rc *crossing.Receipt) (int64, error) {
	if err := sc.valid(); err != nil {
		return 0, err
	}
	var rid int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		now := s.clock()
		if _, err := purgeExpired(ctx, tx, now); err != nil {
			return err
		}
		old, err := getStateIn(ctx, tx, sc, key, now, false)
		if err != nil {
			return err
		}
		if ifMatch != 0 && old.Version != ifMatch {
			return &StateStaleError{Current: old.Version}
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM state_entries WHERE tenant = ? AND workload = ? AND purpose = ? AND key = ?`,
			sc.Tenant, sc.Workload, sc.Purpose, key); err != nil {
			return unavailable(err)
		}
		if rc != nil {
			rc.Reason = appendReason(rc.Reason, fmt.Sprintf("version %d", old.Version))
			rid, err = recordTx(ctx, tx, *rc)
		}
		return err
	})
	return rid, err
}

// ListState removes every entry past its retention, then returns a page
// of sc's entries in key order and what the scope holds. rc, when not
// nil, is recorded in the same transaction with BytesOut set to the
// values' bytes.
func (s *Store) ListState(ctx context.Context, sc StateScope, q StateQuery, rc *crossing.Receipt) (StatePage, int64, error) {
	if err := sc.valid(); err != nil {
		return StatePage{}, 0, err
	}
	if q.Limit <= 0 {
		return StatePage{}, 0, errors.New("list state: the limit must be positive")
	}
	var p StatePage
	var rid int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		now := s.clock()
		if _, err := purgeExpired(ctx, tx, now); err != nil {
			return err
		}
		var err error
		if p, err = listStateIn(ctx, tx, sc, q, now); err != nil {
			return err
		}
		if rc != nil {
			var n int64
			for _, e := range p.Entries {
				n += int64(len(e.Value))
			}
			rc.BytesOut = n
			rc.Reason = appendReason(rc.Reason, entries(int64(len(p.Entries))))
			rid, err = recordTx(ctx, tx, *rc)
		}
		return err
	})
	return p, rid, err
}

func listStateIn(ctx context.Context, tx *sql.Tx, sc StateScope, q StateQuery, now time.Time) (StatePage, error) {
	var p StatePage
	var err error
	if p.Usage, err = usageIn(ctx, tx, sc); err != nil {
		return p, err
	}
	cols := stateCols
	if q.Values {
		cols += `, value`
	}
	// Prefix match by range: keys are compared as bytes (BINARY), and
	// prefix+"\xff" sorts after every key starting with prefix (keys are
	// ASCII).
	rows, err := tx.QueryContext(ctx, `SELECT `+cols+` FROM state_entries
		WHERE tenant = ? AND workload = ? AND purpose = ? AND key > ? AND key >= ? AND key < ? AND `+live+`
		ORDER BY key LIMIT ?`, sc.Tenant, sc.Workload, sc.Purpose, q.After, q.Prefix, q.Prefix+"\xff", now.UnixNano(), q.Limit+1)
	if err != nil {
		return p, unavailable(err)
	}
	defer rows.Close()
	var bytes int64
	for rows.Next() {
		if len(p.Entries) == q.Limit {
			p.More = true
			break
		}
		e, err := scanStateEntry(rows, q.Values)
		if err != nil {
			return p, unavailable(err)
		}
		if q.Values && q.MaxBytes > 0 && len(p.Entries) > 0 && bytes+e.Size > q.MaxBytes {
			p.More = true
			break
		}
		bytes += e.Size
		p.Entries = append(p.Entries, e)
	}
	if err := rows.Err(); err != nil {
		return p, unavailable(err)
	}
	return p, nil
}

// ResetState removes every entry of sc — and nothing of any other scope —
// and records rc, when not nil, in the same transaction. The scope's
// version counter is kept, so versions are never reused. It returns how
// many entries were removed.
func (s *Store) ResetState(ctx context.Context, sc StateScope, rc *crossing.Receipt) (int64, int64, error) {
	if err := sc.valid(); err != nil {
		return 0, 0, err
	}
	var n, rid int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := purgeExpired(ctx, tx, s.clock()); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM state_entries WHERE tenant = ? AND workload = ? AND purpose = ?`,
			sc.Tenant, sc.Workload, sc.Purpose)
		if err != nil {
			return unavailable(err)
		}
		n, _ = res.RowsAffected()
		if rc != nil {
			rc.Reason = appendReason(rc.Reason, entries(n)+" removed")
			rid, err = recordTx(ctx, tx, *rc)
		}
		return err
	})
	return n, rid, err
}

// RetainState applies a scope's retention (0: keep until deleted) to the
// entries it holds — each then expires retention after its last write —
// and removes every entry past its retention, of every scope. A run calls
// it when it starts, so a changed retention applies to what is stored.
// It returns how many entries were removed.
func (s *Store) RetainState(ctx context.Context, sc StateScope, retention time.Duration) (int64, error) {
	if err := sc.valid(); err != nil {
		return 0, err
	}
	if retention < 0 {
		return 0, fmt.Errorf("retain state: negative retention %s", retention)
	}
	var n int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `UPDATE state_entries SET expires = CASE WHEN ?1 = 0 THEN 0 ELSE updated + ?1 END
			WHERE tenant = ?2 AND workload = ?3 AND purpose = ?4 AND expires != CASE WHEN ?1 = 0 THEN 0 ELSE updated + ?1 END`,
			int64(retention), sc.Tenant, sc.Workload, sc.Purpose); err != nil {
			return unavailable(err)
		}
		var err error
		n, err = purgeExpired(ctx, tx, s.clock())
		return err
	})
	return n, err
}

// PurgeExpiredState removes every entry past its retention, of every
// scope, and returns how many.
func (s *Store) PurgeExpiredState(ctx context.Context) (int64, error) {
	var n int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		n, err = purgeExpired(ctx, tx, s.clock())
		return err
	})
	return n, err
}

// StateScopeUsage is one scope and what it holds.
type StateScopeUsage struct {
	StateScope
	StateUsage
}

// StateScopes lists the scopes holding live entries, in order; zero
// fields of filter match every value.
func (s *Store) StateScopes(ctx context.Context, filter StateScope) ([]StateScopeUsage, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT tenant, workload, purpose, count(*), sum(length(CAST(key AS BLOB)) + size) FROM state_entries
		WHERE (?1 = '' OR tenant = ?1) AND (?2 = '' OR workload = ?2) AND (?3 = '' OR purpose = ?3) AND `+live+`
		GROUP BY tenant, workload, purpose ORDER BY tenant, workload, purpose`,
		filter.Tenant, filter.Workload, filter.Purpose, s.clock().UnixNano())
	if err != nil {
		return nil, unavailable(err)
	}
	defer rows.Close()
	var out []StateScopeUsage
	for rows.Next() {
		var u StateScopeUsage
		if err := rows.Scan(&u.Tenant, &u.Workload, &u.Purpose, &u.Entries, &u.Bytes); err != nil {
			return nil, unavailable(err)
		}
		out = append(out, u)
	}
	if err := rows.Err(); err != nil {
		return nil, unavailable(err)
	}
	return out, nil
}
