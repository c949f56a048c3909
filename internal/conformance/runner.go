package conformance

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cordon-project/cordon/internal/conformance/record"
	"github.com/cordon-project/cordon/internal/evidence"
	"github.com/cordon-project/cordon/internal/sandbox/linux/cgroup"
	"github.com/cordon-project/cordon/internal/textsafe"
	"golang.org/x/sys/unix"
)

// Options say what a run of the suite tests and how.
type Options struct {
	Bin                      string // the cordon binary under test (absolute)
	Provider, Profile, Level string
	Only                     []string       // probe IDs ("" or nil: all)
	Classes                  []record.Class // nil: all
	// Dir is where probes' scratch directories go (a fresh 0700 one
	// under the system temp directory when "").
	Dir string
	// Progress, when set, gets one line per probe as it ends.
	Progress io.Writer
	// CannotEvidence, when set, says why the provider cannot evidence
	// the level requested on this host (its capability descriptor says
	// less): no probe runs, each is not evidenced with this reason.
	CannotEvidence string
}

// Report is one run of the suite.
type Report struct {
	Started, Finished time.Time
	// Baseline is the evidence record of a plain run at the requested
	// level, read by the trusted side (nil when that run was refused).
	Baseline *evidence.Record
	// BaselineError says why the baseline run gave no record.
	BaselineError string
	Results       []record.ProbeResult
	// Full is true when every probe was selected.
	Full bool
}

// Selected lists the probes o selects; an unknown ID is an error.
func Selected(o Options) ([]Probe, error) {
	all := All()
	known := map[string]bool{}
	for _, p := range all {
		known[p.ID] = true
	}
	for _, id := range o.Only {
		if !known[id] {
			return nil, fmt.Errorf("no probe %q (cordon conformance list names them)", id)
		}
	}
	var out []Probe
	for _, p := range all {
		if len(o.Only) > 0 && !slices.Contains(o.Only, p.ID) {
			continue
		}
		if len(o.Classes) > 0 && !slices.Contains(o.Classes, p.Class) {
			continue
		}
		out = append(out, p)
	}
	return out, nil
}

// Run runs the selected probes one after another against the live
// system.
func Run(ctx context.Context, o Options) (*Report, error) {
	sel, err := Selected(o)
	if err != nil {
		return nil, err
	}
	if !filepath.IsAbs(o.Bin) {
		return nil, fmt.Errorf("the binary under test must be an absolute path, not %q", o.Bin)
	}
	dir := o.Dir
	if dir == "" {
		// Short: a daemon sandbox's exec socket lives at
		// <dir>/p<N>/state<M>/run/<id>.sock, and sun_path holds 108 bytes.
		if dir, err = os.MkdirTemp("", "cc-"); err != nil {
			return nil, err
		}
		if err := os.Chmod(dir, 0o711); err != nil {
			return nil, err
		}
		defer removeTree(dir)
	}
	if n := len(dir) + len(longestSocket); n > maxSocketPath {
		return nil, fmt.Errorf("the suite's scratch directory %s is too deep for the Unix sockets its sandboxes make under it (%d bytes, at most %d): set TMPDIR to a shorter directory", dir, n, maxSocketPath)
	}
	rep := &Report{Started: time.Now().UTC(), Full: len(o.Only) == 0 && len(o.Classes) == 0}
	// Run even when the provider says it cannot evidence the level: the
	// admission's refusal, observed from outside, is what the report shows.
	rep.Baseline, rep.BaselineError = baseline(ctx, o, dir)
	for i, p := range sel {
		var r record.ProbeResult
		switch {
		case o.CannotEvidence != "":
			r = record.ProbeResult{ID: p.ID, Class: p.Class, Clause: p.Clause, Title: p.Title, Started: time.Now().UTC(),
				Verdict: record.NotEvidenced, Reason: o.CannotEvidence, Facts: []record.Fact{}}
		case ctx.Err() != nil:
			// The suite's deadline (--timeout) passed: what did not run
			// is not evidenced, never a pass.
			r = record.ProbeResult{ID: p.ID, Class: p.Class, Clause: p.Clause, Title: p.Title, Started: time.Now().UTC(),
				Verdict: record.NotEvidenced, Reason: NotRunDeadline + " (" + context.Cause(ctx).Error() + ")", Facts: []record.Fact{}}
		default:
			r = runOne(ctx, o, dir, "p"+strconv.Itoa(i), p, rep.Baseline)
		}
		rep.Results = append(rep.Results, r)
		if o.Progress != nil {
			fmt.Fprintln(o.Progress, progressLine(r))
		}
	}
	rep.Finished = time.Now().UTC()
	return rep, nil
}

