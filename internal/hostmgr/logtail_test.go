package hostmgr

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// naiveTail is tailOffset by splitting the whole log into lines.
func naiveTail(log []byte, n int) int64 {
	if n <= 0 {
		return int64(len(log))
	}
	body := log
	if len(body) > 0 && body[len(body)-1] == '\n' {
		body = body[:len(body)-1]
	}
	for i := len(body) - 1; i >= 0; i-- {
		if body[i] == '\n' {
			if n--; n == 0 {
				return int64(i + 1)
			}
		}
	}
	return 0
}

func TestTailOffset(t *testing.T) {
	for _, c := range []struct {
		log  string
		n    int
		want string
	}{
		{"", 3, ""},
		{"a\nb\nc\n", 1, "c\n"},
		{"a\nb\nc\n", 2, "b\nc\n"},
		{"a\nb\nc\n", 3, "a\nb\nc\n"},
		{"a\nb\nc\n", 10, "a\nb\nc\n"},
		{"a\nb\nc", 1, "c"},
		{"a\nb\nc", 2, "b\nc"},
		{"a\n\n\n", 2, "\n\n"},
		{"\n", 1, "\n"},
		{"a\nb\n", 0, ""},
	} {
		off, err := tailOffset(strings.NewReader(c.log), int64(len(c.log)), c.n)
		if err != nil || c.log[off:] != c.want {
			t.Errorf("tail %d of %q = %q (%v), want %q", c.n, c.log, c.log[off:], err, c.want)
		}
	}
	// Across the read buffer, and bounded by maxTailScan: a log of one
	// line longer than the scan starts maxTailScan from its end.
	long := bytes.Repeat([]byte("0123456789abcde\n"), 10000)
	if off, _ := tailOffset(bytes.NewReader(long), int64(len(long)), 5000); off != naiveTail(long, 5000) {
		t.Errorf("tail 5000 of a long log = %d, want %d", off, naiveTail(long, 5000))
	}
	huge := bytes.Repeat([]byte("x"), maxTailScan+100)
	if off, _ := tailOffset(bytes.NewReader(huge), int64(len(huge)), 1); off != 100 {
		t.Errorf("tail of one huge line = %d, want %d (the scan bound)", off, 100)
	}
}

// FuzzTailOffset: any log bytes, any n: the offset is what splitting the
// log into lines gives.
func FuzzTailOffset(f *testing.F) {
	ents, _ := os.ReadDir(filepath.Join("testdata", "logtail"))
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("testdata", "logtail", e.Name()))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, 2)
	}
	f.Fuzz(func(t *testing.T, log []byte, n int) {
		n %= 1000
		off, err := tailOffset(bytes.NewReader(log), int64(len(log)), n)
		if err != nil {
			t.Fatal(err)
		}
		if want := naiveTail(log, n); off != want {
			t.Fatalf("tail %d of %q = %d, want %d", n, log, off, want)
		}
	})
}
