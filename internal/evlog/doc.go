// Package evlog owns cordon's evidence log: an append-only Merkle log
// (golang.org/x/mod/sumdb/tlog) whose leaves are the receipts of crossings,
// with checkpoints (signed tree heads) signed by an ed25519 key in
// golang.org/x/mod/sumdb/note format. See docs/evidence-log.md.
//
// Plane: root (`cordon run`, the daemon and `cordon evidence`, with the
// store open; it declares the store slices it reads in store.go).
//
// # How a receipt becomes evidence
//
// The store appends a receipt's leaf in the very transaction that inserts
// the receipt (internal/store, evlog.go): leaf i's data is exactly the
// receipt's stored body, and the tlog hashes the leaf completes are stored
// with it. The gateway answers the agent only after that transaction
// commits (its authority server group-commits up to 64 crossings at once), so
// no response leaves without its receipt being in the log. Signing is
// batched: [Log.Checkpoint], run periodically by [Log.RunCheckpointer] or
// on demand by `cordon evidence checkpoint`, signs the tree as it stands,
// after checking that the growth since the previous checkpoint matches the
// receipts and that the old tree is unchanged. [Verify] rebuilds the whole
// tree from the receipt bodies and checks every stored hash and every
// checkpoint; [Prove] gives one receipt's inclusion proof, which
// [Proof.Check] verifies with only the public key. Before a gateway
// starts, [Log.CheckLatest] makes the cheap check (O(log n) stored
// hashes) that the newest checkpoint still matches the log; it reads no
// receipt body, so a body changed under an older checkpoint is found by
// Verify only (run it regularly).
//
// # Threat model
//
// The store is cordon.db in the root-only state directory (0700, or 0711;
// store.Open refuses one that another user can write), and the signer key
// is KeyDir(stateDir)/log.key, 0600 in a 0700 directory, refused when a
// symlink, not owned by the caller, or open to group or others. The
// sandbox has no path to either: its mount namespace holds no host state
// directory, and the gateway process that parses agent traffic only sends
// requests to the privileged side, which stamps the sandbox's identity on
// each receipt and does the writes. An agent can cause receipts, never
// edit one.
//
// The log makes any later change to a receipt or checkpoint detectable by
// whoever holds the public key and an earlier checkpoint: changing,
// removing or inserting a receipt, a stored hash or a checkpoint is
// reported by Verify with its position. What it cannot do is stop someone
// with root on the host: they can rewrite the database and sign new
// checkpoints with the key, which lives on the same host. Checkpoints
// copied off the host (Verify's external argument) are what catch that.
//
// # What it must never do
//
//   - Never sign a checkpoint over a tree it has not checked against the
//     receipts and the previous checkpoint (Log.Checkpoint fails with
//     ErrInconsistent instead).
//   - Never change or delete a leaf, stored hash, receipt or checkpoint.
//   - Never put the signer key, or anything read from it, into a receipt,
//     a log line or anything the agent can see.
//   - Never panic on stored data: receipt bodies and checkpoint notes are
//     parsed as untrusted input (fuzzed).
package evlog
