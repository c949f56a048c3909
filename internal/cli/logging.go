package cli

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/textsafe"
)

// The log flags of every command. --log-level and --log-format (env
// CORDON_LOG_LEVEL, CORDON_LOG_FORMAT) choose the level and the line
// format of cordon's own log on stderr (cordon run: its log file once the
// program runs). Unset, a one-shot command logs at WARN and the daemon at
// INFO. The level is a slog.LevelVar shared by every logger the command
// makes, so the daemon can change it on SIGHUP (settings.go); the format
// is fixed for the life of the process.

// logFlags are the parsed log flags.
type logFlags struct {
	level, format string
	// levelVar is the level every logger of this process reads; explicit
	// says --log-level or CORDON_LOG_LEVEL named one.
	levelVar *slog.LevelVar
	explicit bool
	json     bool
}

func addLogFlags(root *cobra.Command, g *globals) {
	pf := root.PersistentFlags()
	pf.StringVar(&g.logf.level, "log-level", os.Getenv("CORDON_LOG_LEVEL"), "log level: debug, info, warn or error (env CORDON_LOG_LEVEL; default warn, the daemon info)")
	pf.StringVar(&g.logf.format, "log-format", os.Getenv("CORDON_LOG_FORMAT"), "log line format: text or json (env CORDON_LOG_FORMAT; default text)")
	root.PersistentPreRunE = func(*cobra.Command, []string) error { return g.logf.parse() }
}

// parse checks the flags and sets the level; a bad value is a usage
// error naming the flag.
func (lf *logFlags) parse() error {
	if lf.levelVar == nil {
		lf.levelVar = new(slog.LevelVar)
		lf.levelVar.Set(slog.LevelWarn)
	}
	if lf.level != "" {
		l, err := parseLevel(lf.level)
		if err != nil {
			return failure.Failf(failure.KindUsage, "log", "--log-level %s", err)
		}
		lf.levelVar.Set(l)
		lf.explicit = true
	}
	switch strings.ToLower(lf.format) {
	case "", "text":
	case "json":
		lf.json = true
	default:
		return failure.Failf(failure.KindUsage, "log", "--log-format %q: want text or json", lf.format)
	}
	return nil
}

// parseLevel reads a level name: debug, info, warn (warning) or error.
func parseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, failure.Failf(failure.KindUsage, "log level", "%q: want debug, info, warn or error", s)
}

// logger is the log of a one-shot command (default WARN) on g.logw, or
// stderr.
func (g *globals) logger() *slog.Logger {
	if g.logf.levelVar == nil {
		_ = g.logf.parse() // a caller outside cobra (tests): the defaults
	}
	w := g.logw
	if w == nil {
		w = g.stderr
	}
	return newLogger(w, g.logf.json, g.logf.levelVar)
}

// daemonLogger is the daemon's log: the same writer and level variable,
// but INFO unless a level was named — a service's start, reloads and
// lifecycle events are what its operator reads.
func (g *globals) daemonLogger() *slog.Logger {
	if g.logf.levelVar == nil {
		_ = g.logf.parse()
	}
	if !g.logf.explicit {
		g.logf.levelVar.Set(slog.LevelInfo)
	}
	return g.logger()
}

// newLogger builds a text or JSON logger at level. Text lines quote
// values with control or invisible characters (slog's own quoting); JSON
// lines go through textsafe.JSON, which writes as \u escapes what a
// terminal would act on or hide (slog escapes only C0 controls), so a
// name or message that came from a sandbox cannot drive the operator's
// terminal either way.
func newLogger(w io.Writer, json bool, level slog.Leveler) *slog.Logger {
	opt := &slog.HandlerOptions{Level: level}
	if json {
		return slog.New(slog.NewJSONHandler(&jsonSafeWriter{w: w}, opt))
	}
	return slog.New(slog.NewTextHandler(w, opt))
}

// jsonSafeWriter escapes each JSON record (slog writes one per Write) with
// textsafe.JSON; the line still decodes to the same values.
type jsonSafeWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (j *jsonSafeWriter) Write(p []byte) (int, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	line := bytes.TrimSuffix(p, []byte("\n"))
	if _, err := io.WriteString(j.w, textsafe.JSON(line)+"\n"); err != nil {
		return 0, err
	}
	return len(p), nil
}
