package evlog

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/store"
)

// testPool is far from any id a test host uses.
var testPool = store.Pool{Base: 1 << 30, Size: 65536, Slots: 8}

func openStore(t testing.TB, dir string) *store.Store {
	t.Helper()
	st, err := store.Open(dir, testPool)
	if err != nil {
		t.Fatalf("store.Open(%q) = %v", dir, err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func openLog(t testing.TB, st *store.Store, dir string) *Log {
	t.Helper()
	l, err := Open(st, dir)
	if err != nil {
		t.Fatalf("Open(%q) = %v", dir, err)
	}
	return l
}

func receipt(i int) crossing.Receipt {
	return crossing.Receipt{
		Time:          time.Unix(1700000000, int64(i)).UTC(),
		Identity:      crossing.Identity{Workload: "demo", Tenant: "acme", Purpose: "coding", SandboxID: "sb-1"},
		Broker:        "model",
		Action:        "anthropic.messages",
		Target:        "claude-test",
		RequestDigest: fmt.Sprintf("sha256:%064x", i),
		Decision:      crossing.Allow,
		Reason:        "within budget",
		BytesIn:       int64(1000 + i),
		BytesOut:      int64(2000 + i),
		Duration:      time.Duration(i) * time.Millisecond,
	}
}

// record appends n receipts, numbered from first.
func record(t testing.TB, st *store.Store, first, n int) {
	t.Helper()
	for i := first; i < first+n; i++ {
		if _, err := st.RecordReceipt(context.Background(), receipt(i)); err != nil {
			t.Fatalf("RecordReceipt(%d) = %v", i, err)
		}
	}
}

func checkpoint(t testing.TB, l *Log) Checkpoint {
	t.Helper()
	c, err := l.Checkpoint(context.Background())
	if err != nil {
		t.Fatalf("Checkpoint = %v", err)
	}
	return c
}

// rawDB opens the store's database file directly, as someone with write
// access to the state dir could, with the append-only triggers dropped.
func rawDB(t testing.TB, dir string) *sql.DB {
	t.Helper()
	u := url.URL{Scheme: "file", Path: filepath.Join(dir, "cordon.db"), RawQuery: "_pragma=" + url.QueryEscape("busy_timeout(5000)")}
	db, err := sql.Open("sqlite", u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	for _, tbl := range []string{"receipts", "log_leaves", "log_hashes", "log_checkpoints"} {
		for _, op := range []string{"_u", "_d"} {
			if _, err := db.Exec(`DROP TRIGGER IF EXISTS ` + tbl + "_append_only" + op); err != nil {
				t.Fatal(err)
			}
		}
	}
	return db
}

func exec(t testing.TB, db *sql.DB, q string, args ...any) {
	t.Helper()
	res, err := db.Exec(q, args...)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		t.Fatalf("%s: no row changed", q)
	}
}

// receiptAt returns the id of the receipt at leaf idx.
func receiptAt(t testing.TB, st *store.Store, idx int64) int64 {
	t.Helper()
	id, _, err := st.LogLeaf(context.Background(), idx)
	if err != nil {
		t.Fatalf("LogLeaf(%d) = %v", idx, err)
	}
	return id
}

// testKey is a fixed key pair, so fuzz seeds stay valid.
func testKey(t testing.TB, name string, seed byte) (note.Signer, note.Verifier) {
	t.Helper()
	skey, vkey, err := note.GenerateKey(bytes.NewReader(bytes.Repeat([]byte{seed}, 32)), name)
	if err != nil {
		t.Fatal(err)
	}
	s, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	return s, v
}

// memTree is an independent in-memory tlog.
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
