package cli

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/cordon-project/cordon/internal/failure"
)

// TestEvidencePathChecks: an --evidence path that is, or goes through, a
// symlink, or names a non-regular file, is refused with policy_rejected
// before the run and at the write; a missing directory is a usage error;
// a plain path is written.
func TestEvidencePathChecks(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("host"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.json")
	os.Symlink(victim, link)
	os.Symlink(dir, filepath.Join(dir, "dirlink"))
	fifo := filepath.Join(dir, "fifo")
	syscall.Mkfifo(fifo, 0o600)
	tests := []struct {
		path string
		want failure.Kind
	}{
		{filepath.Join(dir, "ev.json"), ""},
		{link, failure.KindPolicyRejected},
		{filepath.Join(dir, "dirlink", "ev.json"), failure.KindPolicyRejected},
		{fifo, failure.KindPolicyRejected},
		{filepath.Join(dir, "missing", "ev.json"), failure.KindUsage},
	}
	for _, tt := range tests {
		err := checkEvidenceDir(tt.path)
		if got := kindOrEmpty(err); got != tt.want {
			t.Errorf("checkEvidenceDir(%q) = %v, want kind %q", tt.path, err, tt.want)
		}
		err = writeRecord(tt.path, map[string]string{"schema": "x"})
		if got := kindOrEmpty(err); got != tt.want {
			t.Errorf("writeRecord(%q) = %v, want kind %q", tt.path, err, tt.want)
		}
	}
	if b, _ := os.ReadFile(victim); string(b) != "host" {
		t.Errorf("victim = %q after the writes, want unchanged", b)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "ev.json")); err != nil || string(b) != "{\n  \"schema\": \"x\"\n}\n" {
		t.Errorf("ev.json = %q, %v; want the record", b, err)
	}
}

func kindOrEmpty(err error) failure.Kind {
	if err == nil {
		return ""
	}
	return failure.KindOf(err)
}
