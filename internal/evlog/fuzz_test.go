package evlog

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"golang.org/x/mod/sumdb/tlog"
)

// fuzzKeyName and seed 1 make the key that signed the valid seeds in
// testdata/fuzz/FuzzCheckpoint.
const fuzzKeyName = "cordon-evidence@fuzz"

// Checkpoint notes are read back from the store, from files given to
// `cordon evidence verify --checkpoint`, and from proofs: none may panic
// the parser, and what parses must parse again to the same checkpoint.
func FuzzCheckpoint(f *testing.F) {
	_, v := testKey(f, fuzzKeyName, 1)
	f.Add([]byte("go.sum database tree\n0\n47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\n\n— x AAAA\n"))
	f.Fuzz(func(t *testing.T, msg []byte) {
		if c, err := parseText(string(msg)); err == nil {
			if c.Size < 0 {
				t.Fatalf("parseText(%q) = size %d", msg, c.Size)
			}
			if !c.Time.IsZero() {
				again, err := parseText(checkpointText(tlog.Tree{N: c.Size, Hash: c.Root}, c.Time))
				if err != nil || again != c {
					t.Fatalf("checkpointText(parseText(%q)) parses to %+v, %v; want %+v", msg, again, err, c)
				}
			}
		} else if !errors.Is(err, ErrMalformed) {
			t.Fatalf("parseText(%q) = %v, want ErrMalformed", msg, err)
		}
		_, _ = unverifiedTree(msg)
		c, err := ParseCheckpoint(msg, v)
		if err != nil {
			if !errors.Is(err, ErrBadSignature) && !errors.Is(err, ErrMalformed) {
				t.Fatalf("ParseCheckpoint(%q) = %v, want ErrBadSignature or ErrMalformed", msg, err)
			}
			return
		}
		if c.Size < 0 || c.Note != string(msg) {
			t.Fatalf("ParseCheckpoint(%q) = %+v", msg, c)
		}
		again, err := ParseCheckpoint([]byte(c.Note), v)
		if err != nil || again != c {
			t.Fatalf("ParseCheckpoint(ParseCheckpoint(%q).Note) = %+v, %v; want %+v", msg, again, err, c)
		}
		u, err := unverifiedTree(msg)
		if err != nil || u.Size != c.Size || u.Root != c.Root {
			t.Fatalf("unverifiedTree(%q) = %+v, %v; want the verified tree %+v", msg, u, err, c)
		}
	})
}

// Receipt bodies are the leaves' data, read back from the store: parsing
// one never panics, and a parsed receipt survives a JSON round trip.
func FuzzReceiptBody(f *testing.F) {
	b, err := json.Marshal(receipt(1))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Fuzz(func(t *testing.T, body []byte) {
		_ = tlog.RecordHash(body)
		rc, err := ParseReceipt(body)
		if err != nil {
			return
		}
		b, err := json.Marshal(rc)
		if err != nil {
			t.Skipf("parsed receipt does not marshal (%v): not a body cordon writes", err)
		}
		again, err := ParseReceipt(b)
		if err != nil {
			t.Fatalf("ParseReceipt(marshal(ParseReceipt(%q))) = %v", body, err)
		}
		// omitempty drops an empty list: empty and nil are the same receipt.
		if diff := cmp.Diff(rc, again, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("receipt round trip of %q (-first +second):\n%s", body, diff)
		}
	})
}
