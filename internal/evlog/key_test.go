package evlog

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/testkit"
	"golang.org/x/mod/sumdb/note"
)

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode()
}

func TestOpenGeneratesKeyOnce(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	l := openLog(t, st, dir)
	kd := KeyDir(dir)
	if m := mode(t, kd); m.Perm() != 0o700 || !m.IsDir() {
		t.Errorf("key dir mode %v, want drwx------", m)
	}
	if m := mode(t, filepath.Join(kd, KeyFile)); m != 0o600 {
		t.Errorf("key mode %v, want -rw-------", m)
	}
	if m := mode(t, filepath.Join(kd, PubFile)); m != 0o644 {
		t.Errorf("public key mode %v, want -rw-r--r--", m)
	}
	if !strings.HasPrefix(l.VerifierKey(), "cordon-evidence@") {
		t.Errorf("key name %q, want cordon-evidence@<host>", l.VerifierKey())
	}
	v, err := LoadVerifier(filepath.Join(kd, PubFile))
	if err != nil || v.Name() != l.Verifier().Name() || v.KeyHash() != l.Verifier().KeyHash() {
		t.Fatalf("LoadVerifier(log.pub) = %v, %v, want the log's key", v, err)
	}
	// Reopening loads the same key, and repairs a changed public key file.
	if err := os.WriteFile(filepath.Join(kd, PubFile), []byte("junk\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	l2 := openLog(t, st, dir)
	if l2.VerifierKey() != l.VerifierKey() {
		t.Errorf("reopened key %q, want %q", l2.VerifierKey(), l.VerifierKey())
	}
	if b, _ := os.ReadFile(filepath.Join(kd, PubFile)); strings.TrimSpace(string(b)) != l.VerifierKey() {
		t.Errorf("log.pub = %q, want %q", b, l.VerifierKey())
	}
	// Checkpoints signed through one handle verify with the other's key.
	record(t, st, 0, 2)
	c := checkpoint(t, l)
	if _, err := ParseCheckpoint([]byte(c.Note), l2.Verifier()); err != nil {
		t.Errorf("ParseCheckpoint with the reopened key = %v", err)
	}
}

func TestGenerateKeyNeverReplaces(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "evidence")
	vkey, err := GenerateKey(dir, "test-log")
	if err != nil {
		t.Fatalf("GenerateKey = %v", err)
	}
	if _, err := note.NewVerifier(vkey); err != nil || !strings.HasPrefix(vkey, "test-log+") {
		t.Errorf("GenerateKey = %q (%v), want a test-log verifier key", vkey, err)
	}
	before, _ := os.ReadFile(filepath.Join(dir, KeyFile))
	if _, err := GenerateKey(dir, "test-log"); !errors.Is(err, ErrKeyExists) {
		t.Errorf("GenerateKey over a key = %v, want ErrKeyExists", err)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, KeyFile)); string(after) != string(before) {
		t.Errorf("the key changed")
	}
	if _, err := GenerateKey(filepath.Join(t.TempDir(), "evidence"), "bad name"); err == nil {
		t.Errorf("GenerateKey(name with a space) = nil error")
	}
	// A dangling symlink in the key's place is not followed.
	d2 := filepath.Join(t.TempDir(), "evidence")
	if err := os.Mkdir(d2, 0o700); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.Symlink(target, filepath.Join(d2, KeyFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := GenerateKey(d2, "test-log"); !errors.Is(err, ErrKeyExists) {
		t.Errorf("GenerateKey over a dangling symlink = %v, want ErrKeyExists", err)
	}
	if _, err := os.Stat(target); err == nil {
		t.Errorf("GenerateKey wrote through a symlink")
	}
}

func TestOpenRefusesUnsafeKey(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, kd string)
	}{
		{"key readable by group", func(t *testing.T, kd string) { chmod(t, filepath.Join(kd, KeyFile), 0o640) }},
		{"key readable by others", func(t *testing.T, kd string) { chmod(t, filepath.Join(kd, KeyFile), 0o604) }},
		{"key dir open to others", func(t *testing.T, kd string) { chmod(t, kd, 0o755) }},
		{"key is a symlink", func(t *testing.T, kd string) {
			real := filepath.Join(t.TempDir(), "real.key")
			if err := os.Rename(filepath.Join(kd, KeyFile), real); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(real, filepath.Join(kd, KeyFile)); err != nil {
				t.Fatal(err)
			}
		}},
		{"key owned by another user", func(t *testing.T, kd string) {
			testkit.RequireRoot(t) // to chown
			if err := os.Chown(filepath.Join(kd, KeyFile), 12345, 12345); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			st := openStore(t, dir)
			openLog(t, st, dir)
			tc.setup(t, KeyDir(dir))
			if _, err := Open(st, dir); !errors.Is(err, ErrUnsafeKey) {
				t.Errorf("Open = %v, want ErrUnsafeKey", err)
			}
		})
	}
}

func chmod(t *testing.T, path string, m os.FileMode) {
	t.Helper()
	if err := os.Chmod(path, m); err != nil {
		t.Fatal(err)
	}
}

// A lost key is not silently replaced once it has signed checkpoints.
func TestOpenRefusesNewKeyOverCheckpoints(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	l := openLog(t, st, dir)
	record(t, st, 0, 3)
	checkpoint(t, l)
	if err := os.Remove(filepath.Join(KeyDir(dir), KeyFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(st, dir); !errors.Is(err, ErrKeyMissing) {
		t.Errorf("Open without the key that signed the checkpoints = %v, want ErrKeyMissing", err)
	}
	if _, err := os.Stat(filepath.Join(KeyDir(dir), KeyFile)); err == nil {
		t.Errorf("Open made a new key")
	}
}
