package evlog

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/store"
)

// The benchmarks append receipts through the real store path: each
// receipt, its leaf and its stored hashes in one write transaction
// (RecordReceipt), or 64 receipts per transaction (Batch, as the gateway's
// authority server group-commits). One op is one receipt, so ns/op is the
// amortised cost per receipt; µs/receipt says the same in microseconds.

func BenchmarkAppend(b *testing.B) {
	b.Run("record", func(b *testing.B) { benchAppend(b, 1, 0) })
	b.Run("batch64", func(b *testing.B) { benchAppend(b, 64, 0) })
}

// BenchmarkAppendCheckpoint adds a signed checkpoint every 256 receipts, or
// after every batch of 64: the checkpoint checks the new leaves against
// their receipts, hashes the tree and signs it (ed25519).
func BenchmarkAppendCheckpoint(b *testing.B) {
	b.Run("record/every256", func(b *testing.B) { benchAppend(b, 1, 256) })
	b.Run("batch64/every256", func(b *testing.B) { benchAppend(b, 64, 256) })
	b.Run("batch64/every-batch", func(b *testing.B) { benchAppend(b, 64, 64) })
}

func benchAppend(b *testing.B, batch, every int) {
	dir := b.TempDir()
	st := openStore(b, dir)
	l := openLog(b, st, dir)
	ctx := context.Background()
	rc := receipt(1)
	sinceCheckpoint := 0
	b.ResetTimer()
	start, cpu0 := time.Now(), cpuTime()
	for i := 0; i < b.N; i += batch {
		n := min(batch, b.N-i)
		if batch == 1 {
			if _, err := st.RecordReceipt(ctx, rc); err != nil {
				b.Fatal(err)
			}
		} else {
			err := st.Batch(ctx, func(tx *store.Tx) {
				for range n {
					if _, err := tx.Record(rc); err != nil {
						b.Error(err)
					}
				}
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		if sinceCheckpoint += n; every > 0 && sinceCheckpoint >= every {
			if _, err := l.Checkpoint(ctx); err != nil {
				b.Fatal(err)
			}
			sinceCheckpoint = 0
		}
	}
	if every > 0 {
		if _, err := l.Checkpoint(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(time.Since(start).Microseconds())/float64(b.N), "µs/receipt")
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/receipt")
}

// cpuTime is the process's user+system CPU time: on a loaded machine it
// moves less than the wall clock with other processes' work.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkVerify is `cordon evidence verify` over a log of b.N receipts
// with a checkpoint every 256: one op is one leaf checked.
func BenchmarkVerify(b *testing.B) {
	dir := b.TempDir()
	st := openStore(b, dir)
	l := openLog(b, st, dir)
	ctx := context.Background()
	rc := receipt(1)
	for i := 0; i < b.N; i += 256 {
		err := st.Batch(ctx, func(tx *store.Tx) {
			for range min(256, b.N-i) {
				if _, err := tx.Record(rc); err != nil {
					b.Error(err)
				}
			}
		})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := l.Checkpoint(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	start := time.Now()
	rep, err := Verify(ctx, st, l.Verifier())
	if err != nil || !rep.OK() {
		b.Fatalf("Verify = %+v, %v", rep, err)
	}
	b.ReportMetric(float64(time.Since(start).Microseconds())/float64(b.N), "µs/leaf")
}
