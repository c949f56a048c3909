package probes

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

// hostSockets counts a held connection to a port, never the listener.
func TestHostSockets(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	if n, err := hostSockets(port); err != nil || n != 0 {
		t.Fatalf("hostSockets(%s) with only a listener = %d, %v, want 0", port, n, err)
	}
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if n, err := hostSockets(port); err != nil || n != 2 {
		t.Errorf("hostSockets(%s) with one held connection = %d, %v, want 2 (both ends)", port, n, err)
	}
}

// dirWatch counts opens and reads of files in the directory and its
// evidence directory, and nothing before it was made.
func TestDirWatch(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "evidence"), 0o700); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "evidence", "log.key")
	if err := os.WriteFile(f, []byte("k"), 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := watchDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if n := w.Events(); n != 0 {
		t.Fatalf("Events before any open = %d, want 0", n)
	}
	if _, err := os.ReadFile(f); err != nil {
		t.Fatal(err)
	}
	if n := w.Events(); n == 0 {
		t.Errorf("Events after reading %s = 0, want > 0", f)
	}
	if n := w.Events(); n != 0 {
		t.Errorf("Events drained twice = %d, want 0", n)
	}
}
