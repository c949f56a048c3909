package evlog

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// Sentinel errors. Inspect them with errors.Is.
var (
	// ErrBadSignature: a checkpoint is not signed by the expected key (a
	// changed text, or another key's signature).
	ErrBadSignature = errors.New("checkpoint signature does not verify")
	// ErrMalformed: a checkpoint is not a signed tree note.
	ErrMalformed = errors.New("malformed checkpoint")
	// ErrInconsistent: the stored log does not match what was signed (or
	// its receipts); Log.Checkpoint refuses to sign over it.
	ErrInconsistent = errors.New("evidence log is inconsistent")
	// ErrNotCheckpointed: the receipt is in the log but no checkpoint
	// covers it yet.
	ErrNotCheckpointed = errors.New("receipt not yet covered by a checkpoint")
	// ErrProofFailed: an inclusion proof does not lead to its signed root.
	ErrProofFailed = errors.New("inclusion proof does not verify")
	// ErrKeyMissing: the signer key is gone but checkpoints signed with it
	// exist; a new key could not extend them.
	ErrKeyMissing = errors.New("evidence log key missing")
	// ErrKeyExists: GenerateKey found a key in place.
	ErrKeyExists = errors.New("evidence log key already exists")
	// ErrUnsafeKey: a key file or directory can be read or replaced by
	// someone other than its owner, or is a symlink.
	ErrUnsafeKey = errors.New("unsafe evidence log key")
)

// maxNote bounds a checkpoint note (a real one is about 200 bytes).
const maxNote = 64 << 10

// timePrefix starts the line a checkpoint adds after tlog's tree lines;
// tlog.ParseTree ignores extra lines, so the text stays a tlog tree note.
const timePrefix = "time "

// Checkpoint is a signed statement that the log had Size leaves with tree
// hash Root at Time.
//
// Its note's text is tlog.FormatTree's three lines followed by a time line:
//
//	go.sum database tree
//	1234
//	tQ3Sm4x5F0ki8U6W5b1B0p3m0g2mE1TkI8v5m6Nq4yU=
//	time 2026-03-01T12:00:00.000000001Z
//
// then a blank line and the ed25519 signature line of sumdb/note.
type Checkpoint struct {
	Size int64     `json:"size"`
	Root tlog.Hash `json:"root"`          // base64 in JSON
	Time time.Time `json:"time,omitzero"` // zero when the note has no time line
	Note string    `json:"note"`          // the signed note, as stored
}

// checkpointText is the text a checkpoint signs.
func checkpointText(t tlog.Tree, at time.Time) string {
	return string(tlog.FormatTree(t)) + timePrefix + at.UTC().Format(time.RFC3339Nano) + "\n"
}

// signCheckpoint signs the tree t at time at.
func signCheckpoint(s note.Signer, t tlog.Tree, at time.Time) (Checkpoint, error) {
	msg, err := note.Sign(&note.Note{Text: checkpointText(t, at)}, s)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("sign checkpoint of size %d: %w", t.N, err)
	}
	return Checkpoint{Size: t.N, Root: t.Hash, Time: at.UTC(), Note: string(msg)}, nil
}

// ParseCheckpoint checks a checkpoint note's signature against v and
// parses its tree. It fails with ErrBadSignature or ErrMalformed; it never
// panics, whatever msg holds.
func ParseCheckpoint(msg []byte, v note.Verifier) (Checkpoint, error) {
	if len(msg) > maxNote {
		return Checkpoint{}, fmt.Errorf("%w: %d bytes", ErrMalformed, len(msg))
	}
	if v == nil {
		return Checkpoint{}, fmt.Errorf("%w: no verifier key", ErrBadSignature)
	}
	n, err := note.Open(msg, note.VerifierList(v))
	if err != nil {
		var unverified *note.UnverifiedNoteError
		var invalid *note.InvalidSignatureError
		switch {
		case errors.As(err, &unverified):
			names := make([]string, len(unverified.Note.UnverifiedSigs))
			for i, s := range unverified.Note.UnverifiedSigs {
				names[i] = fmt.Sprintf("%s+%08x", s.Name, s.Hash)
			}
			return Checkpoint{}, fmt.Errorf("%w: not signed by %s (signed by %s)", ErrBadSignature, v.Name(), strings.Join(names, ", "))
		case errors.As(err, &invalid):
			return Checkpoint{}, fmt.Errorf("%w: %v", ErrBadSignature, err)
		}
		return Checkpoint{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	c, err := parseText(n.Text)
	if err != nil {
		return Checkpoint{}, err
	}
	c.Note = string(msg)
	return c, nil
}

// parseText parses a checkpoint's signed text.
func parseText(text string) (Checkpoint, error) {
	t, err := tlog.ParseTree([]byte(text))
	if err != nil {
		return Checkpoint{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	c := Checkpoint{Size: t.N, Root: t.Hash}
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	for _, line := range lines[min(3, len(lines)):] {
		if s, ok := strings.CutPrefix(line, timePrefix); ok {
			at, err := time.Parse(time.RFC3339Nano, s)
			if err != nil || !c.Time.IsZero() {
				return Checkpoint{}, fmt.Errorf("%w: bad time line %q", ErrMalformed, line)
			}
			c.Time = at.UTC()
		}
	}
	return c, nil
}

// unverifiedTree reads the tree a checkpoint note claims without checking
// its signature (the caller checks it later, or hands it to someone who
// will).
func unverifiedTree(msg []byte) (Checkpoint, error) {
	i := bytes.LastIndex(msg, []byte("\n\n"))
	if i < 0 || len(msg) > maxNote {
		return Checkpoint{}, fmt.Errorf("%w: no signature block", ErrMalformed)
	}
	c, err := parseText(string(msg[:i+1]))
	if err != nil {
		return Checkpoint{}, err
	}
	c.Note = string(msg)
	return c, nil
}
