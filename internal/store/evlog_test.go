package store

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/cordon-project/cordon/internal/crossing"
)

func testReceipt(i int) crossing.Receipt {
	return crossing.Receipt{
		Time:     time.Unix(1700000000, int64(i)).UTC(),
		Identity: ledgerID,
		Broker:   "model",
		Action:   "anthropic.messages",
		Target:   fmt.Sprintf("model-%d", i),
		Decision: crossing.Allow,
		Reason:   "ok",
	}
}

// memTree is an independent in-memory tlog over the given leaf data.
type memTree map[int64]tlog.Hash

func (m memTree) ReadHashes(idx []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(idx))
	for i, x := range idx {
		h, ok := m[x]
		if !ok {
			return nil, fmt.Errorf("hash %d not stored", x)
		}
		out[i] = h
	}
	return out, nil
}

func (m memTree) add(n int64, data []byte) error {
	hs, err := tlog.StoredHashes(n, data, m)
	if err != nil {
		return err
	}
	for i, h := range hs {
		m[tlog.StoredHashIndex(0, n)+int64(i)] = h
	}
	return nil
}

// bodies returns every receipt body by id, as stored.
func bodies(t *testing.T, s *Store) map[int64]string {
	t.Helper()
	rows, err := s.db.Query(`SELECT id, body FROM receipts`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[int64]string{}
	for rows.Next() {
		var id int64
		var b string
		if err := rows.Scan(&id, &b); err != nil {
			t.Fatal(err)
		}
		out[id] = b
	}
	return out
}

// Every way of recording a receipt appends exactly one leaf whose data is
// the stored body, and the stored hashes are tlog's.
func TestLogAppendEveryPath(t *testing.T) {
	s := openTest(t, t.TempDir(), testPool)
	ctx := context.Background()
	bud := Budget{}
	var ids []int64
	for i := 0; i < 37; i++ {
		rc := testReceipt(i)
		switch i % 3 {
		case 0:
			id, err := s.RecordReceipt(ctx, rc)
			if err != nil {
				t.Fatalf("RecordReceipt = %v", err)
			}
			ids = append(ids, id)
		case 1:
			r, _, err := s.Reserve(ctx, ledgerID, "model", crossing.Amount{Requests: 1}, 0, bud)
			if err != nil {
				t.Fatalf("Reserve = %v", err)
			}
			if _, err := s.SettleRecord(ctx, r, crossing.Amount{Requests: 1}, bud, &rc); err != nil {
				t.Fatalf("SettleRecord = %v", err)
			}
			ids = append(ids, 0) // id unknown to the caller; filled below
		case 2:
			err := s.Batch(ctx, func(tx *Tx) {
				// A failing operation in the batch appends nothing.
				if _, err := tx.SettleRecord(crossing.Reservation{ID: 999999, Identity: ledgerID}, crossing.Amount{}, bud, &rc); err == nil {
					t.Errorf("SettleRecord(unknown reservation) = nil error")
				}
				id, err := tx.Record(rc)
				if err != nil {
					t.Errorf("Tx.Record = %v", err)
				}
				ids = append(ids, id)
			})
			if err != nil {
				t.Fatalf("Batch = %v", err)
			}
		}
	}
	n, err := s.LogSize(ctx)
	if err != nil || n != 37 {
		t.Fatalf("LogSize = %d, %v, want 37", n, err)
	}
	stored := bodies(t, s)
	if len(stored) != 37 {
		t.Fatalf("%d receipts stored, want 37", len(stored))
	}
	mem := memTree{}
	leaves, err := s.LogLeaves(ctx, 0, n)
	if err != nil || len(leaves) != 37 {
		t.Fatalf("LogLeaves = %d leaves, %v", len(leaves), err)
	}
	seen := map[int64]bool{}
	for i, l := range leaves {
		if l.Index != int64(i) || l.Missing || string(l.Body) != stored[l.ReceiptID] || seen[l.ReceiptID] {
			t.Fatalf("leaf %d = %+v, want index %d and the body of receipt %d once", i, l, i, l.ReceiptID)
		}
		seen[l.ReceiptID] = true
		if ids[i] != 0 && ids[i] != l.ReceiptID {
			t.Errorf("leaf %d names receipt %d, want %d", i, l.ReceiptID, ids[i])
		}
		id, body, err := s.LogLeaf(ctx, int64(i))
		if err != nil || id != l.ReceiptID || string(body) != string(l.Body) {
			t.Errorf("LogLeaf(%d) = %d, %q, %v", i, id, body, err)
		}
		if idx, err := s.LogIndex(ctx, l.ReceiptID); err != nil || idx != int64(i) {
			t.Errorf("LogIndex(%d) = %d, %v, want %d", l.ReceiptID, idx, err, i)
		}
		if err := mem.add(int64(i), l.Body); err != nil {
			t.Fatal(err)
		}
	}
	hashes, err := s.LogHashes(ctx, 0, 1<<62)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(hashes)) != tlog.StoredHashCount(n) || len(hashes) != len(mem) {
		t.Fatalf("%d stored hashes, want %d", len(hashes), tlog.StoredHashCount(n))
	}
	for idx, h := range mem {
		if string(hashes[idx]) != string(h[:]) {
			t.Errorf("stored hash %d = %x, want %x", idx, hashes[idx], h)
		}
	}
	got, err := tlog.TreeHash(n, s.LogHashReader(ctx))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := tlog.TreeHash(n, mem)
	if got != want {
		t.Errorf("TreeHash(%d) = %v, want %v", n, got, want)
	}
	st, err := s.LogStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(LogStats{Size: 37, Leaves: 37, Hashes: int64(len(mem)), MaxHash: int64(len(mem)) - 1, Receipts: 37}, st); diff != "" {
		t.Errorf("LogStats mismatch (-want +got):\n%s", diff)
	}
	if _, _, err := s.LogLeaf(ctx, 37); err == nil {
		t.Errorf("LogLeaf(37) = nil error, want ErrNotInLog")
	}
}

