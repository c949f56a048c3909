package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/evidence"
	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/gateway"
	"github.com/cordon-project/cordon/internal/launch"
	"github.com/cordon-project/cordon/internal/safefile"
	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/sandbox/registry"
	"github.com/cordon-project/cordon/internal/store"
	"github.com/cordon-project/cordon/internal/textsafe"
	"github.com/cordon-project/cordon/internal/trapscan"
)

type runFlags struct {
	level        string
	workspace    string
	ro, rw       []string
	rootfs       string
	memory, tmp  string
	pids         int64
	cpus         float64
	timeout      time.Duration
	env          []string
	evidenceFile string
	receiptFile  string
	insitu       string
	json         bool
	jsonFile     string
	tty          string
	logFile      string
	unsafeRoot   bool
	workload     string
	config       string
	agent        agentOpts
}

func runCmd(g *globals) *cobra.Command {
	f := &runFlags{}
	cmd := &cobra.Command{
		Use:   "run [flags] -- PROGRAM [ARGS...]",
		Short: "Run a program inside a new sandbox, admitted from evidence",
		Long: `Run PROGRAM (argv, never a shell string) inside a new sandbox.

The full boundary is always built. --level is the claim that must be evidenced:
before the program's first instruction cordon reads the live sandbox from
outside (namespaces, credentials, capabilities, seccomp, mounts, cgroups and
their limits, network interfaces and routes, a Landlock probe) and admits the
highest level the evidence supports. Below --level the program does not run.

With a terminal on stdin, stdout or stderr the program gets a pseudo-terminal
of the sandbox's own (--tty): job control works and Ctrl-C reaches only its foreground job.
Once it runs, cordon logs to <state-dir>/logs/run-<sandbox-id>.log (or
--log-file), never to its terminal, and prints a summary when it ends.
--json writes the outcome to descriptor 3 (3>outcome.json), never stdout.
See docs/terminals.md.

Exit status: the program's own; 125 when cordon refuses or fails (the failure
kind and reason are printed on stderr); 126 the program cannot be executed;
127 it was not found; 124 timeout; 128+n killed by signal n.`,
		Example: `  cordon run -- /bin/echo hello
  cordon run --workspace "$PWD" --memory 2G --pids 512 --timeout 10m -- make test
  cordon run --ro /opt/tools:/tools --env FOO=bar --evidence ev.json -- /tools/agent
  cordon run --json -- printf abc 3>outcome.json
  cordon run --agent claude --workspace .        # Claude Code, interactive (docs/agents.md)
  cordon run --agent codex --workspace . -- exec "fix the tests"`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.agent.checkArgs(args, cmd.ArgsLenAtDash()); err != nil {
				return err
			}
			return g.run(cmd.Context(), f, args)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.level, "level", sandbox.DedicatedContainer.String(), "isolation level that must be evidenced: SHARED, DOMAIN_ISOLATED, DEDICATED_RUNTIME, DEDICATED_CONTAINER, DEDICATED_VM")
	fl.StringVar(&f.workspace, "workspace", "", "host directory bound read-write at /workspace (the working directory; a relative path is from here, e.g. --workspace .); files keep its owner's uid")
	fl.StringArrayVar(&f.ro, "ro", nil, "read-only bind HOST[:SANDBOX] (repeatable; HOST may be relative to this directory, SANDBOX is absolute)")
	fl.StringArrayVar(&f.rw, "rw", nil, "read-write bind HOST[:SANDBOX] (repeatable; idmapped to the owner like --workspace)")
	fl.StringVar(&f.rootfs, "rootfs", "", "explicit read-only root directory instead of the host's /usr layout")
	fl.StringVar(&f.memory, "memory", "", "memory limit, swap included (1024-based units: 512M, 2G, 2GiB; default 4GiB)")
	fl.Int64Var(&f.pids, "pids", 0, "maximum number of processes and threads (default 4096)")
	fl.Float64Var(&f.cpus, "cpus", 0, "CPU limit in cores, e.g. 0.5 (default: all)")
	fl.StringVar(&f.tmp, "tmp-size", "", "size of the /tmp and HOME scratch tmpfs each (default 1GiB)")
	fl.DurationVar(&f.timeout, "timeout", 0, "kill the program after this long (e.g. 30s, 10m); exit 124")
	fl.StringArrayVar(&f.env, "env", nil, "K=V for the program's environment (repeatable); the host environment is not inherited")
	fl.StringVar(&f.evidenceFile, "evidence", "", "write the evidence record (cordon.evidence/v1 JSON) to this file")
	fl.StringVar(&f.receiptFile, "receipt", "", "write the session's signed containment receipt (a DSSE envelope over an in-toto statement; verify with log.pub) to this file")
	fl.StringVar(&f.insitu, "insitu", sandbox.InSituDefault, "in-situ set attempted at start and judged from outside: default (a few milliseconds) or full (more of the kernel's surface)")
	addRunIOFlags(fl, f)
	fl.BoolVar(&f.unsafeRoot, "unsafe-root-workspace", false, "UNSAFE: allow a writable bind of a directory owned by root or a system account")
	fl.StringVar(&f.workload, "workload", "default", "workload name this run belongs to (the config's workload when --config is given)")
	addAgentFlags(fl, &f.agent)
	fl.StringVar(&f.config, "config", "", "gateway configuration (YAML, cordon/v1; see docs/config.md and examples/): model routes, egress allow-list, budgets, secrets. Without it the sandbox has no way out at all")
	return cmd
}

