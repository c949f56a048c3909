package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/safefile"
	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/textsafe"
	"github.com/spf13/pflag"
)

// OutcomeFD is the descriptor cordon run --json writes its outcome to:
// never stdout, which is the program's (printf abc would run into it).
const OutcomeFD = 3

// fd3Open reports whether cordon was started with descriptor 3 open for
// writing. When it was not, the Go runtime may hold descriptor 3 itself
// (it keeps the cgroup CPU quota file open, read-only): only a writable
// descriptor is the caller's.
func fd3Open() bool {
	fl, err := unix.FcntlInt(OutcomeFD, unix.F_GETFL, 0)
	return err == nil && fl&unix.O_ACCMODE != unix.O_RDONLY && fl&unix.O_PATH == 0
}

// checkOutcome checks, before anything runs, where the outcome goes:
// --json needs descriptor 3 open (taken close-on-exec, so neither the
// sandbox nor a helper inherits it), --json-file a path that can be
// written without following a symlink.
func (r *aRun) checkOutcome() error {
	f := r.f
	switch {
	case f.json && f.jsonFile != "":
		return failure.Failf(failure.KindUsage, "run", "give one of --json (descriptor 3) and --json-file FILE")
	case f.json:
		if !r.g.fd3 {
			return failure.Failf(failure.KindUsage, "run", "--json writes the outcome to descriptor 3, which is not open for writing: run cordon run --json ... 3>outcome.json, or use --json-file FILE")
		}
		if _, err := unix.FcntlInt(OutcomeFD, unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
			return failure.Fail(failure.KindUsage, "run --json", err)
		}
		r.outcome = os.NewFile(OutcomeFD, "outcome")
	case f.jsonFile != "":
		abs, err := filepath.Abs(f.jsonFile)
		if err != nil {
			return failure.Failf(failure.KindUsage, "run", "--json-file: %v", err)
		}
		f.jsonFile = abs
		if err := checkEvidenceDir(abs); err != nil {
			return err
		}
	}
	return nil
}

// writeOutcome writes the outcome where --json or --json-file says: one
// JSON line, escaped by textsafe.JSON like every JSON cordon prints.
func (r *aRun) writeOutcome() {
	switch {
	case r.outcome != nil:
		if err := writeJSON(r.outcome, r.out); err != nil {
			fmt.Fprintf(r.g.stderr, "cordon: write the outcome to descriptor 3: %v\n", err)
		}
	case r.f.jsonFile != "":
		var b bytes.Buffer
		if err := writeJSON(&b, r.out); err == nil {
			if err := safefile.WriteFile(r.f.jsonFile, b.Bytes(), 0o644); err != nil {
				fmt.Fprintf(r.g.stderr, "cordon: %s\n", describe(evidencePathError(err)))
			}
		}
	}
}

// Run logs. From the moment the program starts, nothing the trusted side
// logs goes to the terminal: log lines (and tool servers' stderr) go to
// a file, and a summary is printed when the program has ended.
const (
	runLogDir = "logs"
	// maxRunLog caps a run's log file; past it lines are counted, not
	// written (the summary says so).
	maxRunLog = 16 << 20
)

// runLog is where the trusted side's log lines go during a run: cordon's
// stderr until the program starts, then the log file.
type runLog struct {
	mu        sync.Mutex
	stderr    io.Writer
	file      *os.File
	path      string
	temporary bool // the default path: removed when nothing was logged
	written   int64
	partial   []byte // the file's current line, until its newline
	dropped   int64
	warnings  int
	first     string
	// header is the file's first line (the sandbox it is the log of).
	header string
}

// Write sends p to stderr before the switch, and after it to the file a
// line at a time (maxLogLine at most), each escaped by textsafe.Line:
// what the gateway's broker processes write is theirs, and escapes in it
// must not act on the terminal of whoever reads the log.
func (l *runLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.file == nil {
		return l.stderr.Write(p)
	}
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		l.line(l.partial[:i])
		l.partial = l.partial[i+1:]
	}
	if len(l.partial) > maxLogLine {
		l.line(l.partial)
		l.partial = nil
	}
	l.partial = append([]byte(nil), l.partial...)
	return len(p), nil
}

// maxLogLine is the longest line the run log holds back for its newline.
const maxLogLine = 64 << 10

// line writes one line to the file, escaped, and counts it when it is a
// WARN or ERROR line. Called with l.mu held.
func (l *runLog) line(b []byte) {
	s := string(b)
	if strings.Contains(s, "level=WARN") || strings.Contains(s, "level=ERROR") {
		if l.warnings == 0 {
			l.first = strings.TrimSpace(s)
		}
		l.warnings++
	}
	out := textsafe.Line(s) + "\n"
	if l.written+int64(len(out)) > maxRunLog {
		l.dropped += int64(len(out))
		return
	}
	n, _ := l.file.WriteString(out) // a log that cannot be written never fails the run
	l.written += int64(n)
}

