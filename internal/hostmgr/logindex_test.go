package hostmgr

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The indexer records (size, time) when the log grows, only then; --since
// reads from the size of the last entry at or before the time, so a line
// written before it is left out and every byte after it is in — also
// for output without a newline. A full index is thinned, never grown.
func TestLogIndex(t *testing.T) {
	state := t.TempDir()
	if err := os.MkdirAll(logDir(state), 0o700); err != nil {
		t.Fatal(err)
	}
	log := logPath(state, "sb-x")
	write := func(s string) {
		f, err := os.OpenFile(log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString(s)
		f.Close()
	}
	x := &logIndexer{state: state, id: "sb-x"}
	t0 := time.Unix(1_000_000, 0)
	write("first line\npartial-without-newline")
	if err := x.sample(t0); err != nil {
		t.Fatal(err)
	}
	if err := x.sample(t0.Add(time.Second)); err != nil { // no growth: no entry
		t.Fatal(err)
	}
	write(" rest\nlater\n")
	if err := x.sample(t0.Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	es, err := readIndex(state, "sb-x")
	if err != nil || len(es) != 2 {
		t.Fatalf("readIndex = %+v, %v; want 2 entries", es, err)
	}
	data, _ := os.ReadFile(log)
	for _, c := range []struct {
		since time.Time
		want  string
	}{
		{t0.Add(-time.Hour), string(data)},
		{t0, " rest\nlater\n"},
		{t0.Add(5 * time.Second), " rest\nlater\n"},
		{t0.Add(10 * time.Second), ""},
		{t0.Add(time.Hour), ""},
	} {
		if got := string(data[sinceOffset(es, c.since):]); got != c.want {
			t.Errorf("since %v = %q, want %q", c.since.Sub(t0), got, c.want)
		}
	}
	// A clock stepping back does not make the index go back.
	write("x")
	if err := x.sample(t0.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	if es, err := readIndex(state, "sb-x"); err != nil || len(es) != 3 || es[2].At.Before(es[1].At) {
		t.Errorf("after a clock step back: %+v, %v", es, err)
	}
	// Full: thinned to about half, the newest entry kept, the file bounded.
	for i := range maxIndexEntries + 10 {
		write("y")
		if err := x.sample(t0.Add(time.Duration(20+i) * time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	fi, err := os.Stat(indexPath(state, "sb-x"))
	if err != nil || fi.Size() > maxIndexEntries*indexEntrySize {
		t.Fatalf("index size %v (%v), want at most %d", fi.Size(), err, maxIndexEntries*indexEntrySize)
	}
	es, err = readIndex(state, "sb-x")
	if err != nil || es[len(es)-1].Offset != int64(len(data))+1+maxIndexEntries+10 {
		t.Fatalf("thinned index: %d entries, %v; last %+v", len(es), err, es[len(es)-1])
	}
	// rm removes both.
	removeLog(state, "sb-x")
	for _, p := range []string{log, indexPath(state, "sb-x")} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after removeLog: %v", p, err)
		}
	}
}

// The index is written without following a symlink planted at its path
// (positive control: without the link the same sample writes it).
func TestLogIndexNoFollow(t *testing.T) {
	state := t.TempDir()
	os.MkdirAll(logDir(state), 0o700)
	os.WriteFile(logPath(state, "sb-y"), []byte("out\n"), 0o600)
	target := filepath.Join(t.TempDir(), "target")
	if err := os.Symlink(target, indexPath(state, "sb-y")); err != nil {
		t.Fatal(err)
	}
	if err := (&logIndexer{state: state, id: "sb-y"}).sample(time.Now()); err == nil {
		t.Fatal("sample wrote through a symlink")
	}
	if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the symlink's target was created: %v", err)
	}
	os.Remove(indexPath(state, "sb-y"))
	if err := (&logIndexer{state: state, id: "sb-y"}).sample(time.Now()); err != nil {
		t.Fatalf("control: %v", err)
	}
}

// FuzzParseIndex: any bytes parse into whole entries whose offsets and
// times never go back, or errIndex; what parses writes back the same.
func FuzzParseIndex(f *testing.F) {
	ents, _ := os.ReadDir(filepath.Join("testdata", "logindex"))
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("testdata", "logindex", e.Name()))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		es, err := parseIndex(b)
		if err != nil {
			if !errors.Is(err, errIndex) {
				t.Fatalf("parseIndex error %v is not errIndex", err)
			}
			return
		}
		if len(es) != len(b)/indexEntrySize {
			t.Fatalf("%d entries of %d bytes", len(es), len(b))
		}
		var back []byte
		for i, e := range es {
			if i > 0 && (e.Offset < es[i-1].Offset || e.At.Before(es[i-1].At)) {
				t.Fatalf("entry %d goes back: %+v", i, es)
			}
			back = appendEntry(back, e)
		}
		if string(back) != string(b[:len(back)]) {
			t.Fatalf("round trip differs")
		}
		_ = sinceOffset(es, time.Unix(0, 1))
	})
}
