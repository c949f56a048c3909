package evlog

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/cordon-project/cordon/internal/store"
)

// problems renders a report's problems as "kind leaf=… receipt=… hash=…
// checkpoint=… source" for comparison.
func problems(r Report) []string {
	var out []string
	for _, p := range r.Problems {
		s := p.Kind
		if p.Leaf != nil {
			s += fmt.Sprintf(" leaf=%d", *p.Leaf)
		}
		if p.Receipt != nil {
			s += fmt.Sprintf(" receipt=%d", *p.Receipt)
		}
		if p.HashIndex != nil {
			s += fmt.Sprintf(" hash=%d", *p.HashIndex)
		}
		if p.Checkpoint != nil {
			s += fmt.Sprintf(" checkpoint=%d", *p.Checkpoint)
		}
		if p.Source != "" {
			s += " " + p.Source
		}
		out = append(out, s)
	}
	return out
}

// signedLog builds a log of 305 receipts with checkpoints at 100, 200 and
// 300 (the last 5 unsigned).
func signedLog(t *testing.T) (dir string, st *store.Store, l *Log) {
	t.Helper()
	dir = t.TempDir()
	st = openStore(t, dir)
	l = openLog(t, st, dir)
	for i := 0; i < 3; i++ {
		record(t, st, i*100, 100)
		checkpoint(t, l)
	}
	record(t, st, 300, 5)
	return dir, st, l
}

func TestVerifyClean(t *testing.T) {
	_, st, l := signedLog(t)
	rep, err := Verify(context.Background(), st, l.Verifier())
	if err != nil {
		t.Fatalf("Verify = %v", err)
	}
	if !rep.OK() || rep.Size != 305 || rep.Receipts != 305 || rep.Checkpoints != 3 || rep.Latest == nil || rep.Latest.Size != 300 || rep.Unsigned != 5 {
		t.Fatalf("Verify = %+v, want OK over 305 leaves and 3 checkpoints, latest 300", rep)
	}
	root, err := tlog.TreeHash(300, st.LogHashReader(context.Background()))
	if err != nil || rep.Latest.Root != root {
		t.Errorf("latest root = %v, want %v (%v)", rep.Latest.Root, root, err)
	}
}

func TestVerifyEmpty(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	l := openLog(t, st, dir)
	if c := checkpoint(t, l); c.Size != 0 || c.Note != "" {
		t.Errorf("Checkpoint of an empty log = %+v, want the zero Checkpoint", c)
	}
	rep, err := Verify(context.Background(), st, l.Verifier())
	if err != nil || !rep.OK() || rep.Size != 0 || rep.Latest != nil {
		t.Fatalf("Verify(empty) = %+v, %v", rep, err)
	}
}

