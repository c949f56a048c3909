package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"modernc.org/sqlite" // registers the "sqlite" driver; pure Go, no cgo
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/cordon-project/cordon/internal/crossing"
)

// Sentinel errors. Inspect them with errors.Is.
var (
	// ErrPoolExhausted: every slot of the pool is leased. The concrete error
	// is an *ExhaustedError carrying the counts.
	ErrPoolExhausted = errors.New("uid/gid lease pool exhausted")
	// ErrNotFound: no record has the given sandbox id.
	ErrNotFound = errors.New("sandbox record not found")
	// ErrExists: Begin was given a sandbox id that already has a record.
	ErrExists = errors.New("sandbox record already exists")
	// ErrSchemaVersion: the database was written by an incompatible cordon.
	ErrSchemaVersion = errors.New("store schema version mismatch")
	// ErrUnsupported: the operation is not available on this platform.
	ErrUnsupported = errors.New("store: unsupported on this platform")
)

// ExhaustedError reports a full pool. It matches ErrPoolExhausted.
type ExhaustedError struct {
	InUse uint32 // slots of the pool covered by live leases
	Slots uint32 // slots in the pool
}

func (e *ExhaustedError) Error() string {
	return fmt.Sprintf("%v: %d of %d slots in use", ErrPoolExhausted, e.InUse, e.Slots)
}

func (e *ExhaustedError) Unwrap() error { return ErrPoolExhausted }

// Sandbox kinds.
const (
	KindRun    = "run"    // a standalone `cordon run`
	KindDaemon = "daemon" // a sandbox owned by `cordon daemon`
)

// Sandbox lifecycle states, in order.
const (
	StateProvisioning = "provisioning"
	StateRunning      = "running"
	StateStopping     = "stopping"
)

// Owner identifies the cordon process responsible for a sandbox in a way that
// survives pid reuse. See Self and Alive.
type Owner struct {
	PID       int
	StartTime uint64 // field 22 of /proc/PID/stat (clock ticks since boot)
	BootID    string // /proc/sys/kernel/random/boot_id
}

// Pool is the block of host ids leases are cut from: lease i covers
// [Base+i*Size, Base+(i+1)*Size) for UIDs and GIDs alike.
type Pool struct {
	Base  uint32
	Size  uint32
	Slots uint32
}

// DefaultPool is 4096 slots of 65536 ids starting at 2^30, far above the
// ranges useradd and subuid tooling hand out by default.
var DefaultPool = Pool{Base: 0x40000000, Size: 65536, Slots: 4096}

// Lease is one slot of the pool. UID == GID == Base+Slot*Size; the sandbox's
// user namespace maps its ids 0..Size-1 onto [UID, UID+Size).
type Lease struct {
	Slot uint32
	UID  uint32
	GID  uint32
	Size uint32
}

// Record is the write-ahead record of one sandbox.
type Record struct {
	ID        string // sandbox id
	Kind      string // KindRun or KindDaemon
	Workload  string
	Owner     Owner
	Lease     Lease    // filled by Begin
	State     string   // StateProvisioning, StateRunning or StateStopping
	Resources []string // host resources created for it, in creation order; nil when none
	Created   time.Time
}

// Store is an open cordon.db. It is safe for concurrent use, and several
// processes may hold the same database open at once.
type Store struct {
	db   *sql.DB
	pool Pool
	now  func() time.Time                       // nil: time.Now; tests set a clock (approvals.go)
	obs  atomic.Pointer[func(crossing.Receipt)] // receipt observer (observe.go)
	path string                                 // the database file
	side sideDB                                 // second connection for EvidenceLogBytes (observe.go)
}

// hostFiles names the host databases a pool must not collide with. Tests
// substitute temporary files.
type hostFiles struct {
	subuid, subgid, passwd, group string
}

var systemHostFiles = hostFiles{
	subuid: "/etc/subuid",
	subgid: "/etc/subgid",
	passwd: "/etc/passwd",
	group:  "/etc/group",
}

const (
	dbName        = "cordon.db"
	schemaVersion = 9

	// busyTimeout bounds how long one statement waits for another process's
	// write transaction. Write transactions here last well under a
	// millisecond, so reaching it means something is wedged.
	busyTimeout = 5 * time.Second
)

