package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The run log writes to stderr until it is switched to its file, counts
// the WARN lines after that, and its summary escapes what it quotes.
func TestRunLog(t *testing.T) {
	var stderr bytes.Buffer
	l := &runLog{stderr: &stderr}
	l.Write([]byte("time=x level=WARN msg=before\n"))
	if !strings.Contains(stderr.String(), "msg=before") {
		t.Fatalf("before the switch the line did not go to stderr: %q", stderr.String())
	}
	path := filepath.Join(t.TempDir(), "run.log")
	if err := l.toFile(path, ""); err != nil {
		t.Fatal(err)
	}
	l.Write([]byte("time=x level=WARN msg=\"agent \x1b[2Jbytes\"\n"))
	l.Write([]byte("time=x level=INFO msg=info\n"))
	l.Write([]byte("time=x level=ERROR msg=second\n"))
	s := l.close()
	if strings.Count(stderr.String(), "level=") != 1 {
		t.Errorf("after the switch log lines reached stderr: %q", stderr.String())
	}
	if !strings.HasPrefix(s, "cordon: 2 warning(s) while the program ran; first: ") || !strings.HasSuffix(s, "full log: "+path) {
		t.Errorf("summary = %q", s)
	}
	if strings.ContainsRune(s, 0x1b) {
		t.Errorf("the summary carries a raw escape: %q", s)
	}
	b, _ := os.ReadFile(path)
	if strings.Count(string(b), "\n") != 3 {
		t.Errorf("log file = %q, want the three lines", b)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("log file mode %v, want 0600", fi.Mode())
	}
}

// An existing file or a symlink at the log path is refused: the log is
// always a new file (positive control: a fresh path is accepted above).
func TestRunLogRefusesExisting(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	os.WriteFile(target, []byte("keep"), 0o644)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{target, link} {
		l := &runLog{stderr: &bytes.Buffer{}}
		if err := l.toFile(p, ""); err == nil {
			t.Errorf("toFile(%s) accepted an existing path", p)
		}
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Errorf("the symlink's target was changed: %q", b)
	}
}

// Past the cap, lines are counted, not written, and the summary says so.
func TestRunLogCap(t *testing.T) {
	l := &runLog{stderr: &bytes.Buffer{}}
	path := filepath.Join(t.TempDir(), "run.log")
	if err := l.toFile(path, ""); err != nil {
		t.Fatal(err)
	}
	line := []byte("level=WARN " + strings.Repeat("x", 1<<20) + "\n")
	for i := 0; i < maxRunLog>>20+2; i++ {
		l.Write(line)
	}
	s := l.close()
	if fi, _ := os.Stat(path); fi.Size() > maxRunLog {
		t.Errorf("log file is %d bytes, over the %d cap", fi.Size(), maxRunLog)
	}
	if !strings.Contains(s, "truncated") {
		t.Errorf("summary %q does not say the log was truncated", s)
	}
}
