package evlog

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/cordon-project/cordon/internal/store"
)

// Problem kinds Verify reports. Stable names: scripts match on them.
const (
	// A receipt no longer hashes to the leaf hash stored when it was
	// appended, and that stored hash still agrees with the tree above it:
	// the receipt was changed.
	KindReceiptModified = "receipt_modified"
	// A leaf names a receipt that is gone.
	KindReceiptMissing = "receipt_missing"
	// A receipt is in no leaf: it was inserted around the log (or recorded
	// before the log existed).
	KindReceiptNotInLog = "receipt_not_in_log"
	// A receipt is named by more than one leaf.
	KindReceiptDuplicate = "receipt_in_log_twice"
	// A leaf row below the log's size is gone.
	KindLeafMissing = "leaf_missing"
	// A stored hash differs from the one its children (or, for a leaf
	// hash, its receipt) give.
	KindHashMismatch = "hash_mismatch"
	// A stored hash is gone.
	KindHashMissing = "hash_missing"
	// Stored hashes exist beyond what the log's leaves account for: leaves
	// at the end were removed.
	KindHashExtra = "hash_extra"
	// A checkpoint's signature does not verify with the key (its text was
	// changed, or another key signed it).
	KindCheckpointBadSignature = "checkpoint_bad_signature"
	// A checkpoint is not a signed tree note.
	KindCheckpointMalformed = "checkpoint_malformed"
	// A checkpoint is stored under a size other than the one it signs.
	KindCheckpointSizeMismatch = "checkpoint_size_mismatch"
	// The receipts' tree at a checkpoint's size is not the one it signed.
	KindCheckpointRootMismatch = "checkpoint_root_mismatch"
	// A checkpoint signs more leaves than the log has: leaves were removed.
	KindCheckpointBeyondLog = "checkpoint_beyond_log"
)

// maxProblems bounds the problems a Report lists; the rest are counted.
const maxProblems = 1000

// Problem is one thing wrong with the log, at a position: a leaf index
// (and its receipt), a stored-hash index, or a checkpoint's size. Fields
// that do not apply are nil.
type Problem struct {
	Kind       string `json:"kind"`
	Leaf       *int64 `json:"leaf,omitempty"`            // leaf index (first leaf under a hash)
	Receipt    *int64 `json:"receipt_id,omitempty"`      // receipt id
	HashIndex  *int64 `json:"hash_index,omitempty"`      // tlog stored-hash index
	Checkpoint *int64 `json:"checkpoint_size,omitempty"` // size the checkpoint signs (or is stored under)
	Source     string `json:"source,omitempty"`          // "external N" for checkpoints given to Verify
	Detail     string `json:"detail"`
}

func (p Problem) String() string {
	var pos []string
	if p.Checkpoint != nil {
		pos = append(pos, fmt.Sprintf("checkpoint %d", *p.Checkpoint))
	}
	if p.Source != "" {
		pos = append(pos, p.Source)
	}
	if p.Leaf != nil {
		pos = append(pos, fmt.Sprintf("leaf %d", *p.Leaf))
	}
	if p.Receipt != nil {
		pos = append(pos, fmt.Sprintf("receipt %d", *p.Receipt))
	}
	if p.HashIndex != nil {
		pos = append(pos, fmt.Sprintf("hash %d", *p.HashIndex))
	}
	return fmt.Sprintf("%s at %s: %s", p.Kind, strings.Join(pos, ", "), p.Detail)
}

func ptr(v int64) *int64 { return &v }

// Report is what Verify found.
type Report struct {
	Size        int64       `json:"size"`               // leaves checked
	Receipts    int64       `json:"receipts"`           // receipts stored
	Checkpoints int         `json:"checkpoints"`        // checkpoints checked (stored and external)
	Latest      *Checkpoint `json:"latest,omitempty"`   // the largest checkpoint that checked out
	Unsigned    int64       `json:"unsigned"`           // leaves after Latest: in the log, not yet signed
	Problems    []Problem   `json:"problems"`           // in log order, then receipts outside it
	Omitted     int         `json:"omitted,omitempty"`  // problems past the first 1000, not listed
	Verifier    string      `json:"verifier,omitempty"` // the key checkpoints were checked with
}