// Outcome is the --json output of cordon run.
type Outcome struct {
	SandboxID       string        `json:"sandbox_id,omitempty"`
	LevelRequested  sandbox.Level `json:"level_requested"`
	LevelAdmitted   sandbox.Level `json:"level_admitted,omitempty"`
	EnforcementMode string        `json:"enforcement_mode,omitempty"`
	ExitCode        int           `json:"exit_code"`
	Signal          int           `json:"signal,omitempty"`
	OOM             bool          `json:"oom,omitempty"`
	TimedOut        bool          `json:"timed_out,omitempty"`
	FailureKind     failure.Kind  `json:"failure_kind,omitempty"`
	Error           string        `json:"error,omitempty"`
	Unverified      []string      `json:"unverified_boundaries,omitempty"`
	// ReceiptID and ReceiptDigest name the session's signed containment
	// receipt in the evidence log (docs/session-receipts.md).
	ReceiptID     int64  `json:"receipt_id,omitempty"`
	ReceiptDigest string `json:"receipt_digest,omitempty"`
	DurationMS    int64  `json:"duration_ms"`
	// WorkspaceTraps: what the program left in its writable binds that can
	// trap a host user (exact names and targets).
	WorkspaceTraps []trapscan.Report `json:"workspace_traps,omitempty"`
	// Gateway reports the gateway's own cgroup and what it lost; absent
	// without --config.
	Gateway *GatewayOutcome `json:"gateway,omitempty"`
}

// GatewayOutcome is the gateway's part of a run's outcome: its own
// cgroup's limits as read back, the OOM kills in it, and whether it ended
// before the program (its open crossings then charged as gateway_lost).
type GatewayOutcome struct {
	MemoryLimitBytes int64 `json:"memory_limit_bytes"`
	PidsLimit        int64 `json:"pids_limit"`
	OOMKills         int64 `json:"oom_kills"`
	EndedEarly       bool  `json:"ended_early,omitempty"`
	LostCrossings    int64 `json:"lost_crossings,omitempty"`
}

// parseSpec parses and validates every flag before anything is created.
func (f *runFlags) parseSpec(argv []string) (sandbox.Spec, error) {
	fail := func(format string, a ...any) (sandbox.Spec, error) {
		return sandbox.Spec{}, failure.Failf(failure.KindUsage, "run", format, a...)
	}
	level, err := sandbox.ParseLevel(f.level)
	if err != nil {
		return fail("--level: %v", err)
	}
	if f.workspace, err = hostPath("run", "--workspace", f.workspace); err != nil {
		return sandbox.Spec{}, err
	}
	if f.rootfs, err = hostPath("run", "--rootfs", f.rootfs); err != nil {
		return sandbox.Spec{}, err
	}
	spec := sandbox.Spec{Argv: argv, Level: level, Workload: f.workload, UnsafeRootWorkspace: f.unsafeRoot,
		Workspace: f.workspace, Rootfs: f.rootfs, Env: f.env, InSitu: f.insitu}
	if spec.Binds, err = parseBinds(f.ro, f.rw); err != nil {
		return sandbox.Spec{}, err
	}
	if f.memory != "" {
		if spec.Limits.MemoryBytes, err = ParseSize(f.memory); err != nil {
			return fail("--memory: %v", err)
		}
	}
	if f.tmp != "" {
		if spec.Limits.TmpBytes, err = ParseSize(f.tmp); err != nil {
			return fail("--tmp-size: %v", err)
		}
	}
	spec.Limits.Pids, spec.Limits.CPUs, spec.Limits.Timeout = f.pids, f.cpus, f.timeout
	if err := launch.Validate(&spec); err != nil {
		return sandbox.Spec{}, err
	}
	if f.evidenceFile != "" && !filepath.IsAbs(f.evidenceFile) {
		abs, err := filepath.Abs(f.evidenceFile)
		if err != nil {
			return fail("--evidence: %v", err)
		}
		f.evidenceFile = abs
	}
	if f.evidenceFile != "" {
		if err := checkEvidenceDir(f.evidenceFile); err != nil {
			return sandbox.Spec{}, err
		}
	}
	if f.receiptFile != "" {
		abs, err := filepath.Abs(f.receiptFile)
		if err != nil {
			return fail("--receipt: %v", err)
		}
		f.receiptFile = abs
		if err := checkEvidenceDir(abs); err != nil {
			return sandbox.Spec{}, err
		}
	}
	return spec, nil
}

