package evlog

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"unicode"
	"unicode/utf8"

	"golang.org/x/mod/sumdb/note"

	"github.com/cordon-project/cordon/internal/safefile"
)

// Key files, in KeyDir(stateDir).
const (
	// KeyFile holds the private signer key (note.GenerateKey's skey),
	// mode 0600. Whoever reads it can sign checkpoints.
	KeyFile = "log.key"
	// PubFile holds the verifier key (vkey), mode 0644: hand it to
	// whoever checks the log.
	PubFile = "log.pub"
)

// maxKeyFile bounds what is read from a key file.
const maxKeyFile = 4096

// KeyDir is the directory of the evidence log's keys under a state dir.
func KeyDir(stateDir string) string { return filepath.Join(stateDir, "evidence") }

// DefaultKeyName names a host's log key: "cordon-evidence@<hostname>".
func DefaultKeyName() string {
	host, _ := os.Hostname()
	host = strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) || r == '+' || !unicode.IsPrint(r) {
			return -1
		}
		return r
	}, host)
	if host == "" {
		host = "localhost"
	}
	return "cordon-evidence@" + host
}

// GenerateKey creates a new ed25519 signer key named name in dir (created
// 0700 if needed) and writes its verifier key to PubFile. It never replaces
// a key: if KeyFile exists it fails with ErrKeyExists. It returns the
// verifier key.
func GenerateKey(dir, name string) (vkey string, err error) {
	if !validKeyName(name) {
		return "", fmt.Errorf("evidence log key name %q: want 1 to 255 printable characters, no spaces or '+'", name)
	}
	if err := prepareKeyDir(dir); err != nil {
		return "", err
	}
	skey, vkey, err := note.GenerateKey(rand.Reader, name)
	if err != nil {
		return "", fmt.Errorf("generate evidence log key %q: %w", name, err)
	}
	if err := writeNew(filepath.Join(dir, KeyFile), []byte(skey+"\n")); err != nil {
		return "", err
	}
	if err := writePub(dir, vkey); err != nil {
		return "", err
	}
	return vkey, nil
}

// validKeyName is note's rule for key names, plus a length bound.
func validKeyName(name string) bool {
	return name != "" && len(name) <= 255 && utf8.ValidString(name) &&
		!strings.ContainsFunc(name, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) || r == '+' })
}

// prepareKeyDir creates dir (0700) and refuses one that is a symlink, is
// not owned by the caller, or is open to group or others.
func prepareKeyDir(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create evidence key dir %s: %w", dir, err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("evidence key dir %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("evidence key dir %s: %w: not a directory", dir, ErrUnsafeKey)
	}
	return checkPrivate(dir, fi)
}

// checkPrivate refuses a key file or directory owned by another user or
// accessible to group or others.
func checkPrivate(path string, fi fs.FileInfo) error {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		if euid := os.Geteuid(); int(st.Uid) != euid {
			return fmt.Errorf("%s: %w: owned by uid %d, not %d", path, ErrUnsafeKey, st.Uid, euid)
		}
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("%s: %w: mode %#o gives group or others access (chmod go= %s)", path, ErrUnsafeKey, perm, path)
	}
	return nil
}

// writeNew writes a 0600 file that must not exist yet (anything with the
// name, even a dangling symlink, is ErrKeyExists), atomically and never
// through a symlink (safefile).
func writeNew(path string, data []byte) error {
	err := safefile.WriteNew(path, data, 0o600)
	if errors.Is(err, safefile.ErrExists) {
		return fmt.Errorf("write %s: %w", path, ErrKeyExists)
	}
	return err
}

// writePub replaces PubFile atomically with vkey (mode 0644), never
// through a symlink.
func writePub(dir, vkey string) error {
	return safefile.WriteFile(filepath.Join(dir, PubFile), []byte(vkey+"\n"), 0o644)
}

// loadKey reads dir's signer key, refusing a symlink, a file that is not
// regular, not owned by the caller, or accessible to group or others. It
// returns the signer and its verifier key.
func loadKey(dir string) (note.Signer, string, error) {
	skey, path, err := readSignerKey(dir)
	if err != nil {
		return nil, "", err
	}
	signer, err := note.NewSigner(skey)
	if err != nil {
		return nil, "", fmt.Errorf("evidence log key %s: %w", path, err)
	}
	vkey, err := verifierKey(skey)
	if err != nil {
		return nil, "", fmt.Errorf("evidence log key %s: %w", path, err)
	}
	return signer, vkey, nil
}

// readSignerKey reads dir's KeyFile with loadKey's checks (no symlink, a
// regular file owned by the caller, closed to group and others, bounded)
// and returns its trimmed text and path.
func readSignerKey(dir string) (skey, path string, err error) {
	path = filepath.Join(dir, KeyFile)
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return "", path, fmt.Errorf("evidence log key %s: %w: a symlink", path, ErrUnsafeKey)
		}
		return "", path, fmt.Errorf("evidence log key: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", path, fmt.Errorf("evidence log key %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return "", path, fmt.Errorf("evidence log key %s: %w: not a regular file", path, ErrUnsafeKey)
	}
	if err := checkPrivate(path, fi); err != nil {
		return "", path, fmt.Errorf("evidence log key: %w", err)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return "", path, fmt.Errorf("evidence log key %s: %w", path, err)
	}
	if len(b) > maxKeyFile {
		return "", path, fmt.Errorf("evidence log key %s: longer than %d bytes", path, maxKeyFile)
	}
	return strings.TrimSpace(string(b)), path, nil
}

// verifierKey derives the verifier key of a signer key
// ("PRIVATE+KEY+<name>+<hash>+<base64(1, ed25519 seed)>"), which
// note.NewSigner has already checked.
func verifierKey(skey string) (string, error) {
	parts := strings.SplitN(skey, "+", 5) // base64 may hold '+'; a name may not
	if len(parts) != 5 {
		return "", errors.New("malformed signer key")
	}
	raw, err := base64.StdEncoding.DecodeString(parts[4])
	if err != nil || len(raw) != 1+ed25519.SeedSize || raw[0] != 1 {
		return "", errors.New("malformed signer key: want an ed25519 key")
	}
	pub := ed25519.NewKeyFromSeed(raw[1:]).Public().(ed25519.PublicKey)
	return note.NewEd25519VerifierKey(parts[2], pub)
}

// LoadVerifier reads a verifier key file (a PubFile, or any file holding
// one vkey line).
func LoadVerifier(path string) (note.Verifier, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("evidence log public key: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, fmt.Errorf("evidence log public key %s: %w", path, err)
	}
	if len(b) > maxKeyFile {
		return nil, fmt.Errorf("evidence log public key %s: longer than %d bytes", path, maxKeyFile)
	}
	v, err := note.NewVerifier(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("evidence log public key %s: %w", path, err)
	}
	return v, nil
}
