// Package attest signs and verifies cordon's attestations: a DSSE envelope
// (https://github.com/secure-systems-lab/dsse, PAE as its protocol.md
// defines it) over an in-toto Statement v1, signed with ed25519 by the
// evidence log's key (internal/evlog: the same key as checkpoints, so one
// log.pub verifies both). Append logs an envelope in the evidence log as a
// digest-only receipt (Broker "evidence") and keeps the envelope itself in
// the store, so `cordon conformance verify --log` proves inclusion and
// compares a record with the copy logged.
//
// Plane: root (signing reads the 0600 key; Append writes the store) and CLI
// (Verify and ParseEnvelope need only the public key). Envelopes handed in
// are untrusted input: ParseEnvelope and Verify must never accept a record
// whose bytes differ from what was signed in a way that changes its
// meaning, never read more than MaxEnvelope bytes, and never panic. It must
// never sign anything with a key other than the evidence log's.
package attest
