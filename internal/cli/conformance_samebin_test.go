package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/conformance/record"
)

// TestSameBinaryRefusesReplacedBinary: the probes run the binary by path
// while the record binds the running binary's digest; a file replaced at
// that path (a rebuild, or another user who can write its directory) is
// refused, never signed as the bound binary's evidence. The control: the
// unchanged file passes.
func TestSameBinaryRefusesReplacedBinary(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "cordon")
	os.WriteFile(bin, []byte("the binary that runs"), 0o755)
	d, err := record.FileDigest(bin)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.TrimPrefix(d, "sha256:")
	if err := sameBinary(bin, want); err != nil {
		t.Fatalf("control: %v", err)
	}
	os.WriteFile(bin, []byte("another binary"), 0o755)
	if err := sameBinary(bin, want); err == nil || !strings.Contains(err.Error(), "no longer the running binary") {
		t.Fatalf("replaced binary: %v", err)
	}
}