// toFile switches the log to path: a new file, root-only (0600), created
// without following a symlink (safefile's directory open, O_NOFOLLOW,
// O_EXCL). The default path's directory, <state-dir>/logs, is 0700.
func (l *runLog) toFile(path string, defaultDir string) error {
	if defaultDir != "" {
		if err := os.Mkdir(defaultDir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return failure.Fail(failure.KindProvision, "log dir", err)
		}
	}
	dfd, err := safefile.OpenDir(filepath.Dir(path))
	if err != nil {
		return failure.Fail(failure.KindUsage, "log file", err)
	}
	defer unix.Close(dfd)
	if defaultDir != "" {
		var st unix.Stat_t
		if err := unix.Fstat(dfd, &st); err != nil || st.Uid != 0 || st.Mode&0o077 != 0 {
			return failure.Failf(failure.KindProvision, "log dir", "%s: must be a root-only (0700) directory", defaultDir)
		}
	}
	fd, err := unix.Openat(dfd, filepath.Base(path), unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return failure.Failf(failure.KindUsage, "log file", "%s: %v (cordon creates a new file; remove what is there)", path, err)
	}
	l.mu.Lock()
	l.file, l.path, l.temporary = os.NewFile(uintptr(fd), path), path, defaultDir != ""
	if l.header != "" {
		// Not counted in written: a default log with nothing else in it
		// is still removed at the end.
		_, _ = l.file.WriteString(l.header + "\n")
	}
	l.mu.Unlock()
	return nil
}

// close stops writing to the file (later lines go to stderr again) and
// returns the summary a person must see: the WARN and ERROR lines
// counted, the first quoted, the log named; only the log's name when
// lines below WARN were logged (a tool server's stderr); "" when nothing
// was. Log text can carry agent bytes: it goes through
// textsafe.Line.
func (l *runLog) close() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.file == nil {
		return ""
	}
	if len(l.partial) > 0 {
		l.line(l.partial)
		l.partial = nil
	}
	l.file.Close()
	l.file = nil
	if l.written == 0 && l.dropped == 0 && l.temporary {
		// In cordon's own root-only directory: nothing to keep.
		_ = os.Remove(l.path)
	}
	if l.warnings == 0 {
		if l.written > 0 || l.dropped > 0 {
			// Tool servers' stderr, lines below WARN: say where they are.
			return fmt.Sprintf("cordon: what was logged while the program ran: %s", textsafe.Line(l.path))
		}
		return ""
	}
	first := l.first
	if len(first) > 300 {
		first = first[:300] + "…"
	}
	s := fmt.Sprintf("cordon: %d warning(s) while the program ran; first: %s; full log: %s", l.warnings, textsafe.Line(first), textsafe.Line(l.path))
	if l.dropped > 0 {
		s += fmt.Sprintf(" (truncated at %d bytes: %d bytes not written)", maxRunLog, l.dropped)
	}
	return s
}

// logPath is where this run logs: --log-file, or
// <state-dir>/logs/run-<sandbox-id>.log (its dir returned to be made).
func (r *aRun) logPath() (path, dir string, err error) {
	if r.f.logFile != "" {
		p, err := filepath.Abs(r.f.logFile)
		if err != nil {
			return "", "", failure.Failf(failure.KindUsage, "run", "--log-file: %v", err)
		}
		return p, "", nil
	}
	dir = filepath.Join(r.g.stateDir, runLogDir)
	return filepath.Join(dir, "run-"+r.out.SandboxID+".log"), dir, nil
}

// logToFile sends the run's log to its file from here on (just before
// the program starts).
func (r *aRun) logToFile() error {
	path, dir, err := r.logPath()
	if err != nil {
		return err
	}
	r.log.header = "cordon run: sandbox " + r.out.SandboxID
	return r.log.toFile(path, dir)
}

// endLog prints the run log's summary on stderr, naming the sandbox.
func (r *aRun) endLog() {
	if s := r.log.close(); s != "" {
		fmt.Fprintf(r.g.stderr, "cordon: sandbox %s: %s\n", r.out.SandboxID, strings.TrimPrefix(s, "cordon: "))
	}
}

// announce names the sandbox before the program starts, on stderr and
// only when stderr is a terminal: a person sees which sandbox to look up
// (cordon receipts, evidence, the run log), while a program's output
// that is piped or redirected — stdout always, stderr when it is not a
// terminal — carries nothing of cordon's. Machines get the id from
// --json's outcome; the run log's first line and its default name carry
// it too.
func (r *aRun) announce() {
	if isTerminal(r.g.stderr) {
		fmt.Fprintf(r.g.stderr, "cordon: sandbox %s\n", r.out.SandboxID)
	}
}

// addRunIOFlags declares cordon run's flags for where things go: the
// outcome, the log, the terminal.
func addRunIOFlags(fl *pflag.FlagSet, f *runFlags) {
	fl.BoolVar(&f.json, "json", false, "write a machine-readable outcome (one JSON line) to descriptor 3: cordon run --json ... 3>outcome.json")
	fl.StringVar(&f.jsonFile, "json-file", "", "write the machine-readable outcome (one JSON line) to this file (never through a symlink)")
	fl.StringVar(&f.tty, "tty", ttyAuto, "give the program a pseudo-terminal of the sandbox's own: auto (when stdin, stdout or stderr is a terminal; the terminal itself never enters the sandbox), always, never")
	fl.StringVar(&f.logFile, "log-file", "", "where cordon logs once the program runs (a new file, 0600; default <state-dir>/logs/run-<sandbox-id>.log); a summary is printed when it ends")
}

// checkIO checks, before anything is created, whether the program gets
// a terminal, and sets the program's stdio.
func (r *aRun) checkIO(spec *sandbox.Spec) error {
	t, err := terminalRequest(r.f.tty)
	if err != nil {
		return err
	}
	spec.Stdin, spec.Stdout, spec.Stderr = os.Stdin, os.Stdout, os.Stderr
	spec.Terminal = t
	return nil
}
