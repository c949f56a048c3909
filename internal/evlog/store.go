package evlog

import (
	"context"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/cordon-project/cordon/internal/store"
)

// The slices of the store this package uses. *store.Store implements each
// of them; the store appends leaves (with their receipts, in one
// transaction) and this package never writes one. Its one write is
// SaveCheckpoint.

// CheckpointReader reads the stored checkpoints. LatestCheckpoint returns
// the checkpoint of the largest size, and ok false when there is none.
// Checkpoints returns up to limit checkpoints (all when limit <= 0) whose
// size is above after, smallest first; after = -1 starts at the beginning.
type CheckpointReader interface {
	LatestCheckpoint(ctx context.Context) (c store.Checkpoint, ok bool, err error)
	Checkpoints(ctx context.Context, after int64, limit int) ([]store.Checkpoint, error)
}

// LeafReader reads the log's leaves and stored hashes. LogLeaves returns
// the stored leaves with index in [from, to) in order, leaving out a leaf
// row that is not stored (callers look for the gaps). LogHashes returns
// the stored hashes with stored-hash index in [from, to) exactly as stored
// (a tampered one may not be 32 bytes long), leaving out a missing one.
// LogHashReader reads stored hashes for tlog, one query per call.
type LeafReader interface {
	LogLeaves(ctx context.Context, from, to int64) ([]store.LogLeaf, error)
	LogHashes(ctx context.Context, from, to int64) (map[int64][]byte, error)
	LogHashReader(ctx context.Context) tlog.HashReader
}

// LogStore is what a Log needs to sign checkpoints: it reads the
// checkpoints and leaves, the log's size (the highest leaf index plus
// one), and saves a checkpoint. SaveCheckpoint keeps the first checkpoint
// of a size and reports saved false when another process stored that size
// first.
type LogStore interface {
	CheckpointReader
	LeafReader
	LogSize(ctx context.Context) (int64, error)
	SaveCheckpoint(ctx context.Context, c store.Checkpoint) (saved bool, err error)
}

// ProofReader is what Prove reads. LogIndex returns a receipt's leaf
// index, LogLeaf the receipt and body (the leaf's data) at an index; both
// fail with store.ErrNotInLog when there is no such leaf.
type ProofReader interface {
	LatestCheckpoint(ctx context.Context) (c store.Checkpoint, ok bool, err error)
	LogIndex(ctx context.Context, receiptID int64) (int64, error)
	LogLeaf(ctx context.Context, idx int64) (receiptID int64, body []byte, err error)
	LogHashReader(ctx context.Context) tlog.HashReader
}

// VerifyReader is what Verify reads: checkpoints, leaves and hashes, and
// LogStats, which counts every table of the log once and lists receipts
// that no leaf, or several leaves, name.
type VerifyReader interface {
	CheckpointReader
	LeafReader
	LogStats(ctx context.Context) (store.LogStats, error)
}

var (
	_ LogStore     = (*store.Store)(nil)
	_ ProofReader  = (*store.Store)(nil)
	_ VerifyReader = (*store.Store)(nil)
)
