package cli

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/cordon-project/cordon/internal/failure"
)

// Bad flag values are usage errors naming the flag, before any command
// runs; good ones set the level (the default stays WARN, the daemon's
// INFO unless a level was named).
func TestLogFlagsParse(t *testing.T) {
	for _, c := range []struct {
		level, format string
		want          slog.Level
		err           string
	}{
		{"", "", slog.LevelWarn, ""},
		{"debug", "json", slog.LevelDebug, ""},
		{"ERROR", "TEXT", slog.LevelError, ""},
		{"warning", "", slog.LevelWarn, ""},
		{"loud", "", 0, "--log-level"},
		{"", "xml", 0, "--log-format"},
	} {
		lf := logFlags{level: c.level, format: c.format}
		err := lf.parse()
		if c.err != "" {
			if err == nil || failure.KindOf(err) != failure.KindUsage || !strings.Contains(err.Error(), c.err) {
				t.Errorf("parse(%q, %q) = %v, want a usage error naming %s", c.level, c.format, err, c.err)
			}
			continue
		}
		if err != nil || lf.levelVar.Level() != c.want {
			t.Errorf("parse(%q, %q) = %v, level %v; want %v", c.level, c.format, err, lf.levelVar.Level(), c.want)
		}
	}
	g := &globals{stderr: &bytes.Buffer{}}
	g.daemonLogger()
	if g.logf.levelVar.Level() != slog.LevelInfo {
		t.Errorf("daemon default level %v, want INFO", g.logf.levelVar.Level())
	}
	g = &globals{stderr: &bytes.Buffer{}, logf: logFlags{level: "error"}}
	g.logf.parse()
	g.daemonLogger()
	if g.logf.levelVar.Level() != slog.LevelError {
		t.Errorf("daemon with --log-level error: %v", g.logf.levelVar.Level())
	}
}

// JSON log lines parse as JSON and keep the values, while characters a
// terminal acts on or hides (a bidi override, an escape) are written as
// \u escapes (positive control: slog's own JSON handler leaves the bidi
// override raw).
func TestLogFlagsJSONEscapes(t *testing.T) {
	const evil = "name\u202eexe.txt\x1b[2J"
	var buf bytes.Buffer
	lv := new(slog.LevelVar)
	newLogger(&buf, true, lv).Info("created", "name", evil)
	line := strings.TrimSpace(buf.String())
	var m map[string]any
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Fatalf("not JSON: %v: %q", err, line)
	}
	if m["name"] != evil || m["msg"] != "created" || m["level"] != "INFO" {
		t.Fatalf("decoded %v", m)
	}
	if strings.ContainsRune(line, '\u202e') || strings.ContainsRune(line, 0x1b) {
		t.Fatalf("raw control in the line: %q", line)
	}
	var raw bytes.Buffer
	slog.New(slog.NewJSONHandler(&raw, nil)).Info("created", "name", evil)
	if !strings.ContainsRune(raw.String(), '\u202e') {
		t.Fatal("control: slog's JSON handler escaped the bidi override itself; the wrapper is untested")
	}
	// Text: slog quotes it.
	buf.Reset()
	newLogger(&buf, false, lv).Info("created", "name", evil)
	if strings.ContainsRune(buf.String(), '\u202e') || strings.ContainsRune(buf.String(), 0x1b) {
		t.Fatalf("raw control in a text line: %q", buf.String())
	}
	// The level variable governs: debug is dropped at INFO, kept at DEBUG.
	buf.Reset()
	l := newLogger(&buf, false, lv)
	l.Debug("hidden")
	lv.Set(slog.LevelDebug)
	l.Debug("shown")
	if strings.Contains(buf.String(), "hidden") || !strings.Contains(buf.String(), "shown") {
		t.Fatalf("level variable: %q", buf.String())
	}
}

func TestParseSettings(t *testing.T) {
	for file, want := range map[string]string{
		"debug.conf": "debug", "spaces.conf": "warn", "empty.conf": "",
		"badlevel.conf": "err:1: log-level", "twice.conf": "err:2: log-level set twice",
		"unknown.conf": "err:1: unknown setting", "noequals.conf": "err:1: want key = value", "bidi.conf": `err:1: log-level "\u202edebug"`,
	} {
		b, err := os.ReadFile(filepath.Join("testdata", "settings", file))
		if err != nil {
			t.Fatal(err)
		}
		s, err := parseSettings(file, b)
		switch {
		case strings.HasPrefix(want, "err:"):
			if err == nil || failure.KindOf(err) != failure.KindUsage || !strings.Contains(err.Error(), strings.TrimPrefix(want, "err")) {
				t.Errorf("parseSettings(%s) = %v, want an error with %q", file, err, strings.TrimPrefix(want, "err"))
			}
		case err != nil:
			t.Errorf("parseSettings(%s) = %v", file, err)
		case want == "" && s.LogLevel != nil, want != "" && (s.LogLevel == nil || levelName(*s.LogLevel) != want):
			t.Errorf("parseSettings(%s) = %v, want %q", file, s.LogLevel, want)
		}
	}
	if s, err := loadSettings(filepath.Join(t.TempDir(), "absent.conf")); err != nil || s.LogLevel != nil {
		t.Errorf("absent file: %v %v", s, err)
	}
}

// The settings parser never panics, and its errors are one line of
// visible text (they are logged).
func FuzzParseSettings(f *testing.F) {
	ents, _ := os.ReadDir(filepath.Join("testdata", "settings"))
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("testdata", "settings", e.Name()))
		if err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := parseSettings("f", b)
		if err != nil {
			msg := err.Error()
			if strings.ContainsAny(msg, "\n\r\x1b\u202e") || !utf8.ValidString(msg) {
				t.Fatalf("error not one visible line: %q", msg)
			}
			return
		}
		if s.LogLevel != nil && (*s.LogLevel < slog.LevelDebug || *s.LogLevel > slog.LevelError) {
			t.Fatalf("level %v", *s.LogLevel)
		}
	})
}

// TestLoadSettingsNotARegularFile: the settings file is read as root at
// start and on every SIGHUP, from a path the operator chose. A FIFO put
// there must not hang the read (a SIGHUP would wedge the daemon's signal
// loop, and SIGTERM after it never finishes), and a device must not be
// read without end: anything but a regular file is a usage error at once.
func TestLoadSettingsNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "daemon.conf")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{fifo, "/dev/zero"} {
		done := make(chan error, 1)
		go func() { _, err := loadSettings(path); done <- err }()
		select {
		case err := <-done:
			if err == nil || failure.KindOf(err) != failure.KindUsage || !strings.Contains(err.Error(), "not a regular file") {
				t.Errorf("loadSettings(%s) = %v, want a usage error saying it is not a regular file", path, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("loadSettings(%s) still reading after 5s", path)
		}
	}
	// A file over the bound is refused without reading it whole; a
	// regular file (through a symlink too) still loads.
	big := filepath.Join(dir, "big.conf")
	if err := os.WriteFile(big, bytes.Repeat([]byte("# comment\n"), maxSettings), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadSettings(big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("loadSettings(big) = %v, want larger than", err)
	}
	good := filepath.Join(dir, "good.conf")
	if err := os.WriteFile(good, []byte("log-level = debug\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.conf")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	if s, err := loadSettings(link); err != nil || s.LogLevel == nil || *s.LogLevel != slog.LevelDebug {
		t.Errorf("loadSettings(link) = %v, %v; want debug", s.LogLevel, err)
	}
}