// Every kind of change to the stored log is found, at its position.
func TestVerifyDetectsTampering(t *testing.T) {
	leafHash := func(n int64) int64 { return tlog.StoredHashIndex(0, n) }
	for _, tc := range []struct {
		name   string
		tamper func(t *testing.T, db *sql.DB, st *store.Store, l *Log) (external [][]byte)
		want   func(st *store.Store) []string
	}{{
		name: "receipt modified",
		tamper: func(t *testing.T, db *sql.DB, st *store.Store, _ *Log) [][]byte {
			exec(t, db, `UPDATE receipts SET body = json_set(body, '$.decision', 'deny') WHERE id = ?`, receiptAt(t, st, 150))
			return nil
		},
		want: func(st *store.Store) []string {
			return []string{
				fmt.Sprintf("receipt_modified leaf=150 receipt=%d hash=%d", receiptAt(t, st, 150), leafHash(150)),
				"checkpoint_root_mismatch leaf=100 checkpoint=200",
				"checkpoint_root_mismatch leaf=100 checkpoint=300",
			}
		},
	}, {
		name: "last receipt modified (no hash above it yet)",
		tamper: func(t *testing.T, db *sql.DB, st *store.Store, _ *Log) [][]byte {
			exec(t, db, `UPDATE receipts SET body = json_set(body, '$.reason', 'x') WHERE id = ?`, receiptAt(t, st, 304))
			return nil
		},
		want: func(st *store.Store) []string {
			return []string{fmt.Sprintf("receipt_modified leaf=304 receipt=%d hash=%d", receiptAt(t, st, 304), leafHash(304))}
		},
	}, {
		name: "receipt deleted",
		tamper: func(t *testing.T, db *sql.DB, st *store.Store, _ *Log) [][]byte {
			exec(t, db, `DELETE FROM receipts WHERE id = ?`, receiptAt(t, st, 42))
			return nil
		},
		want: func(st *store.Store) []string {
			id, _, _ := st.LogLeaf(context.Background(), 42)
			return []string{fmt.Sprintf("receipt_missing leaf=42 receipt=%d", id)}
		},
	}, {
		name: "receipt inserted around the log",
		tamper: func(t *testing.T, db *sql.DB, st *store.Store, _ *Log) [][]byte {
			exec(t, db, `INSERT INTO receipts (id, time, workload, sandbox_id, broker, decision, body) VALUES (9999, 0, 'demo', 'sb-1', 'model', 'allow', '{}')`)
			return nil
		},
		want: func(*store.Store) []string { return []string{"receipt_not_in_log receipt=9999"} },
	}, {
		name: "leaf row deleted",
		tamper: func(t *testing.T, db *sql.DB, st *store.Store, _ *Log) [][]byte {
			exec(t, db, `DELETE FROM log_leaves WHERE seq = 11`)
			return nil
		},
		want: func(*store.Store) []string {
			return []string{"leaf_missing leaf=10", "receipt_not_in_log receipt=11"}
		},
	}, {
		name: "stored leaf hash modified",
		tamper: func(t *testing.T, db *sql.DB, _ *store.Store, _ *Log) [][]byte {
			exec(t, db, `UPDATE log_hashes SET hash = randomblob(32) WHERE idx = ?`, leafHash(77))
			return nil
		},
		want: func(st *store.Store) []string {
			return []string{fmt.Sprintf("hash_mismatch leaf=77 receipt=%d hash=%d", receiptAt(t, st, 77), leafHash(77))}
		},
	}, {
		name: "stored interior hash modified",
		tamper: func(t *testing.T, db *sql.DB, _ *store.Store, _ *Log) [][]byte {
			exec(t, db, `UPDATE log_hashes SET hash = randomblob(32) WHERE idx = ?`, tlog.StoredHashIndex(3, 1))
			return nil
		},
		want: func(*store.Store) []string {
			return []string{fmt.Sprintf("hash_mismatch leaf=8 hash=%d", tlog.StoredHashIndex(3, 1))}
		},
	}, {
		name: "stored hash deleted",
		tamper: func(t *testing.T, db *sql.DB, _ *store.Store, _ *Log) [][]byte {
			exec(t, db, `DELETE FROM log_hashes WHERE idx = ?`, tlog.StoredHashIndex(1, 20))
			return nil
		},
		want: func(*store.Store) []string {
			return []string{fmt.Sprintf("hash_missing leaf=40 hash=%d", tlog.StoredHashIndex(1, 20))}
		},
	}, {
		name: "checkpoint text modified",
		tamper: func(t *testing.T, db *sql.DB, _ *store.Store, _ *Log) [][]byte {
			exec(t, db, `UPDATE log_checkpoints SET note = replace(note, 'time 20', 'time 19') WHERE size = 200`)
			return nil
		},
		want: func(*store.Store) []string { return []string{"checkpoint_bad_signature checkpoint=200"} },
	}, {
		name: "checkpoint forged with another key",
		tamper: func(t *testing.T, db *sql.DB, st *store.Store, l *Log) [][]byte {
			other, _ := testKey(t, l.Verifier().Name(), 7) // same name, other key
			root, _ := tlog.TreeHash(200, st.LogHashReader(context.Background()))
			c, err := signCheckpoint(other, tlog.Tree{N: 200, Hash: root}, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			exec(t, db, `UPDATE log_checkpoints SET note = ? WHERE size = 200`, c.Note)
			c, _ = signCheckpoint(other, tlog.Tree{N: 250, Hash: root}, time.Now())
			exec(t, db, `INSERT INTO log_checkpoints (size, time, note) VALUES (250, 0, ?)`, c.Note)
			return nil
		},
		want: func(*store.Store) []string {
			return []string{"checkpoint_bad_signature checkpoint=200", "checkpoint_bad_signature checkpoint=250"}
		},
	}, {
		name: "checkpoint moved to another size",
		tamper: func(t *testing.T, db *sql.DB, _ *store.Store, _ *Log) [][]byte {
			exec(t, db, `UPDATE log_checkpoints SET size = 150 WHERE size = 200`)
			return nil
		},
		want: func(*store.Store) []string { return []string{"checkpoint_size_mismatch checkpoint=150"} },
	}, {
		name: "receipt modified and every stored hash rebuilt to match",
		tamper: func(t *testing.T, db *sql.DB, st *store.Store, _ *Log) [][]byte {
			exec(t, db, `UPDATE receipts SET body = json_set(body, '$.target', 'other') WHERE id = ?`, receiptAt(t, st, 150))
			rebuildHashes(t, db, st)
			return nil
		},
		want: func(*store.Store) []string {
			return []string{"checkpoint_root_mismatch leaf=100 checkpoint=200", "checkpoint_root_mismatch leaf=100 checkpoint=300"}
		},
	}, {
		name: "log rewritten and re-signed with the key; a published checkpoint catches it",
		tamper: func(t *testing.T, db *sql.DB, st *store.Store, l *Log) [][]byte {
			published, ok, err := st.LatestCheckpoint(context.Background())
			if err != nil || !ok {
				t.Fatal(err)
			}
			exec(t, db, `UPDATE receipts SET body = json_set(body, '$.target', 'other') WHERE id = ?`, receiptAt(t, st, 150))
			rebuildHashes(t, db, st)
			exec(t, db, `DELETE FROM log_checkpoints`)
			checkpoint(t, l)
			return [][]byte{published.Note}
		},
		want: func(*store.Store) []string {
			return []string{"checkpoint_root_mismatch leaf=0 checkpoint=300 external 1"}
		},
	}, {
		name: "leaves removed from the end",
		tamper: func(t *testing.T, db *sql.DB, st *store.Store, _ *Log) [][]byte {
			first := receiptAt(t, st, 250)
			exec(t, db, `DELETE FROM log_leaves WHERE seq > 250`)
			exec(t, db, `DELETE FROM log_hashes WHERE idx >= ?`, leafHash(250))
			exec(t, db, `DELETE FROM receipts WHERE id >= ?`, first)
			return nil
		},
		want: func(*store.Store) []string {
			return []string{"checkpoint_beyond_log checkpoint=300"}
		},
	}, {
		name: "leaf rows removed from the end, hashes left",
		tamper: func(t *testing.T, db *sql.DB, st *store.Store, _ *Log) [][]byte {
			exec(t, db, `DELETE FROM log_leaves WHERE seq > 303`)
			return nil
		},
		want: func(st *store.Store) []string {
			return []string{
				fmt.Sprintf("hash_extra hash=%d", tlog.StoredHashCount(305)-1),
				fmt.Sprintf("receipt_not_in_log receipt=%d", 304),
				fmt.Sprintf("receipt_not_in_log receipt=%d", 305),
			}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			dir, st, l := signedLog(t)
			want := tc.want(st) // positions, read before the tampering
			db := rawDB(t, dir)
			ext := tc.tamper(t, db, st, l)
			rep, err := Verify(context.Background(), st, l.Verifier(), ext...)
			if err != nil {
				t.Fatalf("Verify = %v", err)
			}
			if rep.OK() {
				t.Fatalf("Verify = OK after tampering, want problems")
			}
			if diff := cmp.Diff(want, problems(rep)); diff != "" {
				t.Errorf("Verify problems mismatch (-want +got):\n%s\nreport:\n%s", diff, describe(rep))
			}
		})
	}
}

func describe(r Report) string {
	var b strings.Builder
	for _, p := range r.Problems {
		b.WriteString(p.String() + "\n")
	}
	return b.String()
}

// rebuildHashes rewrites log_hashes from the receipt bodies, as an
// attacker who knows tlog would.
func rebuildHashes(t *testing.T, db *sql.DB, st *store.Store) {
	t.Helper()
	ctx := context.Background()
	n, err := st.LogSize(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leaves, err := st.LogLeaves(ctx, 0, n)
	if err != nil {
		t.Fatal(err)
	}
	mem := memTree{}
	for _, lf := range leaves {
		if err := mem.add(lf.Index, lf.Body); err != nil {
			t.Fatal(err)
		}
	}
	for idx, h := range mem {
		if _, err := db.Exec(`UPDATE log_hashes SET hash = ? WHERE idx = ?`, h[:], idx); err != nil {
			t.Fatal(err)
		}
	}
}

// A checkpoint that does not verify with the given key: every checkpoint
// is reported when verifying with the wrong key.
func TestVerifyWrongKey(t *testing.T) {
	_, st, _ := signedLog(t)
	_, other := testKey(t, "someone-else", 3)
	rep, err := Verify(context.Background(), st, other)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"checkpoint_bad_signature checkpoint=100", "checkpoint_bad_signature checkpoint=200", "checkpoint_bad_signature checkpoint=300"}
	if diff := cmp.Diff(want, problems(rep)); diff != "" {
		t.Errorf("Verify with another key (-want +got):\n%s", diff)
	}
}

// Malformed external checkpoints are reported, not fatal.
func TestVerifyExternalMalformed(t *testing.T) {
	_, st, l := signedLog(t)
	rep, err := Verify(context.Background(), st, l.Verifier(), []byte("not a note"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"checkpoint_malformed external 1"}, problems(rep)); diff != "" {
		t.Errorf("Verify(external garbage) (-want +got):\n%s", diff)
	}
}

// Verify over a log larger than one read chunk, with checkpoints inside
// and across chunk boundaries.
func TestVerifyAcrossChunks(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	dir := t.TempDir()
	st := openStore(t, dir)
	l := openLog(t, st, dir)
	ctx := context.Background()
	for _, n := range []int{1, chunk - 2, 3, chunk, 500} {
		err := st.Batch(ctx, func(tx *store.Tx) {
			for i := 0; i < n; i++ {
				if _, err := tx.Record(receipt(i)); err != nil {
					t.Errorf("Record = %v", err)
				}
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		checkpoint(t, l)
	}
	rep, err := Verify(ctx, st, l.Verifier())
	if err != nil || !rep.OK() || rep.Checkpoints != 5 || rep.Size != int64(2*chunk+502) {
		t.Fatalf("Verify = %+v, %v\n%s", rep, err, describe(rep))
	}
	db := rawDB(t, dir)
	exec(t, db, `UPDATE receipts SET body = json_set(body, '$.reason', 'x') WHERE id = ?`, receiptAt(t, st, chunk+5))
	rep, err = Verify(ctx, st, l.Verifier())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		fmt.Sprintf("receipt_modified leaf=%d receipt=%d hash=%d", chunk+5, receiptAt(t, st, chunk+5), tlog.StoredHashIndex(0, chunk+5)),
		fmt.Sprintf("checkpoint_root_mismatch leaf=%d checkpoint=%d", chunk+2, 2*chunk+2),
		fmt.Sprintf("checkpoint_root_mismatch leaf=%d checkpoint=%d", chunk+2, 2*chunk+502),
	}
	if diff := cmp.Diff(want, problems(rep)); diff != "" {
		t.Errorf("Verify problems (-want +got):\n%s", diff)
	}
}