// parseBinds parses --ro and --rw HOST[:SANDBOX] flags; each host path
// must exist (the caller's own path: cordon run reads it as the caller
// asked).
func parseBinds(ro, rw []string) ([]sandbox.Bind, error) {
	var out []sandbox.Bind
	for _, p := range []struct {
		vals []string
		rw   bool
		name string
	}{{ro, false, "--ro"}, {rw, true, "--rw"}} {
		for _, v := range p.vals {
			host, target, err := bindArg("run", p.name, v)
			if err != nil {
				return nil, err
			}
			if _, err := os.Lstat(host); err != nil {
				return nil, failure.Failf(failure.KindUsage, "run", "%s %s: %v", p.name, v, err)
			}
			out = append(out, sandbox.Bind{Source: host, Target: target, Writable: p.rw})
		}
	}
	return out, nil
}

// aRun is one cordon run: its flags, its outcome and its trace.
type aRun struct {
	g     *globals
	f     *runFlags
	began time.Time
	tr    *tracer
	out   Outcome
	spec  sandbox.Spec
	l     *launch.Launch
	prov  sandbox.Provider
	st    *store.Store // the run's store (the session receipt is logged in it)
	plan  *launch.Plan // nil without --config
	// outcome is descriptor 3 (--json); log is where log lines go; term
	// is the program's pseudo-terminal (runout.go, terminal.go).
	outcome *os.File
	log     *runLog
	term    *terminal
}

func (g *globals) run(ctx context.Context, f *runFlags, argv []string) error {
	r := &aRun{g: g, f: f, began: time.Now(), out: Outcome{LevelRequested: sandbox.DedicatedContainer}}
	r.tr = newTracer(r.began)
	r.log = &runLog{stderr: g.stderr}
	g.logw = r.log
	defer r.tr.flush(g.stderr)
	code, err := r.do(ctx, argv)
	return r.finish(code, err)
}

// finish prints the outcome and returns the exit status.
func (r *aRun) finish(code int, err error) error {
	r.out.DurationMS = time.Since(r.began).Milliseconds()
	if err != nil {
		r.out.FailureKind, r.out.Error = failure.KindOf(err), err.Error()
		var xe *sandbox.ExecError
		if errors.As(err, &xe) {
			r.out.FailureKind = failure.KindExec
		}
		fmt.Fprintf(r.g.stderr, "cordon: %s\n", describe(err))
	}
	r.out.ExitCode = code
	r.writeOutcome()
	return &exitError{code: code}
}