// baseline runs one plain program at the requested level and reads the
// evidence record the trusted side wrote.
func baseline(ctx context.Context, o Options, dir string) (*evidence.Record, string) {
	e := newEnv(o, dir, "b")
	if e == nil {
		return nil, "cannot make a scratch directory"
	}
	defer e.finish()
	ctx, cancel := context.WithTimeout(ctx, DefaultTimeout)
	defer cancel()
	ev := filepath.Join(e.Dir, "evidence.json")
	r, err := e.Run(ctx, RunOpts{Flags: []string{"--evidence", ev}, Op: []string{"ids"}})
	if err != nil {
		return nil, err.Error()
	}
	b, err := os.ReadFile(ev)
	if err != nil {
		return nil, fmt.Sprintf("the run (exit %d) wrote no evidence record: %s", r.Code, firstLine(r.Stderr))
	}
	var rec evidence.Record
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, "evidence record: " + err.Error()
	}
	if r.Code != 0 {
		// Evidence of a refused run: kept (it says what was not verified),
		// and the refusal reported.
		return &rec, fmt.Sprintf("the run was refused (exit %d, admitted %s): %s", r.Code, rec.LevelAdmitted, firstLine(r.Stderr))
	}
	return &rec, ""
}

// Socket paths under the suite's directory: the longest a probe's
// sandboxes make (a daemon sandbox's exec socket), and what sun_path
// holds with its NUL.
const (
	longestSocket = "/p999/state99/run/0123456789abcdef.sock"
	maxSocketPath = 107
)

// newEnv makes the probe's directory dir/name (short: see longestSocket;
// a fresh random one if name is taken).
func newEnv(o Options, dir, name string) *Env {
	d := filepath.Join(dir, name)
	err := os.Mkdir(d, 0o711)
	if errors.Is(err, os.ErrExist) {
		d, err = os.MkdirTemp(dir, name+"-")
	}
	if err != nil || os.Chmod(d, 0o711) != nil {
		return nil
	}
	return &Env{Bin: o.Bin, Provider: o.Provider, Profile: o.Profile, Level: o.Level, Dir: d}
}

func (e *Env) finish() {
	e.close()
	removeTree(e.Dir)
}

// runOne runs p in its own Env and judges what it observed.
func runOne(ctx context.Context, o Options, dir, name string, p Probe, base *evidence.Record) (r record.ProbeResult) {
	r = record.ProbeResult{ID: p.ID, Class: p.Class, Clause: p.Clause, Title: p.Title, Started: time.Now().UTC()}
	defer func() { r.Duration = time.Since(r.Started) }()
	if p.Destructive && (base == nil || !base.Boundaries[evidence.Resource].Verified) {
		r.Verdict, r.Reason = record.NotEvidenced, "destructive probe: runs only when the admitted evidence verified the resource boundary"
		return r
	}
	e := newEnv(o, dir, name)
	if e == nil {
		r.Verdict, r.Reason = record.Fail, "cannot make the probe's scratch directory"
		return r
	}
	defer e.finish()
	timeout := p.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out := call(pctx, p, e)
	if pctx.Err() != nil && out.Err == nil && out.NotEvidenced == "" {
		out.Err = fmt.Errorf("did not finish within %s", timeout)
	}
	if out.Err != nil && strings.Contains(out.Err.Error(), NoGateway) && e.RefusedGateway() {
		// cordon itself refused the gateway because the provider gives
		// the sandbox no leased identity: the provider cannot support
		// the probe, whichever probe met it. Only when cordon's own
		// report said so: the error may quote the program's stderr.
		out = Outcome{NotEvidenced: "the provider gives its sandboxes no leased identity, so no gateway can run for them (cordon refused: " + NoGateway + ")"}
	}
	r.Verdict, r.Reason = Judge(p, out)
	r.Facts, r.Hint = out.Facts, out.Hint
	if r.Facts == nil {
		r.Facts = []record.Fact{}
	}
	return r
}