// schema is applied under BEGIN IMMEDIATE when user_version is below
// schemaVersion, followed by the fragments of versions 3 and 4 (logSchema,
// approvalSchema, toolCallSchema, each beside the code that uses it);
// every statement is idempotent, so applying them to an older database
// adds the newer tables.
const schema = `
CREATE TABLE IF NOT EXISTS sandboxes (
	id          TEXT    NOT NULL PRIMARY KEY,
	kind        TEXT    NOT NULL,
	workload    TEXT    NOT NULL,
	owner_pid   INTEGER NOT NULL,
	owner_start INTEGER NOT NULL, -- uint64 stored as its int64 bit pattern
	owner_boot  TEXT    NOT NULL,
	slot        INTEGER NOT NULL,
	uid         INTEGER NOT NULL UNIQUE, -- last line of defence against a shared lease
	gid         INTEGER NOT NULL,
	size        INTEGER NOT NULL CHECK (size > 0),
	state       TEXT    NOT NULL CHECK (state IN ('provisioning', 'running', 'stopping')),
	resources   TEXT    NOT NULL DEFAULT '[]' CHECK (json_valid(resources) AND json_type(resources) = 'array'),
	created     INTEGER NOT NULL -- unix nanoseconds
) STRICT;

-- Version 2: budgets and receipts (the gateway's authority channel).
CREATE TABLE IF NOT EXISTS budget_usage (
	workload      TEXT    NOT NULL,
	window_start  INTEGER NOT NULL, -- unix seconds; 0 when budgets have no window
	requests      INTEGER NOT NULL DEFAULT 0,
	input_tokens  INTEGER NOT NULL DEFAULT 0,
	output_tokens INTEGER NOT NULL DEFAULT 0,
	bytes         INTEGER NOT NULL DEFAULT 0,
	egress_bytes  INTEGER NOT NULL DEFAULT 0,
	connections   INTEGER NOT NULL DEFAULT 0,
	ingress_connections INTEGER NOT NULL DEFAULT 0, -- version 7
	ingress_bytes       INTEGER NOT NULL DEFAULT 0, -- version 7
	PRIMARY KEY (workload, window_start)
) STRICT;
CREATE TABLE IF NOT EXISTS reservations (
	id            INTEGER PRIMARY KEY,
	workload      TEXT    NOT NULL,
	sandbox_id    TEXT    NOT NULL,
	broker        TEXT    NOT NULL,
	window_start  INTEGER NOT NULL,
	requests      INTEGER NOT NULL,
	input_tokens  INTEGER NOT NULL,
	output_tokens INTEGER NOT NULL,
	bytes         INTEGER NOT NULL,
	egress_bytes  INTEGER NOT NULL,
	connections   INTEGER NOT NULL,
	streams       INTEGER NOT NULL,
	created       INTEGER NOT NULL,
	ingress_connections INTEGER NOT NULL DEFAULT 0, -- version 7
	ingress_bytes       INTEGER NOT NULL DEFAULT 0  -- version 7
) STRICT;
CREATE INDEX IF NOT EXISTS reservations_workload ON reservations (workload);
CREATE TABLE IF NOT EXISTS receipts (
	id        INTEGER PRIMARY KEY,
	time      INTEGER NOT NULL, -- unix nanoseconds
	workload  TEXT    NOT NULL,
	sandbox_id TEXT   NOT NULL,
	broker    TEXT    NOT NULL,
	decision  TEXT    NOT NULL,
	body      TEXT    NOT NULL CHECK (json_valid(body))
) STRICT;
CREATE INDEX IF NOT EXISTS receipts_workload ON receipts (workload, id);
-- Version 8: cordon receipts --decision and --since filter in the store.
CREATE INDEX IF NOT EXISTS receipts_decision ON receipts (decision, id);
CREATE INDEX IF NOT EXISTS receipts_time ON receipts (time);
`

// Open opens (creating if needed) stateDir/cordon.db for the given pool.
// stateDir is created with mode 0700 and the database with 0600; both must be
// owned by the caller and writable by nobody else. Open refuses a pool that
// collides with the host's id databases (see the package comment).
func Open(stateDir string, pool Pool) (*Store, error) {
	return open(stateDir, pool, systemHostFiles)
}

func open(stateDir string, pool Pool, host hostFiles) (*Store, error) {
	if err := pool.validate(); err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	if err := pool.checkHost(host); err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	dir, err := filepath.Abs(stateDir)
	if err != nil {
		return nil, fmt.Errorf("open store in %s: %w", stateDir, err)
	}
	if err := prepareDir(dir); err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	path := filepath.Join(dir, dbName)
	if err := prepareFile(path); err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	db, err := sql.Open("sqlite", dsn(path))
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	// One connection per Store: goroutines of one process queue in
	// database/sql instead of polling SQLite's busy handler, and Open pays for
	// one connection setup only. Other processes still serialize through
	// SQLite's file locks.
	db.SetMaxOpenConns(1)
	s := &Store{db: db, pool: pool, path: path}
	// The first connection to a new database switches it to WAL, which
	// takes an exclusive lock without SQLite's busy handler: another process
	// opening the same new database then gets SQLITE_BUSY at once. Retry.
	err = s.migrate(context.Background())
	for deadline := time.Now().Add(busyTimeout); isBusy(err) && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
		err = s.migrate(context.Background())
	}
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	return s, nil
}