// do is the run through the lifecycle (package launch): it returns the
// exit status, and the error that made cordon refuse or fail.
func (r *aRun) do(ctx context.Context, argv []string) (int, error) {
	g := r.g
	if err := r.checkOutcome(); err != nil {
		return failure.ExitRefused, err
	}
	spec, err := r.f.parseSpec(argv)
	if err != nil {
		return failure.ExitRefused, err
	}
	if err := r.checkIO(&spec); err != nil {
		return failure.ExitRefused, err
	}
	if spec.UnsafeRootWorkspace {
		g.logger().Warn("UNSAFE: --unsafe-root-workspace: writable binds of directories owned by root or a system account are allowed")
	}
	r.out.LevelRequested = spec.Level
	if err := requireRoot("run"); err != nil {
		return failure.ExitRefused, err
	}
	st, err := g.openStore()
	if err != nil {
		return failure.ExitRefused, err
	}
	defer func() { st.Close(); r.tr.mark("store_close") }()
	r.tr.mark("store_open")
	r.st = st
	if r.prov, err = g.runProvider(ctx, st); err != nil {
		return failure.ExitRefused, err
	}
	r.tr.mark("reclaim")
	plan, err := r.loadPlan()
	if err != nil {
		return failure.ExitRefused, err
	}
	if err := r.applyAgent(&spec, plan); err != nil {
		return failure.ExitRefused, err
	}
	r.plan = plan
	tp, err := newTelemetry(ctx, plan, g.logger())
	if err != nil {
		return failure.ExitRefused, err
	}
	// After the session's own flush (launch Close): the exporter's last
	// batch, bounded by telemetry.ExportTimeout.
	defer tp.Shutdown(context.WithoutCancel(ctx))
	host := &launch.Host{Provider: r.prov, Store: st, StateDir: g.stateDir, Logger: g.logger(), Version: Version,
		ToolStderr: r.log, GatewayStderr: r.log, CheckpointEvery: checkpointEvery, Telemetry: tp}
	r.l, err = launch.Provision(ctx, host, spec, plan)
	r.tr.mark("provision")
	if err != nil {
		return failure.ExitRefused, err
	}
	// The summary comes after the gateway has stopped: it logs what it
	// decided until then.
	defer r.endLog()
	defer func() { r.l.Close(context.WithoutCancel(ctx)); r.tr.mark("deprovision") }()
	r.spec, r.out.SandboxID = r.l.Spec(), r.l.Sandbox().ID()
	defer r.forwardSignals()()
	// On every path, panics too, the terminal is restored (r.term is set
	// just before the program starts: read it then, not now).
	defer func() { r.term.stop() }()
	if code, err := r.start(ctx); err != nil {
		return code, err
	}
	return r.wait(ctx)
}

// runProvider is the --provider for a standalone run, after the residue
// of standalone runs whose owner is provably gone is reclaimed.
func (g *globals) runProvider(ctx context.Context, st *store.Store) (sandbox.Provider, error) {
	prov, err := g.newProvider(registry.Options{Store: st, Logger: g.logger(), CordonSHA256: binaryDigest(g.stateDir), TestSkip: g.testSkip})
	if err != nil {
		return nil, err
	}
	if rc, ok := prov.(registry.Reclaimer); ok {
		if _, err := rc.Reclaim(ctx); err != nil {
			g.logger().Warn("reclaim residue", "err", err)
		}
	}
	return prov, nil
}

// forwardSignals forwards SIGINT/SIGTERM/SIGHUP/SIGQUIT to the program,
// and ends the whole tree if it has not ended within the grace period.
// SIGQUIT is among them: the Go runtime's default for it (a goroutine
// dump and exit 2) would leave the terminal raw and the sandbox
// unprovisioned. It returns the function that stops forwarding.
func (r *aRun) forwardSignals() func() {
	sb := r.l.Sandbox()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	go func() {
		for s := range sigs {
			sb.Signal(s.(syscall.Signal))
			go func() {
				time.Sleep(2 * time.Second)
				_ = sb.Stop(context.Background())
			}()
		}
	}()
	return func() { signal.Stop(sigs) }
}

// start builds the boundary, admits from evidence, starts the gateway and
// executes the program.
func (r *aRun) start(ctx context.Context) (int, error) {
	err := r.l.Start(ctx, nil, true)
	r.tr.sub(r.l.Sandbox(), "start")
	if rec := r.l.Record; rec != nil {
		r.out.LevelAdmitted, r.out.EnforcementMode = rec.LevelAdmitted, rec.EnforcementMode
		for _, name := range evidence.Boundaries() {
			if !rec.Boundaries[name].Verified {
				r.out.Unverified = append(r.out.Unverified, name)
			}
		}
	}
	if err != nil {
		r.writeEvidence()
		return failure.ExitRefused, err
	}
	if err := r.signReceipt(ctx); err != nil {
		r.writeEvidence()
		return failure.ExitRefused, err
	}
	if err := r.l.StartGateway(ctx); err != nil {
		return failure.ExitRefused, err
	}
	if r.l.Gateway() != nil {
		r.tr.mark("gateway")
	}
	r.announce()
	if err := r.logToFile(); err != nil {
		return failure.ExitRefused, err
	}
	if r.spec.Terminal != nil {
		if r.term, err = rawTerminal(); err != nil {
			return failure.ExitRefused, err
		}
	}
	if err := r.l.Exec(ctx); err != nil {
		r.writeEvidence()
		var xe *sandbox.ExecError
		if errors.As(err, &xe) {
			if xe.NotFound() {
				return failure.ExitNotFound, notFound(r.spec, xe.Msg)
			}
			return failure.ExitNoExec, failure.Failf(failure.KindExec, r.spec.Argv[0], "%s (cannot be executed)", xe.Msg)
		}
		return failure.ExitRefused, err
	}
	r.tr.mark("exec")
	if r.g.pauseAt == "run.after_exec" {
		time.Sleep(3 * time.Second) // test builds only (--test-pause-at)
	}
	if r.spec.Terminal != nil {
		if err := r.term.attach(r.l.Sandbox(), r.spec.Terminal, r.g.stdout, r.g.stderr); err != nil {
			return failure.ExitRefused, err
		}
	}
	if r.g.panicAt == "run.after_attach" {
		panic("test: run.after_attach") // test builds only (--test-panic-at)
	}
	return 0, nil
}

