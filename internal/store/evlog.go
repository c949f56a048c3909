package store

// logSchema holds the evidence log: the Merkle tree's stored hashes and
// the signed checkpoints (version 3).
const logSchema = `
`