// call runs the probe, turning a panic into a broken probe.
func call(ctx context.Context, p Probe, e *Env) (out Outcome) {
	defer func() {
		if v := recover(); v != nil {
			out = Outcome{Err: fmt.Errorf("panic: %v", v)}
		}
	}()
	return p.Run(ctx, e)
}

// removeTree detaches anything mounted under dir (a probe against a
// provider that isolates nothing may have mounted there on the host),
// then removes it.
func removeTree(dir string) {
	// mountinfo names real paths: a dir named through a symlink (a
	// TMPDIR that is one) would match none of its mounts.
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		dir = r
	}
	if f, err := os.Open("/proc/self/mountinfo"); err == nil {
		var under []string
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) <= 4 {
				continue
			}
			// The kernel escapes space, tab, newline and backslash: a
			// mount at "a b" must match too, or RemoveAll descends into
			// it and deletes what it shows.
			if p := cgroup.UnescapeMountinfo(fs[4]); p == dir || strings.HasPrefix(p, dir+"/") {
				under = append(under, p)
			}
		}
		f.Close()
		for i := len(under) - 1; i >= 0; i-- {
			_ = unix.Unmount(under[i], unix.MNT_DETACH)
		}
	}
	_ = os.RemoveAll(dir)
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// NotRunDeadline starts the reason of a probe the suite's deadline
// (--timeout) left unrun: the record counts it as not run (a partial
// run admits no claim).
const NotRunDeadline = "not run: the suite's deadline passed"

// NoGateway is what cordon says when it refuses a gateway for a sandbox
// its provider gave no leased identity (internal/launch).
const NoGateway = "has no leased identity for its gateway to run as"

// Exit statuses of `cordon conformance run`.
const (
	ExitPass       = 0 // no probe failed (and, for the whole suite, every class has a pass)
	ExitFail       = 1 // a probe failed
	ExitIncomplete = 3 // nothing failed, but a class has no pass: the claim is not evidenced
)

// ExitStatus sums a report up: any fail is ExitFail; otherwise every
// class (of the whole suite, or of the probes a partial run selected)
// needs a pass, else ExitIncomplete.
func (r *Report) ExitStatus() int {
	passed, ran := map[record.Class]bool{}, map[record.Class]bool{}
	for _, x := range r.Results {
		if x.Verdict == record.Fail {
			return ExitFail
		}
		ran[x.Class] = true
		if x.Verdict == record.Pass {
			passed[x.Class] = true
		}
	}
	if r.Full {
		for _, c := range record.Classes() {
			ran[c] = true
		}
	}
	if len(ran) == 0 {
		return ExitIncomplete
	}
	for c := range ran {
		if !passed[c] {
			return ExitIncomplete
		}
	}
	return ExitPass
}

// ErrNoProbes is returned when a selection matches nothing.
var ErrNoProbes = errors.New("no probe matches")

// progressLine is a probe's line on the operator's terminal. The reason
// quotes facts (what was read off the sandbox, a host file it may have
// written) and errors, so it goes through textsafe.Line.
func progressLine(r record.ProbeResult) string {
	line := fmt.Sprintf("%-13s %s (%.1fs)", strings.ToUpper(string(r.Verdict)), r.ID, r.Duration.Seconds())
	if r.Reason != "" {
		line += ": " + r.Reason
	}
	return textsafe.Line(line)
}