// writeEvidence writes the record where --evidence says. The path may
// be in the workspace the program could change: see writeRecord.
func (r *aRun) writeEvidence() error {
	rec := r.l.Record
	if r.f.evidenceFile == "" || rec == nil {
		return nil
	}
	werr := writeRecord(r.f.evidenceFile, rec)
	if werr != nil {
		fmt.Fprintf(r.g.stderr, "cordon: %s\n", describe(werr))
	}
	return werr
}

// wait waits for the program, scans for traps, writes the evidence and
// reports how the program ended.
func (r *aRun) wait(ctx context.Context) (int, error) {
	ex, err := r.l.Wait(ctx)
	// The program has ended: its terminal output is drained and cordon's
	// terminal restored before anything more is printed (the log goes
	// on to its file until the gateway has stopped: see do).
	r.term.stop()
	if err != nil {
		return failure.ExitRefused, err
	}
	r.tr.mark("wait")
	// The program and everything it started have ended: report what it
	// left in the workspace that can trap the host user next. Tool
	// servers write their binds for the program: they are stopped first
	// (nothing writes after the scan) and their writable binds scanned too.
	r.out.WorkspaceTraps = r.l.ScanTraps(context.WithoutCancel(ctx))
	printTraps(r.g.stderr, r.out.WorkspaceTraps)
	r.tr.mark("trap_scan")
	now := time.Now().UTC()
	if rec := r.l.Record; rec != nil {
		rec.FinishedAt = &now
		rec.Outcome = &evidence.Outcome{ExitCode: ex.Code, Signal: ex.Signal, OOM: ex.OOM, TimedOut: ex.TimedOut}
		rec.WorkspaceTraps = r.out.WorkspaceTraps
	}
	evErr := r.writeEvidence()
	if gw := r.l.Gateway(); gw != nil {
		r.out.Gateway = r.g.gatewayOutcome(r.l.Sandbox(), gw.Proc)
	}
	r.out.Signal, r.out.OOM, r.out.TimedOut = ex.Signal, ex.OOM, ex.TimedOut
	code := r.exitCode(ex)
	if evErr != nil {
		// The caller asked for the record and does not have it: that is
		// cordon failing, whatever the program did (already on stderr).
		fmt.Fprintf(r.g.stderr, "cordon: the program exited with status %d, but the evidence record was not written\n", code)
		r.out.FailureKind, r.out.Error = failure.KindOf(evErr), evErr.Error()
		code = failure.ExitRefused
	}
	return code, nil
}

// exitCode is cordon's exit status for how the program ended, with what a
// person must know said on stderr.
func (r *aRun) exitCode(ex sandbox.Exit) int {
	memory := func() string { return FormatSize(r.prov.Limits(r.spec).MemoryBytes) }
	switch {
	case ex.TimedOut:
		fmt.Fprintf(r.g.stderr, "cordon: %s: the program ran longer than --timeout %s and was killed\n", failure.KindTimeout, r.f.timeout)
		return failure.ExitTimeout
	case ex.Signal != 0:
		if ex.SocketMemory {
			// The sandbox's or its gateway's group: cordon's log says which.
			fmt.Fprintf(r.g.stderr, "cordon: the sandbox was killed: the TCP socket memory of the sandbox or of its gateway passed its bound (1.25 x its TCP limit; see docs/host-pools.md)\n")
		} else if ex.OOM {
			fmt.Fprintf(r.g.stderr, "cordon: the program was killed by the out-of-memory killer (memory limit %s)\n", memory())
		}
		return 128 + ex.Signal
	case ex.OOM:
		fmt.Fprintf(r.g.stderr, "cordon: the out-of-memory killer acted in the sandbox (memory limit %s)\n", memory())
	}
	return ex.Code
}

