package config

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestCheckFileSpecialFiles checks that `cordon config check PATH` (and
// run --config) never hangs or reads without end on a path that is not a
// regular file: a FIFO nobody writes is an empty file at once (opening it
// used to block forever), a device is refused by its type before a byte
// is read (opening some has effects: a watchdog, a tape). Control: a FIFO
// that is written is checked like the same bytes in a file, so a pipe
// (<(...)) still works.
func TestCheckFileSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	check := func(path string) ([]*Error, error) {
		type res struct {
			p []*Error
			e error
		}
		ch := make(chan res, 1)
		go func() { p, e := CheckFile(path); ch <- res{p, e} }()
		select {
		case r := <-ch:
			return r.p, r.e
		case <-time.After(20 * time.Second):
			t.Fatalf("CheckFile(%q) still blocked after 20s", path)
			return nil, nil
		}
	}
	if probs, err := check(fifo); err != nil || len(probs) != 1 || !strings.Contains(probs[0].Msg, "empty configuration") {
		t.Errorf("CheckFile(fifo without writer) = %v, %v, want the empty-configuration problem", probs, err)
	}
	if _, err := check("/dev/zero"); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("CheckFile(/dev/zero) err = %v, want not a regular file", err)
	}
	if _, err := check(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("CheckFile(dir) err = %v, want not a regular file", err)
	}
	// Control: a FIFO with a writer.
	const src = "testdata/check/every-kind.yaml"
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	want, err := CheckFile(src)
	if err != nil {
		t.Fatal(err)
	}
	// The writer is open before the check opens the FIFO (as with a
	// pipe from <(...)); a reader held meanwhile lets it open.
	hold, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer w.Close()
		time.Sleep(200 * time.Millisecond) // the check is open and waits for data
		w.Write(b)
	}()
	defer hold.Close()
	got, err := check(fifo)
	if err != nil {
		t.Fatal(err)
	}
	msgs := func(ps []*Error) (out []string) {
		for _, p := range ps {
			out = append(out, strings.TrimPrefix(p.Error(), p.Source))
		}
		return out
	}
	if d := cmp.Diff(msgs(want), msgs(got)); d != "" {
		t.Errorf("CheckFile(fifo with writer) differs from the file (-file +fifo):\n%s", d)
	}
}
