package evlog

import (
	"fmt"

	"golang.org/x/mod/sumdb/tlog"
)

// tree rebuilds a log in memory from leaf hashes, keeping only its frontier:
// the hashes of the complete subtrees of the first n leaves (at most one per
// level). It is a tlog.HashReader for exactly the reads tlog makes to append
// leaf n (tlog.StoredHashesForRecordHash) and to hash the tree of n leaves
// (tlog.TreeHash), so a log of any size is rebuilt in O(log n) memory with
// tlog's own code.
type tree struct {
	n     int64
	front map[int64]tlog.Hash // stored-hash index -> hash
}

func newTree() *tree { return &tree{front: map[int64]tlog.Hash{}} }

// treeAt starts from the frontier of a tree of n leaves: the hashes
// tlog.TreeHash(n, …) reads, at the indexes it reads them.
func treeAt(n int64, indexes []int64, hashes []tlog.Hash) *tree {
	t := &tree{n: n, front: make(map[int64]tlog.Hash, len(indexes))}
	for i, x := range indexes {
		t.front[x] = hashes[i]
	}
	return t
}

func (t *tree) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, x := range indexes {
		h, ok := t.front[x]
		if !ok {
			return nil, fmt.Errorf("hash %d is not on the frontier of a tree of %d leaves", x, t.n)
		}
		out[i] = h
	}
	return out, nil
}

// add appends a leaf and returns the hashes tlog stores for it, from
// tlog.StoredHashIndex(0, n) on: the leaf hash, then one hash per subtree
// the leaf completes.
func (t *tree) add(leaf tlog.Hash) ([]tlog.Hash, error) {
	hs, err := tlog.StoredHashesForRecordHash(t.n, leaf, t)
	if err != nil {
		return nil, err
	}
	m := len(hs) - 1
	for i := range m {
		delete(t.front, tlog.StoredHashIndex(i, t.n>>uint(i)-1)) // merged into hs[m]
	}
	t.front[tlog.StoredHashIndex(0, t.n)+int64(m)] = hs[m]
	t.n++
	return hs, nil
}

// root is the tree hash of the leaves added so far.
func (t *tree) root() (tlog.Hash, error) { return tlog.TreeHash(t.n, t) }

// recorder is a tlog.HashReader that remembers what it read.
type recorder struct {
	r       tlog.HashReader
	indexes []int64
	hashes  []tlog.Hash
}

func (r *recorder) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	hs, err := r.r.ReadHashes(indexes)
	if err == nil {
		r.indexes = append(r.indexes, indexes...)
		r.hashes = append(r.hashes, hs...)
	}
	return hs, err
}
