package evlog

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/cordon-project/cordon/internal/store"
)

// A receipt changed after it was appended and before a checkpoint covers
// it is never signed: Checkpoint names the leaf, and the latest checkpoint
// stays the old one.
func TestCheckpointNamesChangedLeaf(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := openStore(t, dir)
	l := openLog(t, st, dir)
	record(t, st, 0, 4)
	checkpoint(t, l)
	record(t, st, 4, 3)
	exec(t, rawDB(t, dir), `UPDATE receipts SET body = json_set(body, '$.reason', 'rewritten') WHERE id = ?`, receiptAt(t, st, 5))
	_, err := l.Checkpoint(ctx)
	if !errors.Is(err, ErrInconsistent) || !strings.Contains(err.Error(), "leaf 5 ") {
		t.Fatalf("Checkpoint = %v, want ErrInconsistent naming leaf 5", err)
	}
	if c, _, err := st.LatestCheckpoint(ctx); err != nil || c.Size != 4 {
		t.Errorf("latest checkpoint = size %d, %v, want 4", c.Size, err)
	}
}

// syncBuffer is a log sink the checkpointer's goroutine writes to.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The checkpointer logs the refusal at ERROR on every tick and keeps
// refusing; its final checkpoint fails too.
func TestRunCheckpointerKeepsRefusingChangedLeaf(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	l := openLog(t, st, dir)
	var logs syncBuffer
	l.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	record(t, st, 0, 2)
	checkpoint(t, l)
	record(t, st, 2, 2)
	exec(t, rawDB(t, dir), `UPDATE receipts SET body = json_set(body, '$.reason', 'rewritten') WHERE id = ?`, receiptAt(t, st, 3))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.RunCheckpointer(ctx, time.Millisecond) }()
	deadline := time.Now().Add(5 * time.Second)
	for strings.Count(logs.String(), "level=ERROR") < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("fewer than 3 ERROR lines after 5s:\n%s", logs.String())
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, ErrInconsistent) {
		t.Errorf("RunCheckpointer = %v, want ErrInconsistent", err)
	}
	if !strings.Contains(logs.String(), "leaf 3 ") {
		t.Errorf("the log lines do not name leaf 3:\n%s", logs.String())
	}
	if c, _, err := st.LatestCheckpoint(context.Background()); err != nil || c.Size != 2 {
		t.Errorf("latest checkpoint = size %d, %v, want 2", c.Size, err)
	}
}

// CheckLatest finds a change to what the latest checkpoint signed through
// the stored hashes; a receipt body changed under it is beyond its reach
// (Verify finds that one).
func TestCheckLatest(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		tamper func(t *testing.T, dir string, st *store.Store)
		want   error // nil: CheckLatest passes
	}{{
		name:   "intact",
		tamper: func(*testing.T, string, *store.Store) {},
	}, {
		// The hashes the root of 10 leaves is computed from: the
		// subtrees of leaves 0-7 and 8-9.
		name: "stored hash of leaves 0-7 changed",
		tamper: func(t *testing.T, dir string, _ *store.Store) {
			exec(t, rawDB(t, dir), `UPDATE log_hashes SET hash = randomblob(32) WHERE idx = ?`, tlog.StoredHashIndex(3, 0))
		},
		want: ErrInconsistent,
	}, {
		name: "stored hash of leaves 8-9 changed",
		tamper: func(t *testing.T, dir string, _ *store.Store) {
			exec(t, rawDB(t, dir), `UPDATE log_hashes SET hash = randomblob(32) WHERE idx = ?`, tlog.StoredHashIndex(1, 4))
		},
		want: ErrInconsistent,
	}, {
		// A limit: a hash below a complete subtree's (here leaf 3's) is
		// not read before a run; Verify finds it.
		name: "stored hash of leaf 3 alone changed",
		tamper: func(t *testing.T, dir string, _ *store.Store) {
			exec(t, rawDB(t, dir), `UPDATE log_hashes SET hash = randomblob(32) WHERE idx = ?`, tlog.StoredHashIndex(0, 3))
		},
	}, {
		name: "leaves removed",
		tamper: func(t *testing.T, dir string, _ *store.Store) {
			exec(t, rawDB(t, dir), `DELETE FROM log_leaves WHERE seq > 5`)
		},
		want: ErrInconsistent,
	}, {
		name: "latest checkpoint changed",
		tamper: func(t *testing.T, dir string, _ *store.Store) {
			exec(t, rawDB(t, dir), `UPDATE log_checkpoints SET note = replace(note, 'time 2', 'time 1') WHERE size = 10`)
		},
		want: ErrInconsistent,
	}, {
		// The honest limit: the body is not read before a run.
		name: "receipt body alone changed under the checkpoint",
		tamper: func(t *testing.T, dir string, st *store.Store) {
			exec(t, rawDB(t, dir), `UPDATE receipts SET body = json_set(body, '$.reason', 'x') WHERE id = ?`, receiptAt(t, st, 2))
		},
	}, {
		name: "stored hash of a leaf no checkpoint covers changed",
		tamper: func(t *testing.T, dir string, _ *store.Store) {
			exec(t, rawDB(t, dir), `UPDATE log_hashes SET hash = randomblob(32) WHERE idx = ?`, tlog.StoredHashIndex(0, 12))
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			st := openStore(t, dir)
			l := openLog(t, st, dir)
			record(t, st, 0, 10)
			checkpoint(t, l)
			record(t, st, 10, 5)
			tc.tamper(t, dir, st)
			if err := l.CheckLatest(ctx); !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Errorf("CheckLatest = %v, want %v", err, tc.want)
			}
		})
	}
	t.Run("empty log", func(t *testing.T) {
		dir := t.TempDir()
		st := openStore(t, dir)
		if err := openLog(t, st, dir).CheckLatest(ctx); err != nil {
			t.Errorf("CheckLatest on an empty log = %v, want nil", err)
		}
	})
}

// BenchmarkCheckLatest is the check a gateway start makes, over a log of
// 100 000 receipts: one op is one CheckLatest.
func BenchmarkCheckLatest(b *testing.B) {
	dir := b.TempDir()
	st := openStore(b, dir)
	l := openLog(b, st, dir)
	ctx := context.Background()
	rc := receipt(1)
	for i := 0; i < 100_000; i += 1000 {
		if err := st.Batch(ctx, func(tx *store.Tx) {
			for range 1000 {
				if _, err := tx.Record(rc); err != nil {
					b.Error(err)
				}
			}
		}); err != nil {
			b.Fatal(err)
		}
	}
	checkpoint(b, l)
	b.ResetTimer()
	for range b.N {
		if err := l.CheckLatest(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
