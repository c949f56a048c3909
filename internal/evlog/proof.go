package evlog

import (
	"context"
	"fmt"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// Proof shows that a receipt is leaf Leaf of the tree a signed checkpoint
// commits to. Whoever holds the verifier key checks it with Check, with
// nothing else from the host.
type Proof struct {
	ReceiptID  int64       `json:"receipt_id"`
	Leaf       int64       `json:"leaf"`       // leaf index
	Receipt    string      `json:"receipt"`    // the receipt body as stored: the leaf's data
	TreeSize   int64       `json:"tree_size"`  // leaves the checkpoint signs
	Root       tlog.Hash   `json:"root"`       // its tree hash (base64)
	Hashes     []tlog.Hash `json:"hashes"`     // tlog.RecordProof, base64 each
	Checkpoint string      `json:"checkpoint"` // the signed checkpoint note
}

// Prove returns the inclusion proof of a receipt in the tree of the latest
// stored checkpoint. It fails with ErrNotCheckpointed when no checkpoint
// covers the receipt yet, and with store.ErrNotInLog when the receipt is
// not a leaf. Prove checks no signature: Check does.
func Prove(ctx context.Context, st ProofReader, receiptID int64) (Proof, error) {
	idx, err := st.LogIndex(ctx, receiptID)
	if err != nil {
		return Proof{}, err
	}
	latest, ok, err := st.LatestCheckpoint(ctx)
	if err != nil {
		return Proof{}, err
	}
	if !ok || latest.Size <= idx {
		return Proof{}, fmt.Errorf("receipt %d (leaf %d): %w", receiptID, idx, ErrNotCheckpointed)
	}
	c, err := unverifiedTree(latest.Note)
	if err != nil {
		return Proof{}, fmt.Errorf("checkpoint of size %d: %w", latest.Size, err)
	}
	if c.Size != latest.Size {
		return Proof{}, fmt.Errorf("%w: checkpoint stored as size %d signs size %d", ErrInconsistent, latest.Size, c.Size)
	}
	_, body, err := st.LogLeaf(ctx, idx)
	if err != nil {
		return Proof{}, err
	}
	hs, err := tlog.ProveRecord(c.Size, idx, st.LogHashReader(ctx))
	if err != nil {
		return Proof{}, fmt.Errorf("prove receipt %d (leaf %d) in a tree of %d: %w", receiptID, idx, c.Size, err)
	}
	return Proof{ReceiptID: receiptID, Leaf: idx, Receipt: string(body), TreeSize: c.Size, Root: c.Root,
		Hashes: hs, Checkpoint: c.Note}, nil
}

// Check verifies the proof: the checkpoint is signed by v, signs TreeSize
// leaves with hash Root, and the receipt's hash with Hashes leads to Root
// from position Leaf.
func (p Proof) Check(v note.Verifier) error {
	c, err := ParseCheckpoint([]byte(p.Checkpoint), v)
	if err != nil {
		return err
	}
	if c.Size != p.TreeSize || c.Root != p.Root {
		return fmt.Errorf("%w: proof names a tree of %d leaves with root %v; its checkpoint signs %d with %v", ErrProofFailed, p.TreeSize, p.Root, c.Size, c.Root)
	}
	if p.Leaf < 0 || p.Leaf >= c.Size {
		return fmt.Errorf("%w: leaf %d is outside a tree of %d leaves", ErrProofFailed, p.Leaf, c.Size)
	}
	if err := tlog.CheckRecord(p.Hashes, c.Size, c.Root, p.Leaf, tlog.RecordHash([]byte(p.Receipt))); err != nil {
		return fmt.Errorf("%w: receipt %d is not leaf %d of the signed tree: %v", ErrProofFailed, p.ReceiptID, p.Leaf, err)
	}
	return nil
}
