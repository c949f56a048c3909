package evlog

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/mod/sumdb/note"
)

// ErrBadPublicKey: a verifier key that is not a note ed25519 vkey.
var ErrBadPublicKey = errors.New("not an evidence log public key")

// LoadSigningKey reads dir's signer key (KeyDir(stateDir)) with the same
// file checks as the checkpoint signer (no symlink, a regular file owned by
// the caller, mode closed to group and others) and returns the raw ed25519
// key and its key id: the note key hash (8 hex digits) that log.pub
// carries, so one log.pub verifies both checkpoints and signed records
// (internal/attest).
func LoadSigningKey(dir string) (ed25519.PrivateKey, string, error) {
	skey, path, err := readSignerKey(dir)
	if err != nil {
		return nil, "", err
	}
	if _, err := note.NewSigner(skey); err != nil { // checks the hash and the algorithm
		return nil, "", fmt.Errorf("evidence log key %s: %w", path, err)
	}
	parts := strings.SplitN(skey, "+", 5) // base64 may hold '+'; a name may not
	if len(parts) != 5 {
		return nil, "", fmt.Errorf("evidence log key %s: malformed signer key", path)
	}
	raw, err := base64.StdEncoding.DecodeString(parts[4])
	if err != nil || len(raw) != 1+ed25519.SeedSize || raw[0] != 1 {
		return nil, "", fmt.Errorf("evidence log key %s: malformed signer key: want an ed25519 key", path)
	}
	return ed25519.NewKeyFromSeed(raw[1:]), parts[3], nil
}

// PublicKeyFromVkey decodes a verifier key ("<name>+<hash>+<base64(1,
// ed25519 public key)>", the content of log.pub) into the raw ed25519 key
// and its name; the hash is checked against both. KeyID gives the key id.
func PublicKeyFromVkey(vkey string) (ed25519.PublicKey, string, error) {
	vkey = strings.TrimSpace(vkey)
	if _, err := note.NewVerifier(vkey); err != nil {
		return nil, "", fmt.Errorf("%w: %v", ErrBadPublicKey, err)
	}
	parts := strings.SplitN(vkey, "+", 3)
	if len(parts) != 3 {
		return nil, "", fmt.Errorf("%w: want name+hash+key", ErrBadPublicKey)
	}
	raw, err := base64.StdEncoding.DecodeString(parts[2])
	if err != nil || len(raw) != 1+ed25519.PublicKeySize || raw[0] != 1 {
		return nil, "", fmt.Errorf("%w: want an ed25519 key", ErrBadPublicKey)
	}
	return ed25519.PublicKey(raw[1:]), parts[0], nil
}

// KeyID is the note key hash of an ed25519 key named name (8 hex digits):
// the id LoadSigningKey returns and log.pub carries.
func KeyID(name string, pub ed25519.PublicKey) string {
	h := sha256.New()
	h.Write([]byte(name))
	h.Write([]byte("\n"))
	h.Write([]byte{1})
	h.Write(pub)
	return fmt.Sprintf("%08x", binary.BigEndian.Uint32(h.Sum(nil)))
}
