package store

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/crossing"
)

// TestObserveReceiptsAfterCommit: the observer is told exactly the
// receipts that committed, with their ids, on every recording path
// (RecordReceipt, SettleRecord, a batch); a transaction that fails, and
// a batch operation rolled back to its savepoint, tell it nothing.
func TestObserveReceiptsAfterCommit(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir(), testPool)
	var seen []crossing.Receipt
	s.ObserveReceipts(func(rc crossing.Receipt) { seen = append(seen, rc) })
	bud := Budget{Limits: crossing.Amount{Requests: 100}}

	id1, err := s.RecordReceipt(ctx, testReceipt(1))
	if err != nil {
		t.Fatalf("RecordReceipt = %v", err)
	}
	r, _, err := s.Reserve(ctx, ledgerID, "model", crossing.Amount{Requests: 1}, 0, bud)
	if err != nil {
		t.Fatalf("Reserve = %v", err)
	}
	rc2 := testReceipt(2)
	if _, err := s.SettleRecord(ctx, r, crossing.Amount{Requests: 1}, bud, &rc2); err != nil {
		t.Fatalf("SettleRecord = %v", err)
	}
	boom := errors.New("boom")
	var id3 int64
	if err := s.Batch(ctx, func(tx *Tx) {
		// Recorded, then rolled back to the operation's savepoint.
		if err := tx.op(func() error {
			if _, err := recordIn(ctx, tx.tx, &tx.log, testReceipt(99)); err != nil {
				return err
			}
			return boom
		}); !errors.Is(err, boom) {
			t.Errorf("op = %v, want boom", err)
		}
		id3, err = tx.Record(testReceipt(3))
		if err != nil {
			t.Errorf("Tx.Record = %v", err)
		}
	}); err != nil {
		t.Fatalf("Batch = %v", err)
	}
	// A whole transaction that fails after recording.
	if err := s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := recordTx(ctx, tx, testReceipt(98)); err != nil {
			return err
		}
		return boom
	}); !errors.Is(err, boom) {
		t.Fatalf("inTx = %v, want boom", err)
	}

	stored, err := s.Receipts(ctx, ReceiptFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 3 || len(stored) != 3 {
		t.Fatalf("observed %d receipts, stored %d; want 3 and 3", len(seen), len(stored))
	}
	for i, rc := range seen {
		if rc.ID != stored[i].ID || rc.Target != stored[i].Target {
			t.Errorf("observed[%d] = id %d %q, stored id %d %q", i, rc.ID, rc.Target, stored[i].ID, stored[i].Target)
		}
	}
	if seen[0].ID != id1 || seen[2].ID != id3 {
		t.Errorf("observed ids %d, %d; want %d, %d", seen[0].ID, seen[2].ID, id1, id3)
	}
	if seen[1].Budget.Used.Requests != 1 {
		t.Errorf("settled receipt's budget = %+v, want the state after settlement", seen[1].Budget)
	}
	n := 0
	pending.Range(func(any, any) bool { n++; return true })
	if n != 0 {
		t.Errorf("%d transactions still pending after they ended", n)
	}

	// A panicking observer never fails the crossing; nil removes it.
	s.ObserveReceipts(func(crossing.Receipt) { panic("observer bug") })
	if _, err := s.RecordReceipt(ctx, testReceipt(4)); err != nil {
		t.Fatalf("RecordReceipt with a panicking observer = %v", err)
	}
	s.ObserveReceipts(nil)
	before := len(seen)
	if _, err := s.RecordReceipt(ctx, testReceipt(5)); err != nil || len(seen) != before {
		t.Fatalf("RecordReceipt without observer = %v, observed %d more", err, len(seen)-before)
	}
}

// TestEvidenceLogBytes: the evidence log's pages grow with its receipts
// and are a part of the file.
func TestEvidenceLogBytes(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openTest(t, dir, testPool)
	empty, err := s.EvidenceLogBytes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200; i++ {
		rc := testReceipt(i)
		rc.Reason = strings.Repeat("r", 500)
		if _, err := s.RecordReceipt(ctx, rc); err != nil {
			t.Fatal(err)
		}
	}
	full, err := s.EvidenceLogBytes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if full < empty+200*500 {
		t.Errorf("evidence log bytes %d → %d after 200 receipts of > 500 bytes", empty, full)
	}
	var size int64
	if err := s.db.QueryRowContext(ctx, "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()").Scan(&size); err != nil {
		t.Fatal(err)
	}
	if full > size {
		t.Errorf("evidence log bytes %d > the database's %d", full, size)
	}
}

// BenchmarkRecordReceipt: one receipt's transaction, without and with an
// observer (the daemon's metrics) — the observer must not cost a
// crossing anything measurable next to the commit.
func BenchmarkRecordReceipt(b *testing.B) {
	for _, observed := range []bool{false, true} {
		name := "unobserved"
		if observed {
			name = "observed"
		}
		b.Run(name, func(b *testing.B) {
			s := openTest(b, b.TempDir(), testPool)
			var n int
			if observed {
				s.ObserveReceipts(func(crossing.Receipt) { n++ })
			}
			ctx := context.Background()
			rc := testReceipt(1)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := s.RecordReceipt(ctx, rc); err != nil {
					b.Fatal(err)
				}
			}
			if observed && n != b.N {
				b.Fatalf("observed %d of %d receipts", n, b.N)
			}
		})
	}
}

// TestEvidenceLogBytesBesideTheWriter: the evidence log's size is a walk
// of every log page (dbstat), done at a metrics scrape — which any local
// user can cause. It must not run on the store's one connection, where
// every crossing's receipt queues behind it: a walk of a big store would
// stall every sandbox's crossings for as long as it ran. Seen from
// outside: while a write transaction holds the store's connection, the
// walk still answers (a reader beside the WAL writer); and the size it
// reads is the committed one.
func TestEvidenceLogBytesBesideTheWriter(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir(), testPool)
	before, err := s.EvidenceLogBytes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	holding, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.Batch(ctx, func(tx *Tx) {
			rc := testReceipt(1)
			rc.Reason = strings.Repeat("r", 64<<10)
			if _, err := tx.Record(rc); err != nil {
				t.Error(err)
			}
			close(holding)
			<-release
		})
	}()
	<-holding
	wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	n, err := s.EvidenceLogBytes(wctx)
	cancel()
	close(release)
	if err != nil {
		t.Fatalf("EvidenceLogBytes while a crossing's transaction is open = %v: it waits on the store's only connection", err)
	}
	if n != before {
		t.Errorf("EvidenceLogBytes = %d while the transaction is open, want the committed %d", n, before)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	after, err := s.EvidenceLogBytes(ctx)
	if err != nil || after <= before {
		t.Errorf("EvidenceLogBytes after the commit = %d, %v; want more than %d", after, err, before)
	}
}
