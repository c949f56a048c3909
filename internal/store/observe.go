package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"

	"github.com/cordon-project/cordon/internal/crossing"
)

// ObserveReceipts sets fn to be told every receipt this Store records,
// once the transaction that wrote it has committed (never a receipt that
// was rolled back), with its id set. fn runs on the recording goroutine,
// after the commit and outside the transaction: it must be quick and must
// not call the store. A panic in fn is contained. nil removes it. Set it
// before the store is in use (the daemon's metrics do).
func (s *Store) ObserveReceipts(fn func(crossing.Receipt)) {
	if fn == nil {
		s.obs.Store(nil)
		return
	}
	s.obs.Store(&fn)
}

// txReceipts are the receipts one transaction recorded, told to the
// observer after it commits. A transaction is used by one goroutine at a
// time, so it needs no lock of its own.
type txReceipts struct {
	fn  func(crossing.Receipt)
	tx  *sql.Tx
	rcs []crossing.Receipt
}

// pending holds the txReceipts of the transactions in flight under an
// observer, by transaction: recordIn is reached from many call paths that
// carry only the *sql.Tx.
var pending sync.Map // *sql.Tx → *txReceipts

// watch starts collecting tx's receipts when an observer is set (nil
// otherwise: nothing is collected).
func (s *Store) watch(tx *sql.Tx) *txReceipts {
	p := s.obs.Load()
	if p == nil {
		return nil
	}
	w := &txReceipts{fn: *p, tx: tx}
	pending.Store(tx, w)
	return w
}

// done stops collecting (the transaction ended either way).
func (w *txReceipts) done() { pending.Delete(w.tx) }

// committed tells the observer the receipts of a committed transaction.
func (w *txReceipts) committed() {
	if w == nil {
		return
	}
	pending.Delete(w.tx)
	for _, rc := range w.rcs {
		w.tell(rc)
	}
}

func (w *txReceipts) tell(rc crossing.Receipt) {
	defer func() { _ = recover() }() // an observer's bug never fails a crossing
	w.fn(rc)
}

// recorded notes a receipt written in tx.
func recorded(tx *sql.Tx, rc crossing.Receipt) {
	if v, ok := pending.Load(tx); ok {
		w := v.(*txReceipts)
		w.rcs = append(w.rcs, rc)
	}
}

// receiptsMark and receiptsRollback keep a batch's savepoints honest: the
// receipts of an operation rolled back to its savepoint are dropped.
func receiptsMark(tx *sql.Tx) int {
	if v, ok := pending.Load(tx); ok {
		return len(v.(*txReceipts).rcs)
	}
	return 0
}

func receiptsRollback(tx *sql.Tx, mark int) {
	if v, ok := pending.Load(tx); ok {
		w := v.(*txReceipts)
		w.rcs = w.rcs[:mark]
	}
}

// sideDB is a second connection to the store's file, opened at first
// use, for EvidenceLogBytes alone: its dbstat walk visits every page of
// the log, and on the Store's one connection every crossing's receipt
// would queue behind it (a metrics scrape, which any local user can make,
// would stall every sandbox for as long as the walk ran). In WAL mode a
// reader beside the writer neither waits for it nor holds it up.
type sideDB struct {
	mu     sync.Mutex
	db     *sql.DB
	closed bool
}

func (s *Store) sideConn() (*sql.DB, error) {
	s.side.mu.Lock()
	defer s.side.mu.Unlock()
	if s.side.closed {
		return nil, errors.New("store closed")
	}
	if s.side.db == nil {
		db, err := sql.Open("sqlite", dsn(s.path))
		if err != nil {
			return nil, err
		}
		db.SetMaxOpenConns(1)
		s.side.db = db
	}
	return s.side.db, nil
}

func (d *sideDB) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	if d.db != nil {
		_ = d.db.Close()
	}
}

// EvidenceLogBytes is the space the evidence log takes in the database
// file: the pages of the receipts (the leaves' data), log_leaves,
// log_hashes and log_checkpoints tables and their indexes, as SQLite's
// dbstat reports them, as committed. It visits each of those pages: call
// it rarely (the metrics cache it). It runs on a connection of its own
// (sideDB), never the one the crossings record on.
func (s *Store) EvidenceLogBytes(ctx context.Context) (int64, error) {
	db, err := s.sideConn()
	if err != nil {
		return 0, fmt.Errorf("evidence log bytes: %w", err)
	}
	var n int64
	err = db.QueryRowContext(ctx, `SELECT coalesce(sum(pgsize), 0) FROM dbstat
		WHERE name IN ('receipts', 'receipts_workload', 'log_leaves', 'log_hashes', 'log_checkpoints')
		OR name LIKE 'sqlite_autoindex_log_%'`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("evidence log bytes: %w", err)
	}
	return n, nil
}