// OK reports whether the log checked out.
func (r Report) OK() bool { return len(r.Problems) == 0 && r.Omitted == 0 }

func (r *Report) add(p Problem) {
	if len(r.Problems) >= maxProblems {
		r.Omitted++
		return
	}
	r.Problems = append(r.Problems, p)
}

// pendingCheck is a checkpoint waiting for the rebuilt tree to reach its size.
type pendingCheck struct {
	c      Checkpoint
	stored int64  // size it is stored under; -1 for external ones
	source string // "" for stored ones
}

// Verify checks the whole evidence log of st against the receipts it
// stores and every checkpoint, stored or given in external (signed notes
// kept elsewhere, e.g. published ones):
//
//   - every leaf's receipt exists and hashes to the leaf hash stored with
//     it; every receipt is a leaf exactly once; no leaf is missing;
//   - every stored hash is the one tlog gives for its children, none is
//     missing and none is left over;
//   - every checkpoint verifies with v, and the tree rebuilt from the
//     receipt bodies alone (not from stored hashes) at its size has the
//     root it signed; a checkpoint beyond the log's size means leaves were
//     removed. Two checkpoints that both match the rebuilt tree are
//     consistent with each other (one is a prefix of the other).
//
// Each problem names its position. The log is read in chunks, in O(log n)
// memory, without a long transaction; leaves appended while Verify runs
// are left for the next run. The error is for failing to read the store.
func Verify(ctx context.Context, st VerifyReader, v note.Verifier, external ...[]byte) (Report, error) {
	var rep Report
	if v != nil {
		rep.Verifier = fmt.Sprintf("%s+%08x", v.Name(), v.KeyHash())
	}
	// Read the latest checkpoint's size before the log's: checkpoints at or
	// below it existed when the size was read, so one above the size shows
	// removed leaves, while a newer one may just be ahead of our read.
	latest, haveLatest, err := st.LatestCheckpoint(ctx)
	if err != nil {
		return Report{}, err
	}
	stats, err := st.LogStats(ctx)
	if err != nil {
		return Report{}, err
	}
	n := stats.Size
	rep.Size, rep.Receipts = n, stats.Receipts
	checkedUpTo := n
	if haveLatest && latest.Size > n {
		checkedUpTo = latest.Size
	}

	ext := parseExternal(&rep, v, external)
	cps := &checkpointCursor{st: st, after: -1, limit: checkedUpTo, ext: ext}
	w := walker{rep: &rep, v: v, d: newTree(), bad: map[int64]bool{}, pending: map[int64]pendingLeaf{}}
	if err := w.walk(ctx, st, cps, n); err != nil {
		return Report{}, err
	}
	w.flush()
	if err := w.checkpointsBeyond(ctx, cps, n); err != nil {
		return Report{}, err
	}
	reportStats(&rep, stats)
	if w.latest != nil {
		rep.Latest = w.latest
		rep.Unsigned = n - w.latest.Size
	} else {
		rep.Unsigned = n
	}
	return rep, nil
}

// parseExternal parses the external checkpoints, reporting those that do
// not parse or verify with v, and returns the others by size.
func parseExternal(rep *Report, v note.Verifier, external [][]byte) []pendingCheck {
	var ext []pendingCheck
	for i, msg := range external {
		src := fmt.Sprintf("external %d", i+1)
		c, err := ParseCheckpoint(msg, v)
		if err != nil {
			rep.Checkpoints++
			rep.add(checkpointProblem(err, nil, src))
			continue
		}
		ext = append(ext, pendingCheck{c: c, stored: -1, source: src})
	}
	slices.SortFunc(ext, func(a, b pendingCheck) int { return cmp.Compare(a.c.Size, b.c.Size) })
	return ext
}

