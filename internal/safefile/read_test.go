package safefile

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// ReadBounded never hangs on a FIFO nobody writes, never reads a device
// or a directory, and stops at max+1 bytes. Control: a regular file (also
// through a symlink) reads whole.
func TestReadBounded(t *testing.T) {
	dir := t.TempDir()
	reg := filepath.Join(dir, "reg")
	if err := os.WriteFile(reg, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(reg, link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{reg, link} {
		if b, err := ReadBounded(p, 100, false); err != nil || string(b) != "hello" {
			t.Fatalf("ReadBounded(%s) = %q, %v; want hello", p, b, err)
		}
	}
	if b, err := ReadBounded(reg, 3, false); err != nil || len(b) != 4 {
		t.Fatalf("max 3: got %d bytes, %v; want 4 (max+1) for the caller to refuse", len(b), err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	type res struct {
		b   []byte
		err error
	}
	read := func(p string, pipes bool) res {
		done := make(chan res, 1)
		go func() { b, err := ReadBounded(p, 1<<20, pipes); done <- res{b, err} }()
		select {
		case r := <-done:
			return r
		case <-time.After(5 * time.Second):
			t.Fatalf("ReadBounded(%s) still blocked after 5s", p)
			return res{}
		}
	}
	if r := read(fifo, true); r.err != nil || len(r.b) != 0 {
		t.Fatalf("FIFO with pipes: %q, %v; want empty, no error", r.b, r.err)
	}
	if r := read(fifo, false); r.err == nil || !strings.Contains(r.err.Error(), "not a regular file") {
		t.Fatalf("FIFO without pipes: %v; want not a regular file", r.err)
	}
	for _, p := range []string{"/dev/zero", dir} {
		if r := read(p, true); r.err == nil || !strings.Contains(r.err.Error(), "not a regular file") || !bytes.Equal(r.b, nil) {
			t.Fatalf("ReadBounded(%s) = %d bytes, %v; want refused", p, len(r.b), r.err)
		}
	}
}