// checkpointEvery is how often a run signs an evidence-log checkpoint.
const checkpointEvery = 5 * time.Second

// writeRecord writes v as indented JSON to path for the caller. cordon
// runs as root and path is often inside the workspace, which the program
// owned until a moment ago: safefile opens the directory without following
// a symlink anywhere, creates a randomly named temporary file exclusively
// in it and renames it onto the target, and refuses a symlink or a
// non-regular file at the target (design decision 15).
func writeRecord(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return failure.Fail(failure.KindInternal, "evidence", err)
	}
	if err := safefile.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return evidencePathError(err)
	}
	return nil
}

// evidencePathError is a safefile error as a failure kind: a symlink or
// something other than a regular file where the record goes is refused
// (policy_rejected); anything else is the caller's path (usage).
func evidencePathError(err error) error {
	if errors.Is(err, safefile.ErrSymlink) || errors.Is(err, safefile.ErrNotRegular) {
		return failure.Failf(failure.KindPolicyRejected, "evidence", "%v; refused: cordon never writes through a symlink or onto anything but a regular file (give a path without symlinks, and remove what is there)", err)
	}
	return failure.Fail(failure.KindUsage, "evidence", err)
}

// checkEvidenceDir refuses, before anything runs, an --evidence path whose
// directory cannot be opened without following a symlink, or that names a
// symlink or a non-regular file now.
func checkEvidenceDir(path string) error {
	fd, err := safefile.OpenDir(filepath.Dir(path))
	if err != nil {
		return evidencePathError(err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstatat(fd, filepath.Base(path), &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Mode&unix.S_IFMT != unix.S_IFREG {
		what := safefile.ErrNotRegular
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			what = safefile.ErrSymlink
		}
		return evidencePathError(&safefile.Error{Op: "check target", Path: path, Err: what})
	}
	return nil
}

// trapWhat says what each kind of trap does to a host user.
var trapWhat = map[trapscan.Kind]string{
	trapscan.SymlinkOut: "symlink leaving the workspace",
	trapscan.FIFO:       "FIFO (whoever opens it blocks)",
	trapscan.Socket:     "Unix socket (a way to whatever listens; the next run on this directory is refused until it is removed)",
	trapscan.CharDevice: "character device",
	trapscan.BlockDev:   "block device",
}

// printTraps reports traps on stderr for a person: every name and target
// came from the program and goes through textsafe.
func printTraps(w io.Writer, reps []trapscan.Report) {
	for _, r := range reps {
		if len(r.Traps) > 0 {
			fmt.Fprintf(w, "cordon: the program left %d thing(s) in %s that can trap a host user; check before opening them:\n", len(r.Traps), textsafe.Line(r.Root))
		}
		for _, t := range r.Traps {
			line := fmt.Sprintf("cordon:   %s: %s", textsafe.Line(t.Path), trapWhat[t.Kind])
			if t.Kind == trapscan.SymlinkOut {
				line += " -> " + textsafe.Line(t.Target)
			}
			fmt.Fprintln(w, line)
		}
		if r.Truncated != "" {
			fmt.Fprintf(w, "cordon: the trap scan of %s stopped early (%s); what it did not see is not known to be clean\n", textsafe.Line(r.Root), textsafe.Line(r.Truncated))
		}
	}
}

// gatewayOutcome reads the gateway's cgroup back and reports on stderr
// what a person must know: the gateway was OOM-killed or ended early.
func (g *globals) gatewayOutcome(sb sandbox.Sandbox, proc *gateway.Process) *GatewayOutcome {
	o := &GatewayOutcome{EndedEarly: proc.Exited(), LostCrossings: proc.Lost()}
	f, err := sb.HelperFacts()
	if err != nil {
		g.logger().Warn("read the gateway's cgroup", "err", err)
	}
	o.MemoryLimitBytes, o.PidsLimit, o.OOMKills = f.MemoryBytes, f.Pids, f.OOMKills
	if f.OOMKills > 0 {
		fmt.Fprintf(g.stderr, "cordon: the out-of-memory killer acted in the gateway's own cgroup (memory limit %s)\n", FormatSize(f.MemoryBytes))
	}
	if o.EndedEarly {
		fmt.Fprintf(g.stderr, "cordon: the gateway ended before the program; its open crossings were charged in full (reason %s)\n", store.ReasonGatewayLost)
	}
	return o
}
