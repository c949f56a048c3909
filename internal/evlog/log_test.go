package evlog

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/cordon-project/cordon/internal/store"
)

func TestCheckpointOnlyWhenGrown(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	l := openLog(t, st, dir)
	ctx := context.Background()
	record(t, st, 0, 3)
	c1 := checkpoint(t, l)
	root, err := tlog.TreeHash(3, st.LogHashReader(ctx))
	if err != nil || c1.Size != 3 || c1.Root != root || c1.Time.IsZero() {
		t.Fatalf("Checkpoint = %+v, want size 3, root %v, a time (%v)", c1, root, err)
	}
	if got, err := ParseCheckpoint([]byte(c1.Note), l.Verifier()); err != nil || got != c1 {
		t.Errorf("ParseCheckpoint(stored note) = %+v, %v, want %+v", got, err, c1)
	}
	if c2 := checkpoint(t, l); c2 != c1 {
		t.Errorf("Checkpoint with no growth = %+v, want the latest %+v", c2, c1)
	}
	all, err := st.Checkpoints(ctx, -1, 0)
	if err != nil || len(all) != 1 {
		t.Errorf("Checkpoints = %d, %v, want 1", len(all), err)
	}
	record(t, st, 3, 4)
	if c3 := checkpoint(t, l); c3.Size != 7 {
		t.Errorf("Checkpoint after growth = size %d, want 7", c3.Size)
	}
}

// Checkpoint signs nothing over a log changed since the last signature.
func TestCheckpointRefusesInconsistentLog(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		tamper func(t *testing.T, dir string, l *Log)
	}{{
		name: "new receipt changed after it was appended",
		tamper: func(t *testing.T, dir string, l *Log) {
			exec(t, rawDB(t, dir), `UPDATE receipts SET body = json_set(body, '$.reason', 'x') WHERE id = ?`, receiptAt(t, l.st.(*store.Store), 12))
		},
	}, {
		name: "new stored hash changed",
		tamper: func(t *testing.T, dir string, l *Log) {
			exec(t, rawDB(t, dir), `UPDATE log_hashes SET hash = randomblob(32) WHERE idx = ?`, tlog.StoredHashIndex(1, 6))
		},
	}, {
		name: "signed part of the tree changed",
		tamper: func(t *testing.T, dir string, l *Log) {
			exec(t, rawDB(t, dir), `UPDATE log_hashes SET hash = randomblob(32) WHERE idx = ?`, tlog.StoredHashIndex(3, 0))
		},
	}, {
		name: "latest checkpoint changed",
		tamper: func(t *testing.T, dir string, l *Log) {
			exec(t, rawDB(t, dir), `UPDATE log_checkpoints SET note = replace(note, 'time 2', 'time 1') WHERE size = 10`)
		},
	}, {
		name: "leaves removed",
		tamper: func(t *testing.T, dir string, l *Log) {
			db := rawDB(t, dir)
			exec(t, db, `DELETE FROM log_leaves WHERE seq > 5`)
		},
	}, {
		name: "new receipt deleted",
		tamper: func(t *testing.T, dir string, l *Log) {
			exec(t, rawDB(t, dir), `DELETE FROM receipts WHERE id = ?`, receiptAt(t, l.st.(*store.Store), 15))
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			st := openStore(t, dir)
			l := openLog(t, st, dir)
			record(t, st, 0, 10)
			checkpoint(t, l)
			record(t, st, 10, 10)
			tc.tamper(t, dir, l)
			if c, err := l.Checkpoint(ctx); !errors.Is(err, ErrInconsistent) {
				t.Fatalf("Checkpoint = %+v, %v, want ErrInconsistent", c, err)
			}
			latest, _, err := st.LatestCheckpoint(ctx)
			if err != nil || latest.Size > 10 {
				t.Errorf("latest checkpoint after refusal = size %d, %v, want no new one", latest.Size, err)
			}
		})
	}
}

// Several processes (here: handles) append and checkpoint one log at once.
func TestCheckpointConcurrent(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := 0; w < 3; w++ {
		st := openStore(t, dir)
		l := openLog(t, st, dir)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 40; i++ {
				if _, err := st.RecordReceipt(ctx, receipt(w*1000+i)); err != nil {
					t.Errorf("RecordReceipt = %v", err)
					return
				}
				if i%7 == 0 {
					if _, err := l.Checkpoint(ctx); err != nil {
						t.Errorf("Checkpoint = %v", err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	st := openStore(t, dir)
	l := openLog(t, st, dir)
	if c := checkpoint(t, l); c.Size != 120 {
		t.Errorf("final checkpoint size %d, want 120", c.Size)
	}
	rep, err := Verify(ctx, st, l.Verifier())
	if err != nil || !rep.OK() || rep.Latest.Size != 120 {
		t.Fatalf("Verify = %+v, %v\n%s", rep, err, describe(rep))
	}
}

func TestRunCheckpointer(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	l := openLog(t, st, dir)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.RunCheckpointer(ctx, time.Millisecond) }()
	record(t, st, 0, 20)
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, ok, err := st.LatestCheckpoint(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if ok && c.Size == 20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint of 20 leaves after 5s (latest %d)", c.Size)
		}
		time.Sleep(time.Millisecond)
	}
	record(t, st, 20, 3)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("RunCheckpointer = %v", err)
	}
	// The final checkpoint covers what was appended before the end.
	c, _, err := st.LatestCheckpoint(context.Background())
	if err != nil || c.Size != 23 {
		t.Errorf("latest checkpoint after RunCheckpointer = %d, %v, want 23", c.Size, err)
	}
}
