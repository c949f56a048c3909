package evlog

import (
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSigningKeyMatchesLogPub: the raw key LoadSigningKey returns signs what
// the key in log.pub verifies, and both carry the same key id.
func TestSigningKeyMatchesLogPub(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "evidence")
	vkey, err := GenerateKey(dir, "cordon-evidence@test")
	if err != nil {
		t.Fatal(err)
	}
	priv, id, err := LoadSigningKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	pubText, err := os.ReadFile(filepath.Join(dir, PubFile))
	if err != nil {
		t.Fatal(err)
	}
	pub, name, err := PublicKeyFromVkey(string(pubText))
	if err != nil {
		t.Fatal(err)
	}
	if name != "cordon-evidence@test" {
		t.Errorf("name = %q", name)
	}
	if got := KeyID(name, pub); got != id || !strings.Contains(vkey, "+"+id+"+") {
		t.Errorf("key id %q, KeyID %q, vkey %q", id, got, vkey)
	}
	msg := []byte("a record")
	if !ed25519.Verify(pub, msg, ed25519.Sign(priv, msg)) {
		t.Fatal("log.pub does not verify what the signing key signs")
	}
	// Control: another key's signature does not verify.
	_, other, _ := ed25519.GenerateKey(nil)
	if ed25519.Verify(pub, msg, ed25519.Sign(other, msg)) {
		t.Fatal("another key's signature verified")
	}
}

// TestLoadSigningKeyRefusesUnsafeFiles: the same checks as the checkpoint
// signer: a group-readable key or a symlink is refused.
func TestLoadSigningKeyRefusesUnsafeFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "evidence")
	if _, err := GenerateKey(dir, "k"); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, KeyFile)
	if err := os.Chmod(key, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadSigningKey(dir); !errors.Is(err, ErrUnsafeKey) {
		t.Errorf("group-readable key: err = %v, want ErrUnsafeKey", err)
	}
	if err := os.Chmod(key, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadSigningKey(dir); err != nil {
		t.Fatalf("control: %v", err)
	}
	other := filepath.Join(t.TempDir(), "evidence")
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(key, filepath.Join(other, KeyFile)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadSigningKey(other); !errors.Is(err, ErrUnsafeKey) {
		t.Errorf("symlinked key: err = %v, want ErrUnsafeKey", err)
	}
}

func TestPublicKeyFromVkeyRefusesBadKeys(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "evidence")
	vkey, err := GenerateKey(dir, "k")
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.SplitN(vkey, "+", 3)
	for _, bad := range []string{"", "k", "k+00000000+" + parts[2], parts[0] + "+" + parts[1] + "+AAAA", "x+" + parts[1] + "+" + parts[2]} {
		if _, _, err := PublicKeyFromVkey(bad); !errors.Is(err, ErrBadPublicKey) {
			t.Errorf("PublicKeyFromVkey(%q) err = %v", bad, err)
		}
	}
}