// walk checks the log's n leaves in chunks, and after each leaf the
// checkpoints of the tree that ends there (first those of the empty tree).
func (w *walker) walk(ctx context.Context, st LeafReader, cps *checkpointCursor, n int64) error {
	// Checkpoints of the empty tree.
	if err := w.checkpointsAt(ctx, cps, 0); err != nil {
		return err
	}
	for lo := int64(0); lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		leaves, err := st.LogLeaves(ctx, lo, hi)
		if err != nil {
			return err
		}
		stored, err := st.LogHashes(ctx, tlog.StoredHashIndex(0, lo), tlog.StoredHashIndex(0, hi))
		if err != nil {
			return err
		}
		for idx := lo; idx < hi; idx++ {
			var lf *store.LogLeaf
			if len(leaves) > 0 && leaves[0].Index == idx {
				lf, leaves = &leaves[0], leaves[1:]
			}
			if err := w.leaf(idx, lf, stored); err != nil {
				return err
			}
			if err := w.checkpointsAt(ctx, cps, idx+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkpointsBeyond reports the checkpoints left once the walk is done:
// they sign more leaves than the log's n has.
func (w *walker) checkpointsBeyond(ctx context.Context, cps *checkpointCursor, n int64) error {
	for {
		pc, ok, err := cps.next(ctx)
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
		w.rep.Checkpoints++
		if p, ok := w.signature(&pc); !ok {
			w.rep.add(p)
			continue
		}
		w.rep.add(Problem{Kind: KindCheckpointBeyondLog, Checkpoint: ptr(pc.c.Size), Source: pc.source,
			Detail: fmt.Sprintf("signs %d leaves but the log has %d: leaves [%d, %d) were removed", pc.c.Size, n, n, pc.c.Size)})
	}
}

// reportStats reports what the store's counts show: stored hashes past the
// log's end, and receipts that no leaf or several leaves name.
func reportStats(rep *Report, stats store.LogStats) {
	n := stats.Size
	if want := tlog.StoredHashCount(n); stats.MaxHash >= want {
		rep.add(Problem{Kind: KindHashExtra, HashIndex: ptr(stats.MaxHash),
			Detail: fmt.Sprintf("stored hashes reach index %d but %d leaves account for %d: leaves at the end were removed", stats.MaxHash, n, want)})
	}
	for _, id := range stats.Unlogged {
		rep.add(Problem{Kind: KindReceiptNotInLog, Receipt: ptr(id), Detail: "no leaf of the log names this receipt"})
	}
	for _, id := range stats.DuplicateLeaf {
		rep.add(Problem{Kind: KindReceiptDuplicate, Receipt: ptr(id), Detail: "more than one leaf names this receipt"})
	}
}

// checkpointProblem turns a ParseCheckpoint error into a problem.
func checkpointProblem(err error, size *int64, source string) Problem {
	kind := KindCheckpointMalformed
	if errors.Is(err, ErrBadSignature) {
		kind = KindCheckpointBadSignature
	}
	return Problem{Kind: kind, Checkpoint: size, Source: source, Detail: err.Error()}
}

// checkpointCursor yields stored checkpoints (in pages, by size, up to
// limit) merged with external ones, smallest size first.
type checkpointCursor struct {
	st    CheckpointReader
	after int64 // last stored size read
	limit int64 // stored sizes above it are not read
	page  []store.Checkpoint
	done  bool
	ext   []pendingCheck
}

const checkpointPage = 512

// fill reads the next page of stored checkpoints when the last is used up.
func (c *checkpointCursor) fill(ctx context.Context) error {
	if len(c.page) > 0 || c.done {
		return nil
	}
	page, err := c.st.Checkpoints(ctx, c.after, checkpointPage)
	if err != nil {
		return err
	}
	for len(page) > 0 && page[len(page)-1].Size > c.limit {
		page = page[:len(page)-1]
		c.done = true
	}
	if len(page) < checkpointPage {
		c.done = true
	}
	if len(page) > 0 {
		c.after = page[len(page)-1].Size
	}
	c.page = page
	return nil
}

// next returns the next checkpoint; stored ones are not yet parsed
// (c.stored is set and c.c.Note holds the note).
func (c *checkpointCursor) next(ctx context.Context) (pendingCheck, bool, error) {
	if err := c.fill(ctx); err != nil {
		return pendingCheck{}, false, err
	}
	switch {
	case len(c.page) == 0 && len(c.ext) == 0:
		return pendingCheck{}, false, nil
	case len(c.page) > 0 && (len(c.ext) == 0 || c.page[0].Size <= c.ext[0].c.Size):
		s := c.page[0]
		c.page = c.page[1:]
		return pendingCheck{c: Checkpoint{Size: s.Size, Time: s.Time, Note: string(s.Note)}, stored: s.Size}, true, nil
	default:
		e := c.ext[0]
		c.ext = c.ext[1:]
		return e, true, nil
	}
}

// peek returns the size the next checkpoint is ordered by, or -1.
func (c *checkpointCursor) peek(ctx context.Context) (int64, error) {
	if err := c.fill(ctx); err != nil {
		return -1, err
	}
	size := int64(-1)
	if len(c.page) > 0 {
		size = c.page[0].Size
	}
	if len(c.ext) > 0 && (size < 0 || c.ext[0].c.Size < size) {
		size = c.ext[0].c.Size
	}
	return size, nil
}

// pendingLeaf is a leaf whose receipt does not hash to its stored leaf
// hash; the stored hash one level up decides which of the two changed.
type pendingLeaf struct {
	receipt int64
	stored  []byte
}

// walker rebuilds the tree from receipt bodies (d) and compares it with
// the stored hashes as it goes.
type walker struct {
	rep *Report
	v   note.Verifier
	d   *tree // the tree of receipt bodies
	// bad marks stored hashes that differ from d, on d's frontier and the
	// current leaf's path, so a difference is reported once, where it
	// starts, not again at every ancestor.
	bad map[int64]bool
	// pending leaves wait for the hash above them.
	pending map[int64]pendingLeaf
	// lastGood is the largest size at which a checkpoint matched.
	lastGood int64
	latest   *Checkpoint
}

// leaf checks leaf idx (lf nil when its row is gone) and its stored hashes.
func (w *walker) leaf(idx int64, lf *store.LogLeaf, stored map[int64][]byte) error {
	base := tlog.StoredHashIndex(0, idx)
	sLeaf, haveLeafHash := stored[base]
	var dLeaf tlog.Hash
	switch {
	case lf == nil:
		w.rep.add(Problem{Kind: KindLeafMissing, Leaf: ptr(idx), Detail: "the leaf row is gone"})
		dLeaf = standIn(sLeaf)
	case lf.Missing:
		w.rep.add(Problem{Kind: KindReceiptMissing, Leaf: ptr(idx), Receipt: ptr(lf.ReceiptID), Detail: "the receipt this leaf names is gone"})
		dLeaf = standIn(sLeaf)
	default:
		dLeaf = tlog.RecordHash(lf.Body)
	}
	hs, err := w.d.add(dLeaf)
	if err != nil {
		return err
	}
	m := len(hs) - 1
	for i, h := range hs {
		x := base + int64(i)
		s, ok := stored[x]
		level, k := i, idx>>uint(i)
		first := k << uint(level)
		switch {
		case !ok:
			w.rep.add(Problem{Kind: KindHashMissing, HashIndex: ptr(x), Leaf: ptr(first), Detail: fmt.Sprintf("stored hash of level %d over leaves [%d, %d) is gone", level, first, first+1<<uint(level))})
			w.bad[x] = true
		case string(s) != string(h[:]):
			w.bad[x] = true
			if i == 0 {
				if lf != nil && !lf.Missing && haveLeafHash {
					// Decided by the stored hash one level up (see resolve).
					w.pending[idx] = pendingLeaf{receipt: lf.ReceiptID, stored: s}
				}
				continue
			}
			left := tlog.StoredHashIndex(i-1, idx>>uint(i-1)-1)
			w.resolve(idx, i, s, h)
			if w.bad[left] || w.bad[x-1] {
				continue // follows from a difference below, reported there
			}
			w.rep.add(Problem{Kind: KindHashMismatch, HashIndex: ptr(x), Leaf: ptr(first),
				Detail: fmt.Sprintf("stored hash of level %d over leaves [%d, %d) is not the hash of its children", level, first, first+1<<uint(level))})
		default:
			if i > 0 {
				w.resolve(idx, i, s, h)
			}
		}
	}
	// Keep only the frontier: the hashes merged into the new top are done.
	for i := range m {
		x := tlog.StoredHashIndex(i, idx>>uint(i)-1)
		delete(w.bad, x)
	}
	for i := range m {
		delete(w.bad, base+int64(i))
	}
	return nil
}

// resolve decides pending leaves under the level-1 hash just computed for
// leaf idx (i == 1): if the stored level-1 hash agrees with the hash of
// the receipts, the stored leaf hash was changed; otherwise the receipt
// was.
func (w *walker) resolve(idx int64, i int, stored []byte, rebuilt tlog.Hash) {
	if i != 1 {
		return
	}
	agrees := string(stored) == string(rebuilt[:])
	for _, leaf := range []int64{idx - 1, idx} {
		p, ok := w.pending[leaf]
		if !ok {
			continue
		}
		delete(w.pending, leaf)
		w.reportLeaf(leaf, p, agrees)
	}
}

func (w *walker) reportLeaf(leaf int64, p pendingLeaf, storedHashChanged bool) {
	x := tlog.StoredHashIndex(0, leaf)
	if storedHashChanged {
		w.rep.add(Problem{Kind: KindHashMismatch, Leaf: ptr(leaf), Receipt: ptr(p.receipt), HashIndex: ptr(x),
			Detail: "the stored leaf hash differs from the receipt's, which the hash above it still agrees with"})
		return
	}
	detail := "the receipt no longer hashes to the leaf hash stored when it was appended"
	if !w.hasParent(leaf) {
		detail += " (or that stored hash was changed: no hash above it yet tells which)"
	}
	w.rep.add(Problem{Kind: KindReceiptModified, Leaf: ptr(leaf), Receipt: ptr(p.receipt), HashIndex: ptr(x), Detail: detail})
}

// hasParent reports whether leaf's level-1 hash exists in a tree of w.d.n
// leaves.
func (w *walker) hasParent(leaf int64) bool { return leaf|1 < w.d.n }

// flush reports leaves still pending at the end of the log.
func (w *walker) flush() {
	leaves := make([]int64, 0, len(w.pending))
	for l := range w.pending {
		leaves = append(leaves, l)
	}
	slices.Sort(leaves)
	for _, l := range leaves {
		w.reportLeaf(l, w.pending[l], false)
	}
	clear(w.pending)
}

// standIn is the leaf hash used for a leaf whose receipt is gone: the
// stored one, so the rest of the tree can still be checked.
func standIn(stored []byte) tlog.Hash {
	var h tlog.Hash
	copy(h[:], stored)
	return h
}

// checkpointsAt checks every checkpoint of the given size against the
// tree rebuilt so far (size leaves).
func (w *walker) checkpointsAt(ctx context.Context, cps *checkpointCursor, size int64) error {
	for {
		s, err := cps.peek(ctx)
		if err != nil {
			return err
		}
		if s != size {
			return nil
		}
		pc, _, err := cps.next(ctx)
		if err != nil {
			return err
		}
		w.rep.Checkpoints++
		p, ok := w.signature(&pc)
		if !ok {
			w.rep.add(p)
			continue
		}
		if pc.stored >= 0 && pc.c.Size != pc.stored {
			w.rep.add(Problem{Kind: KindCheckpointSizeMismatch, Checkpoint: ptr(pc.stored),
				Detail: fmt.Sprintf("stored as size %d but signs size %d", pc.stored, pc.c.Size)})
			continue
		}
		root, err := w.d.root()
		if err != nil {
			return err
		}
		if root != pc.c.Root {
			w.rep.add(Problem{Kind: KindCheckpointRootMismatch, Checkpoint: ptr(size), Source: pc.source, Leaf: ptr(w.lastGood),
				Detail: fmt.Sprintf("the receipts' tree of %d leaves is not the one signed: a receipt in leaves [%d, %d) (or before, see above) differs from what was signed", size, w.lastGood, size)})
			continue
		}
		w.lastGood = size
		if w.latest == nil || size >= w.latest.Size {
			c := pc.c
			w.latest = &c
		}
	}
}

// signature parses a checkpoint (checking its signature) in place; on
// failure it returns the problem.
func (w *walker) signature(pc *pendingCheck) (Problem, bool) {
	if pc.stored < 0 {
		return Problem{}, true // external: parsed when given
	}
	c, err := ParseCheckpoint([]byte(pc.c.Note), w.v)
	if err != nil {
		return checkpointProblem(err, ptr(pc.stored), ""), false
	}
	pc.c = c
	return Problem{}, true
}
