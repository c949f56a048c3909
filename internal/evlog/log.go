package evlog

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/cordon-project/cordon/internal/store"
)

// chunk is how many leaves are read per query when rebuilding the tree.
const chunk = 1024

// Log signs checkpoints of a store's evidence log. Receipts become leaves
// when the store records them (in the same transaction); a Log only signs
// what is already there, after checking it.
type Log struct {
	st       LogStore
	signer   note.Signer
	verifier note.Verifier
	vkey     string
	now      func() time.Time

	// Logger receives RunCheckpointer's failures; nil drops them.
	Logger *slog.Logger

	mu sync.Mutex // one Checkpoint at a time in this process
}

// Open returns the Log of st, signing with the key in KeyDir(stateDir). On
// first use it generates the key (DefaultKeyName) and writes PubFile; it
// refuses a key or key directory that is a symlink, not owned by the
// caller, or open to group or others, and refuses (ErrKeyMissing) to
// replace a key that signed the stored checkpoints. PubFile is rewritten
// from the private key if it is missing or differs.
func Open(st LogStore, stateDir string) (*Log, error) {
	dir := KeyDir(stateDir)
	if err := prepareKeyDir(dir); err != nil {
		return nil, fmt.Errorf("open evidence log: %w", err)
	}
	signer, vkey, err := loadKey(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if err := CheckNoCheckpoints(context.Background(), st); err != nil {
			return nil, fmt.Errorf("open evidence log: %s: %w", filepath.Join(dir, KeyFile), err)
		}
		if _, err := GenerateKey(dir, DefaultKeyName()); err != nil && !errors.Is(err, ErrKeyExists) {
			return nil, fmt.Errorf("open evidence log: %w", err)
		}
		signer, vkey, err = loadKey(dir) // ours, or another process's that won the race
	}
	if err != nil {
		return nil, fmt.Errorf("open evidence log: %w", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, PubFile)); err != nil || strings.TrimSpace(string(b)) != vkey {
		if err := writePub(dir, vkey); err != nil {
			return nil, fmt.Errorf("open evidence log: %w", err)
		}
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return nil, fmt.Errorf("open evidence log: %w", err)
	}
	return &Log{st: st, signer: signer, verifier: v, vkey: vkey, now: time.Now}, nil
}

// CheckNoCheckpoints fails with ErrKeyMissing when st holds checkpoints: a
// new key could not extend them (Checkpoint checks the latest one's
// signature before signing the next), so one is made only for a log that
// has none.
func CheckNoCheckpoints(ctx context.Context, st CheckpointReader) error {
	c, ok, err := st.LatestCheckpoint(ctx)
	if err != nil {
		return err
	}
	if ok {
		return fmt.Errorf("%w: the log has checkpoints (latest: %d leaves) signed by a key that is gone; restore that key", ErrKeyMissing, c.Size)
	}
	return nil
}

// Verifier checks this log's checkpoints.
func (l *Log) Verifier() note.Verifier { return l.verifier }

// VerifierKey is the encoded verifier key, as in PubFile.
func (l *Log) VerifierKey() string { return l.vkey }

// Checkpoint signs and stores a checkpoint of the whole log if it grew
// since the latest checkpoint, and returns the latest checkpoint. Before
// signing it checks the growth: the stored hashes of the old tree must
// still hash to the latest checkpoint's root, and every new leaf's stored
// hashes must be the ones its receipt body gives. On any mismatch it signs
// nothing and fails with ErrInconsistent, so a signature never covers a
// log that was changed since the last one. With an empty log it returns
// the zero Checkpoint.
func (l *Log) Checkpoint(ctx context.Context) (Checkpoint, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var old Checkpoint
	prev, ok, err := l.st.LatestCheckpoint(ctx)
	if err != nil {
		return Checkpoint{}, err
	}
	if ok {
		if old, err = ParseCheckpoint(prev.Note, l.verifier); err != nil {
			return Checkpoint{}, fmt.Errorf("%w: latest checkpoint (size %d): %v", ErrInconsistent, prev.Size, err)
		}
		if old.Size != prev.Size {
			return Checkpoint{}, fmt.Errorf("%w: checkpoint stored as size %d signs size %d", ErrInconsistent, prev.Size, old.Size)
		}
	}
	n, err := l.st.LogSize(ctx)
	if err != nil {
		return Checkpoint{}, err
	}
	switch {
	case n < old.Size:
		return Checkpoint{}, fmt.Errorf("%w: the log has %d leaves, fewer than the %d its latest checkpoint signed", ErrInconsistent, n, old.Size)
	case n == old.Size:
		return old, nil
	}
	root, err := extend(ctx, l.st, old, n)
	if err != nil {
		return Checkpoint{}, err
	}
	c, err := signCheckpoint(l.signer, tlog.Tree{N: n, Hash: root}, l.now())
	if err != nil {
		return Checkpoint{}, err
	}
	saved, err := l.st.SaveCheckpoint(ctx, store.Checkpoint{Size: c.Size, Time: c.Time, Note: []byte(c.Note)})
	if err != nil {
		return Checkpoint{}, err
	}
	if !saved {
		// Another process signed this size first; its checkpoint is the one
		// stored, and it signed the same tree.
		got, err := l.st.Checkpoints(ctx, n-1, 1)
		if err != nil {
			return Checkpoint{}, err
		}
		if len(got) != 1 || got[0].Size != n {
			return Checkpoint{}, fmt.Errorf("%w: checkpoint of size %d vanished", ErrInconsistent, n)
		}
		theirs, err := ParseCheckpoint(got[0].Note, l.verifier)
		if err != nil || theirs.Root != root {
			return Checkpoint{}, fmt.Errorf("%w: stored checkpoint of size %d differs from the tree: %v", ErrInconsistent, n, err)
		}
		return theirs, nil
	}
	return c, nil
}

