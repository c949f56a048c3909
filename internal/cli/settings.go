package cli

import (
	"bufio"
	"bytes"
	"errors"
	"log/slog"
	"os"
	"strings"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/safefile"
)

// The daemon's settings file: what a running daemon reads again on
// SIGHUP. Today that is the log level; everything else (socket, group,
// state and policy directories, log format) is a command-line flag and
// needs a restart. The format is one `key = value` a line; '#' starts a
// comment line; blank lines are ignored; an unknown key or a bad value is
// an error naming its line (a typo must not pass silently).
//
//	# /etc/cordon/daemon.conf
//	log-level = debug

// DefaultSettings is where the daemon looks for its settings file; it may
// be absent.
const DefaultSettings = "/etc/cordon/daemon.conf"

// maxSettings bounds the file: it is a handful of lines.
const maxSettings = 64 << 10

// daemonSettings are the parsed settings; a nil field was not set.
type daemonSettings struct {
	LogLevel *slog.Level
}

// parseSettings reads the settings text; name is for error messages.
func parseSettings(name string, b []byte) (daemonSettings, error) {
	var s daemonSettings
	if len(b) > maxSettings {
		return s, failure.Failf(failure.KindUsage, "settings", "%s: larger than %d bytes", name, maxSettings)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), maxSettings)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" {
			return s, failure.Failf(failure.KindUsage, "settings", "%s:%d: want key = value, got %q", name, n, clipSetting(line))
		}
		switch k {
		case "log-level":
			if s.LogLevel != nil {
				return s, failure.Failf(failure.KindUsage, "settings", "%s:%d: log-level set twice", name, n)
			}
			l, err := parseLevel(v)
			if err != nil {
				return s, failure.Failf(failure.KindUsage, "settings", "%s:%d: log-level %q: want debug, info, warn or error", name, n, clipSetting(v))
			}
			s.LogLevel = &l
		default:
			return s, failure.Failf(failure.KindUsage, "settings", "%s:%d: unknown setting %q (known: log-level)", name, n, clipSetting(k))
		}
	}
	if err := sc.Err(); err != nil {
		return s, failure.Failf(failure.KindUsage, "settings", "%s: %v", name, err)
	}
	return s, nil
}

// loadSettings reads the settings file at path. An absent file is no
// settings; any other failure is an error. Only a regular file is read
// (a FIFO would hang the daemon's SIGHUP loop, a device would be read
// without end), and no more of it than maxSettings allows.
func loadSettings(path string) (daemonSettings, error) {
	if path == "" {
		return daemonSettings{}, nil
	}
	// Never blocks on a FIFO; only a regular file (safefile.ReadBounded).
	b, err := safefile.ReadBounded(path, maxSettings, false)
	if errors.Is(err, os.ErrNotExist) {
		return daemonSettings{}, nil
	}
	if err != nil {
		return daemonSettings{}, failure.Failf(failure.KindUsage, "settings", "%v", err)
	}
	return parseSettings(path, b)
}

func clipSetting(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// levelName is a level as the flags spell it.
func levelName(l slog.Level) string { return strings.ToLower(l.String()) }
