package hostmgr

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/sandbox/fake"
	"github.com/cordon-project/cordon/internal/store"
)

// TestBrokerStderrCannotForgeTheDaemonLog: the gateway's broker processes
// are agent-facing and unprivileged; one that is compromised writes what
// it likes to its stderr. In the daemon that stream must reach the
// daemon's log only as a value of a record the daemon writes — never as
// raw bytes that drive the operator's terminal, nor as lines that pass
// for the daemon's own records (a forged reload, a forged JSON record).
func TestBrokerStderrCannotForgeTheDaemonLog(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "state"), store.DefaultPool)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	d, err := New(Options{StateDir: filepath.Join(dir, "state"), Store: st, Provider: &fake.Provider{}, VolumeDir: filepath.Join(dir, "volumes"), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	w := d.launchHost.GatewayStderr
	if w == nil {
		t.Fatal("the daemon hands its broker processes its own raw stderr")
	}
	forged := `{"time":"2026-01-01T00:00:00Z","level":"INFO","msg":"reload: host policy in force","component":"daemon"}`
	hostile := "\x1b]0;owned\x07\x1b[2J" + "time=x level=WARN msg=broker-said\n" + forged + "\npartial "
	if _, err := io.WriteString(w, hostile); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(w, "line\n"); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if strings.Contains(out, "\x1b") || strings.Contains(out, "\x07") {
		t.Errorf("terminal control bytes reached the daemon's log: %q", out)
	}
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("a line of the daemon's log is not a record of its own: %q", l)
		}
		if rec["msg"] != "gateway process stderr" {
			t.Errorf("a broker's line became a record of its own: %v", rec)
		}
		lines = append(lines, rec)
	}
	// Control: every line the broker wrote is there, as a value.
	if len(lines) != 3 || !strings.Contains(lines[0]["line"].(string), "msg=broker-said") ||
		lines[1]["line"] != forged || lines[2]["line"] != "partial line" {
		t.Errorf("broker lines = %v", lines)
	}
}

// FuzzBrokerLog: whatever a broker writes, in whatever pieces, the
// daemon's log gets only its own records ("gateway process stderr", the
// broker's text a value), with no terminal control byte and no line
// longer than the bound allows.
func FuzzBrokerLog(f *testing.F) {
	ents, _ := os.ReadDir(filepath.Join("testdata", "brokerlog"))
	for _, e := range ents {
		if b, err := os.ReadFile(filepath.Join("testdata", "brokerlog", e.Name())); err == nil {
			f.Add(b, uint8(7))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte, cut uint8) {
		var buf bytes.Buffer
		w := newBrokerLog(slog.New(slog.NewJSONHandler(&buf, nil)))
		for len(b) > 0 {
			n := int(cut)%len(b) + 1
			if _, err := w.Write(b[:n]); err != nil {
				t.Fatal(err)
			}
			b = b[n:]
		}
		out := buf.String()
		if out == "" {
			return
		}
		for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
			var rec map[string]any
			if err := json.Unmarshal([]byte(l), &rec); err != nil || rec["msg"] != "gateway process stderr" || rec["component"] != "gateway" {
				t.Fatalf("not a record of the daemon's: %q", l)
			}
			line, _ := rec["line"].(string)
			if strings.ContainsAny(line, "\x1b\x07\r\n\u202e") || len(line) > 8*maxBrokerLine {
				t.Fatalf("line value not escaped or bounded: %q", line)
			}
		}
	})
}