// Two handles appending at once (as two processes would) leave one
// contiguous log with every receipt in it exactly once.
func TestLogConcurrentAppend(t *testing.T) {
	dir := t.TempDir()
	a, b := openTest(t, dir, testPool), openTest(t, dir, testPool)
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := 0; i < 60; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := a
			if i%2 == 1 {
				s = b
			}
			if _, err := s.RecordReceipt(ctx, testReceipt(i)); err != nil {
				t.Errorf("RecordReceipt = %v", err)
			}
		}()
	}
	wg.Wait()
	leaves, err := a.LogLeaves(ctx, 0, 1000)
	if err != nil || len(leaves) != 60 {
		t.Fatalf("LogLeaves = %d, %v, want 60", len(leaves), err)
	}
	mem := memTree{}
	for i, l := range leaves {
		if l.Index != int64(i) {
			t.Fatalf("leaf %d has index %d", i, l.Index)
		}
		if err := mem.add(int64(i), l.Body); err != nil {
			t.Fatal(err)
		}
	}
	got, err := tlog.TreeHash(60, b.LogHashReader(ctx))
	want, _ := tlog.TreeHash(60, mem)
	if err != nil || got != want {
		t.Errorf("TreeHash(60) = %v, %v, want %v", got, err, want)
	}
}

// Receipts and the log refuse UPDATE and DELETE from any code path.
func TestLogAppendOnly(t *testing.T) {
	s := openTest(t, t.TempDir(), testPool)
	ctx := context.Background()
	if _, err := s.RecordReceipt(ctx, testReceipt(1)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SaveCheckpoint(ctx, Checkpoint{Size: 1, Time: time.Now(), Note: []byte("n\n")}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`UPDATE receipts SET body = '{}'`, `DELETE FROM receipts`,
		`UPDATE log_leaves SET receipt_id = 7`, `DELETE FROM log_leaves`,
		`UPDATE log_hashes SET hash = zeroblob(32)`, `DELETE FROM log_hashes`,
		`UPDATE log_checkpoints SET note = 'x'`, `DELETE FROM log_checkpoints`,
	} {
		if _, err := s.db.ExecContext(ctx, q); err == nil {
			t.Errorf("%s = nil error, want append-only refusal", q)
		}
	}
}

func TestCheckpointsStored(t *testing.T) {
	s := openTest(t, t.TempDir(), testPool)
	ctx := context.Background()
	if _, ok, err := s.LatestCheckpoint(ctx); ok || err != nil {
		t.Fatalf("LatestCheckpoint on an empty log = %v, %v", ok, err)
	}
	at := time.Unix(1700000000, 5).UTC()
	for _, size := range []int64{4, 1, 9} {
		saved, err := s.SaveCheckpoint(ctx, Checkpoint{Size: size, Time: at, Note: []byte(fmt.Sprintf("note %d\n", size))})
		if err != nil || !saved {
			t.Fatalf("SaveCheckpoint(%d) = %v, %v", size, saved, err)
		}
	}
	// The first checkpoint of a size is kept.
	if saved, err := s.SaveCheckpoint(ctx, Checkpoint{Size: 4, Time: at, Note: []byte("other\n")}); saved || err != nil {
		t.Errorf("SaveCheckpoint(4 again) = %v, %v, want false, nil", saved, err)
	}
	all, err := s.Checkpoints(ctx, -1, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []Checkpoint{
		{Size: 1, Time: at, Note: []byte("note 1\n")},
		{Size: 4, Time: at, Note: []byte("note 4\n")},
		{Size: 9, Time: at, Note: []byte("note 9\n")},
	}
	if diff := cmp.Diff(want, all); diff != "" {
		t.Errorf("Checkpoints mismatch (-want +got):\n%s", diff)
	}
	page, err := s.Checkpoints(ctx, 1, 1)
	if err != nil || len(page) != 1 || page[0].Size != 4 {
		t.Errorf("Checkpoints(after 1, limit 1) = %+v, %v", page, err)
	}
	latest, ok, err := s.LatestCheckpoint(ctx)
	if err != nil || !ok || latest.Size != 9 {
		t.Errorf("LatestCheckpoint = %+v, %v, %v", latest, ok, err)
	}
}

// A receipt inserted around the log is listed as unlogged.
func TestLogStatsUnlogged(t *testing.T) {
	s := openTest(t, t.TempDir(), testPool)
	ctx := context.Background()
	if _, err := s.RecordReceipt(ctx, testReceipt(1)); err != nil {
		t.Fatal(err)
	}
	res, err := s.db.ExecContext(ctx, `INSERT INTO receipts (time, workload, sandbox_id, broker, decision, body) VALUES (0,'w','s','model','allow','{}')`)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := res.LastInsertId()
	st, err := s.LogStats(ctx)
	if err != nil || st.Receipts != 2 || st.Leaves != 1 || !cmp.Equal(st.Unlogged, []int64{id}) {
		t.Errorf("LogStats = %+v, %v, want receipt %d unlogged", st, err, id)
	}
}
