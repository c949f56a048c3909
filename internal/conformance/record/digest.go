package record

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/cordon-project/cordon/internal/policy"
)

// Bind digests the bindings given (each path optional: None when "").
func Bind(config, policyPath, rootfs string) (Bindings, error) {
	b := Bindings{Config: None, PolicySet: None, Rootfs: None, ConfigPath: config, PolicyPath: policyPath, RootfsPath: rootfs}
	var err error
	if config != "" {
		if b.Config, err = FileDigest(config); err != nil {
			return b, fmt.Errorf("conformance record: config: %w", err)
		}
	}
	if policyPath != "" {
		if b.PolicySet, err = PolicyDigest(policyPath); err != nil {
			return b, fmt.Errorf("conformance record: policy: %w", err)
		}
	}
	if rootfs != "" {
		if b.Rootfs, err = RootfsDigest(rootfs); err != nil {
			return b, fmt.Errorf("conformance record: rootfs: %w", err)
		}
	}
	return b, nil
}

// FileDigest is "sha256:<hex>" of a regular file (a config, the binary):
// the form receipts carry as config_digest.
func FileDigest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s: not a regular file", path)
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// PolicyDigest is the policy set digest (policy.Set.Digest) of a policy
// file, or of a directory's *.cedar files in name order; the set must
// load and validate.
func PolicyDigest(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	files := []string{path}
	if fi.IsDir() {
		if files, err = filepath.Glob(filepath.Join(path, "*.cedar")); err != nil {
			return "", err
		}
		slices.Sort(files)
		if len(files) == 0 {
			return "", fmt.Errorf("%s: no *.cedar files", path)
		}
	}
	s, err := policy.Load(files...)
	if err != nil {
		return "", err
	}
	return s.Digest(), nil
}

// RootfsDigest is "sha256:<hex>" of a directory tree, never following a
// symlink: for each entry in lexical path order, its path relative to the
// root, its type and permission bits, and the SHA-256 of a regular file's
// contents or a symlink's target (each field length-prefixed). Owners and
// times are not bound (copying a tree keeps its digest).
func RootfsDigest(root string) (string, error) {
	fi, err := os.Lstat(root)
	if err != nil {
		return "", err
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%s: not a directory", root)
	}
	h := sha256.New()
	field := func(b []byte) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		field([]byte(filepath.ToSlash(rel)))
		field([]byte(fmt.Sprintf("%s %#o", typeOf(info.Mode()), info.Mode().Perm()|info.Mode()&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky))))
		switch {
		case info.Mode().IsRegular():
			sum, err := fileSum(p)
			if err != nil {
				return err
			}
			field(sum)
		case info.Mode()&fs.ModeSymlink != 0:
			t, err := os.Readlink(p)
			if err != nil {
				return err
			}
			field([]byte(t))
		default:
			field(nil)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

func typeOf(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "dir"
	case m.IsRegular():
		return "file"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m&fs.ModeNamedPipe != 0:
		return "fifo"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeCharDevice != 0:
		return "chardev"
	case m&fs.ModeDevice != 0:
		return "blockdev"
	}
	return "other"
}

// fileSum hashes a regular file opened without following a symlink.
func fileSum(p string) ([]byte, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}

// hexOf returns the hex of a "sha256:<hex>" digest, checked.
func hexOf(d string) (string, error) {
	h, ok := strings.CutPrefix(d, "sha256:")
	if b, err := hex.DecodeString(h); !ok || err != nil || len(b) != sha256.Size || hex.EncodeToString(b) != h {
		return "", fmt.Errorf("%q is not sha256:<64 lowercase hex digits>", d)
	}
	return h, nil
}

// strictDecode decodes one JSON value with no unknown fields.
func strictDecode(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return errors.New("data after the JSON value")
	}
	return nil
}