// isBusy reports whether err is SQLITE_BUSY (any extended code).
func isBusy(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY
}

// dsn builds a file: URI so that any byte of path (even '?' or '#') is
// escaped rather than read as the start of the query.
func dsn(path string) string {
	q := "_pragma=" + url.QueryEscape(fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds())) + // first: the pragmas below may wait for locks
		"&_pragma=" + url.QueryEscape("journal_mode(WAL)") +
		"&_pragma=" + url.QueryEscape("synchronous(NORMAL)") + // durable against SIGKILL, not power loss; see doc.go
		"&_txlock=immediate" // every transaction takes the write lock up front
	u := url.URL{Scheme: "file", Path: path, RawQuery: q}
	return u.String()
}

// prepareDir creates dir (0700) and checks that nobody but the caller can
// write to it: whoever can replace cordon.db can forge leases.
func prepareDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create state dir %s: %w", dir, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("stat state dir %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("state dir %s: not a directory", dir)
	}
	return checkPrivate(dir, fi)
}

// prepareFile creates the database file with mode 0600 before SQLite opens
// it, so it never exists with wider permissions; SQLite gives the -wal and
// -shm files the database file's mode.
func prepareFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("create database %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat database %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("database %s: not a regular file", path)
	}
	return checkPrivate(path, fi)
}

// checkPrivate refuses a file or directory owned by another user or writable
// by group or others.
func checkPrivate(path string, fi os.FileInfo) error {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		if euid := os.Geteuid(); int(st.Uid) != euid {
			return fmt.Errorf("%s is owned by uid %d, not %d", path, st.Uid, euid)
		}
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("%s has mode %#o: writable by group or others", path, perm)
	}
	return nil
}

// checkVersion reports whether the schema is already current (done), or
// an error for a version this cordon does not understand; 0 means empty.
func checkVersion(v int) (done bool, err error) {
	switch v {
	case schemaVersion:
		return true, nil
	case 0, 1, 2, 3, 4, 5, 6, 7, 8: // 3: written while the version-3 fragments were still empty; 5 adds the daemon's and the state broker's tables; 6 the daemon's volumes; 7 the ingress budget columns; 8 the receipts' decision and time indexes; 9 the attestations (attest.go)
		return false, nil
	default:
		return false, fmt.Errorf("%w: database has version %d, this cordon understands %d", ErrSchemaVersion, v, schemaVersion)
	}
}

// migrate creates the schema on a fresh database and refuses one written with
// another schema version. The common case is a single PRAGMA read.
func (s *Store) migrate(ctx context.Context) error {
	var v int
	if err := s.db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if done, err := checkVersion(v); done || err != nil {
		return err
	}

	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("create schema: %w", err)
	}
	defer tx.Rollback()
	// Another process may have created the schema since the read above.
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if done, err := checkVersion(v); done || err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, schema+logSchema+approvalSchema+toolCallSchema+daemonSchema+stateSchema+attestSchema); err != nil {
		return fmt.Errorf("create schema: %w", err)
	}
	if err := addColumns(ctx, tx, version7Columns); err != nil {
		return fmt.Errorf("create schema: %w", err)
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", schemaVersion)); err != nil {
		return fmt.Errorf("set schema version: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("create schema: %w", err)
	}
	return nil
}

// version7Columns are the columns version 7 adds to tables an older
// database already has (the ingress budgets): table, column, definition.
var version7Columns = [][3]string{
	{"budget_usage", "ingress_connections", "INTEGER NOT NULL DEFAULT 0"},
	{"budget_usage", "ingress_bytes", "INTEGER NOT NULL DEFAULT 0"},
	{"reservations", "ingress_connections", "INTEGER NOT NULL DEFAULT 0"},
	{"reservations", "ingress_bytes", "INTEGER NOT NULL DEFAULT 0"},
}

// addColumns adds each column its table does not have yet (ALTER TABLE
// ADD COLUMN is not idempotent; CREATE TABLE IF NOT EXISTS leaves an
// older table as it was).
func addColumns(ctx context.Context, tx *sql.Tx, cols [][3]string) error {
	for _, c := range cols {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info(?) WHERE name = ?`, c[0], c[1]).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			continue
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("ALTER TABLE %s ADD COLUMN %s %s", c[0], c[1], c[2])); err != nil {
			return err
		}
	}
	return nil
}

// Close closes the database. Records and leases stay in it.
func (s *Store) Close() error {
	s.side.close()
	return s.db.Close()
}