// extend checks leaves [old.Size, n) against their receipts and returns
// the tree hash of the first n leaves, computed from the old tree's
// frontier (checked against old's root) and the new receipt bodies.
func extend(ctx context.Context, st LeafReader, old Checkpoint, n int64) (tlog.Hash, error) {
	t := newTree()
	if old.Size > 0 {
		rec := &recorder{r: st.LogHashReader(ctx)}
		h, err := tlog.TreeHash(old.Size, rec)
		if err != nil {
			return tlog.Hash{}, fmt.Errorf("%w: tree of the first %d leaves: %v", ErrInconsistent, old.Size, err)
		}
		if h != old.Root {
			return tlog.Hash{}, fmt.Errorf("%w: the stored hashes of the first %d leaves no longer hash to the signed root", ErrInconsistent, old.Size)
		}
		t = treeAt(old.Size, rec.indexes, rec.hashes)
	}
	for lo := old.Size; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		leaves, err := st.LogLeaves(ctx, lo, hi)
		if err != nil {
			return tlog.Hash{}, err
		}
		stored, err := st.LogHashes(ctx, tlog.StoredHashIndex(0, lo), tlog.StoredHashIndex(0, hi))
		if err != nil {
			return tlog.Hash{}, err
		}
		for i, lf := range leaves {
			switch {
			case lf.Index != lo+int64(i):
				return tlog.Hash{}, fmt.Errorf("%w: leaf %d is missing", ErrInconsistent, lo+int64(i))
			case lf.Missing:
				return tlog.Hash{}, fmt.Errorf("%w: leaf %d: receipt %d is missing", ErrInconsistent, lf.Index, lf.ReceiptID)
			}
			hs, err := t.add(tlog.RecordHash(lf.Body))
			if err != nil {
				return tlog.Hash{}, err
			}
			base := tlog.StoredHashIndex(0, lf.Index)
			for j, h := range hs {
				if string(stored[base+int64(j)]) != string(h[:]) {
					return tlog.Hash{}, fmt.Errorf("%w: leaf %d (receipt %d): stored hash %d does not match the receipt", ErrInconsistent, lf.Index, lf.ReceiptID, base+int64(j))
				}
			}
		}
		if int64(len(leaves)) != hi-lo {
			return tlog.Hash{}, fmt.Errorf("%w: leaf %d is missing", ErrInconsistent, lo+int64(len(leaves)))
		}
	}
	return t.root()
}

// RunCheckpointer signs a checkpoint every interval while the log grows,
// and once more when ctx ends (bounded by ten seconds), so receipts are
// covered by a signature within about one interval. Failures in between
// go to l.Logger and are retried on the next tick; it returns the final
// checkpoint's error.
func (l *Log) RunCheckpointer(ctx context.Context, every time.Duration) error {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			_, err := l.Checkpoint(fctx)
			return err
		case <-tick.C:
			if _, err := l.Checkpoint(ctx); err != nil && ctx.Err() == nil && l.Logger != nil {
				l.Logger.Error("evidence log checkpoint failed", "err", err)
			}
		}
	}
}

// CheckLatest is the cheap check made before a run: the latest
// checkpoint's signature verifies, the log still has at least its leaves,
// and the stored hashes its root is computed from (the complete subtrees:
// O(log n) hashes, one read) still hash to it. It fails with
// ErrInconsistent (or the store's error) when they do not. It reads no
// receipt body and no hash below a complete subtree's: a receipt body, or
// a leaf hash alone, changed under a checkpoint is found by Verify, not
// here.
func (l *Log) CheckLatest(ctx context.Context) error {
	prev, ok, err := l.st.LatestCheckpoint(ctx)
	if err != nil || !ok {
		return err
	}
	c, err := ParseCheckpoint(prev.Note, l.verifier)
	if err != nil {
		return fmt.Errorf("%w: latest checkpoint (size %d): %v", ErrInconsistent, prev.Size, err)
	}
	if c.Size != prev.Size {
		return fmt.Errorf("%w: checkpoint stored as size %d signs size %d", ErrInconsistent, prev.Size, c.Size)
	}
	n, err := l.st.LogSize(ctx)
	if err != nil {
		return err
	}
	if n < c.Size {
		return fmt.Errorf("%w: the log has %d leaves, fewer than the %d its latest checkpoint signed", ErrInconsistent, n, c.Size)
	}
	h, err := tlog.TreeHash(c.Size, l.st.LogHashReader(ctx))
	if err != nil {
		return fmt.Errorf("%w: tree of the first %d leaves: %v", ErrInconsistent, c.Size, err)
	}
	if h != c.Root {
		return fmt.Errorf("%w: the stored hashes of the first %d leaves no longer hash to the latest checkpoint's root", ErrInconsistent, c.Size)
	}
	return nil
}
