package record

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestFileDigestRefusesFIFO: a --config/--binary artifact handed to a
// verifier (unpacked from an archive) that is a FIFO must be refused as
// not a regular file, not block verify forever in open(2) waiting for a
// writer. The control: a regular file digests.
func TestFileDigestRefusesFIFO(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "cordon.toml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := FileDigest(fifo); done <- err }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a FIFO was digested")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("FileDigest blocked on a FIFO")
	}
	if _, err := FileDigest("/proc/self/exe"); err != nil {
		t.Fatalf("control: %v", err)
	}
}
