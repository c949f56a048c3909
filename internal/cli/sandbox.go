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
	"strings"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/config"
	"github.com/cordon-project/cordon/internal/custody"
	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/hostmgr"
	"github.com/cordon-project/cordon/internal/hostmgr/proto"
	"github.com/cordon-project/cordon/internal/sandbox/linux"
	"github.com/cordon-project/cordon/internal/textsafe"
)

type sandboxFlags struct {
	socket string
	json   bool
}

func sandboxCmd(g *globals) *cobra.Command {
	sf := &sandboxFlags{}
	cmd := &cobra.Command{
		Use:   "sandbox",
		Short: "Long-lived sandboxes owned by the daemon: create, start, exec, stop, rm, ls, logs",
		Long: `Manage sandboxes owned by 'cordon daemon' (which must be running). They
outlive this command: create provisions one, start builds and admits its
boundary (and runs its main program, if it has one), exec runs more programs
in it under the same boundary and gateway identity, stop ends it for good,
rm removes its record and logs.

Per operation:
  create   mints a new identity (sandbox id, lease); a taken name is refused.
  start    idempotent: starting a running sandbox reports it; a stopped one
           never starts again (create a new one).
  exec     each call is a new process; not retried.
  stop     idempotent; final: the state is persisted, a daemon restart does
           not resume stopped work. --all is the emergency stop (root).
  rm       idempotent: removing an absent sandbox succeeds.
  ls, logs, status: read only.`,
		Example: `  cordon sandbox create dev --workspace "$PWD" --config cordon.yaml
  cordon sandbox start dev
  cordon sandbox exec dev -- make test
  cordon sandbox logs dev --follow
  cordon sandbox stop dev && cordon sandbox rm dev
  cordon sandbox stop --all`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&sf.socket, "socket", defaultSocket(), "the daemon's socket (env CORDON_SOCKET)")
	pf.BoolVar(&sf.json, "json", false, "machine-readable output")
	cmd.AddCommand(sbCreateCmd(g, sf), sbNameCmd(g, sf, "start", "Start a created sandbox: build, evidence and admit its boundary; run its main program"),
		sbExecCmd(g, sf), sbStopCmd(g, sf), sbNameCmd(g, sf, "rm", "Remove a sandbox (stopping it first): its record and logs"),
		sbLsCmd(g, sf), sbLogsCmd(g, sf), sbNameCmd(g, sf, "readmit", "Re-admit a draining sandbox with the current runtime, policy and rootfs identities"),
		sbNameCmd(g, sf, "status", "Show one sandbox with its evidence record"), sbProfileCmd(g, sf))
	return cmd
}

// stopCmd is the top-level `cordon stop NAME | --all`.
func stopCmd(g *globals) *cobra.Command {
	sf := &sandboxFlags{}
	c := sbStopCmd(g, sf)
	c.Flags().StringVar(&sf.socket, "socket", defaultSocket(), "the daemon's socket (env CORDON_SOCKET)")
	c.Flags().BoolVar(&sf.json, "json", false, "machine-readable output")
	return c
}

// dial connects to the daemon, with an error that says what to do.
func (sf *sandboxFlags) dial() (*proto.Client, error) {
	c, err := proto.Dial(sf.socket)
	if err != nil {
		return nil, failure.Failf(failure.KindUnsupported, "daemon", "no cordon daemon answers on %s (%v); start one with 'cordon daemon', or use 'cordon run' for a one-off sandbox", sf.socket, err)
	}
	return c, nil
}

// do makes one call on a fresh connection to the daemon.
func (sf *sandboxFlags) do(ctx context.Context, op string, args any, files []*os.File, out any) error {
	c, err := sf.dial()
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Do(ctx, op, args, files, out)
}

func (g *globals) print(sf *sandboxFlags, v any, text func()) error {
	if sf.json {
		return writeJSON(g.stdout, v)
	}
	text()
	return nil
}

func sbNameCmd(g *globals, sf *sandboxFlags, op, short string) *cobra.Command {
	return &cobra.Command{
		Use:   op + " NAME",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var out json.RawMessage
			if err := sf.do(cmd.Context(), op, hostmgr.NameArgs{Name: args[0]}, nil, &out); err != nil {
				return err
			}
			if sf.json || op == "status" {
				// The daemon's JSON as is, with invisible characters
				// in its strings written as \u escapes (same value).
				_, err := io.WriteString(g.stdout, textsafe.JSON(out)+"\n")
				return err
			}
			var i hostmgr.Info
			if json.Unmarshal(out, &i) == nil && i.Name != "" {
				printInfo(g, []hostmgr.Info{i})
			} else {
				fmt.Fprintf(g.stdout, "%s: %s\n", op, textsafe.Line(args[0]))
			}
			return nil
		},
	}
}

func printInfo(g *globals, is []hostmgr.Info) {
	now := time.Now()
	tw := tabwriter.NewWriter(g.stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tID\tOWNER\tSTATE\tAGE\tPROFILE\tLEVEL\tDRAIN\tMAIN\tNOTE")
	for _, i := range is {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", textsafe.Line(i.Name), textsafe.Line(i.ID), i.Owner, textsafe.Line(i.State),
			age(i.Created, now), textsafe.Line(i.Profile), textsafe.Line(i.Level), textsafe.Line(i.Drain), textsafe.Line(i.MainExit), textsafe.Line(i.Note))
	}
	tw.Flush()
	for _, i := range is {
		if len(i.Bypassed) > 0 {
			fmt.Fprintf(g.stdout, "%s runs FULL_CONTROL_LAB; bypassed controls:\n", textsafe.Line(i.Name))
			for _, b := range i.Bypassed {
				fmt.Fprintf(g.stdout, "  - %s\n", textsafe.Line(b))
			}
		}
	}
}

// age is how long ago created was, in its largest whole unit (45s, 12m,
// 3h, 9d); "-" when it is unknown (the zero time).
func age(created, now time.Time) string {
	if created.IsZero() {
		return "-"
	}
	d := max(now.Sub(created), 0)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d/time.Hour))
	default:
		return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
	}
}

type createFlags struct {
	workspace, config, profile, accept, level, memory, tmp string
	rootfs                                                 string
	env, volumes, ro, rw                                   []string
	pids                                                   int64
	cpus                                                   float64
	unsafeRoot                                             bool
}

func sbCreateCmd(g *globals, sf *sandboxFlags) *cobra.Command {
	f := &createFlags{}
	cmd := &cobra.Command{
		Use:   "create NAME [flags] [-- PROGRAM [ARGS...]]",
		Short: "Create (provision) a sandbox; with a program, start runs it as the sandbox's main program",
		Long: `Create a sandbox owned by you: the daemon writes its record, leases a UID/GID
range, creates its cgroups and binds your workspace — which this command
opens itself and hands over as a descriptor (you must own it). Nothing runs
until 'start'. Without PROGRAM the sandbox idles and runs what you 'exec'.

--config sends the gateway configuration, its policy files and the secrets
it names (read here, as you: environment variables and files you can read).

FULL_CONTROL_LAB (--profile) bypasses policy, approval and budget gates; it
needs --accept with the exact phrase the refusal prints, is shown in every
listing, marks the bypassed boundaries UNVERIFIED in the evidence record, and
resets to SAFE_GUIDED when the daemon or the sandbox restarts.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, argv := args[0], args[1:]
			if len(argv) > 0 && cmd.ArgsLenAtDash() != 1 {
				return failure.Failf(failure.KindUsage, "sandbox create", "put the program after --: cordon sandbox create NAME [flags] -- PROGRAM [ARGS...]")
			}
			ca, files, err := f.args(name, argv)
			if err != nil {
				return err
			}
			defer func() {
				for _, fl := range files {
					fl.Close()
				}
			}()
			var i hostmgr.Info
			if err := sf.do(cmd.Context(), "create", ca, files, &i); err != nil {
				return err
			}
			return g.print(sf, i, func() { printInfo(g, []hostmgr.Info{i}) })
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.workspace, "workspace", "", "your directory, bound read-write at /workspace (opened by this command, sent as a descriptor)")
	fl.StringVar(&f.config, "config", "", "gateway configuration (cordon/v1 YAML); without it the sandbox has no way out")
	fl.StringVar(&f.profile, "profile", "SAFE_GUIDED", "SAFE_GUIDED or FULL_CONTROL_LAB")
	fl.StringVar(&f.accept, "accept", "", "the exact risk-acceptance phrase FULL_CONTROL_LAB requires")
	fl.StringVar(&f.level, "level", "", "isolation level that must be evidenced (default DEDICATED_CONTAINER)")
	fl.StringArrayVar(&f.env, "env", nil, "K=V for every program's environment (repeatable)")
	fl.StringArrayVar(&f.ro, "ro", nil, "read-only bind HOST[:SANDBOX] of a directory or file you own (opened by this command, sent as a descriptor; repeatable)")
	fl.StringArrayVar(&f.rw, "rw", nil, "read-write bind HOST[:SANDBOX] of a directory or file you own (opened by this command, sent as a descriptor; repeatable)")
	fl.StringVar(&f.rootfs, "rootfs", "", "a root directory you own, read-only, instead of the host's /usr layout (opened by this command, sent as a descriptor)")
	fl.StringArrayVar(&f.volumes, "volume", nil, "NAME:/TARGET[:ro] — a daemon-managed volume (cordon volume create NAME) bound at TARGET (repeatable)")
	fl.StringVar(&f.memory, "memory", "", "memory limit, swap included (default 4GiB)")
	fl.StringVar(&f.tmp, "tmp-size", "", "size of /tmp and HOME, each (default 1GiB)")
	fl.Int64Var(&f.pids, "pids", 0, "processes and threads (default 4096)")
	fl.Float64Var(&f.cpus, "cpus", 0, "CPU cores (default: all)")
	fl.BoolVar(&f.unsafeRoot, "unsafe-root-workspace", false, "UNSAFE (root only): allow a workspace owned by root or a system account")
	return cmd
}

// args builds create's request: everything is read here, as the caller.
func (f *createFlags) args(name string, argv []string) (hostmgr.CreateArgs, []*os.File, error) {
	fail := func(format string, a ...any) (hostmgr.CreateArgs, []*os.File, error) {
		return hostmgr.CreateArgs{}, nil, failure.Failf(failure.KindUsage, "sandbox create", format, a...)
	}
	if err := proto.ValidName(name); err != nil {
		return fail("%v", err)
	}
	ca := hostmgr.CreateArgs{Name: name, Profile: f.profile, Accept: f.accept,
		Spec: hostmgr.Spec{Argv: argv, Env: f.env, Level: f.level, UnsafeRootWorkspace: f.unsafeRoot}}
	var err error
	if f.memory != "" {
		if ca.Spec.Limits.MemoryBytes, err = ParseSize(f.memory); err != nil || ca.Spec.Limits.MemoryBytes < 8<<20 {
			return fail("--memory %s: want a size of at least 8MiB", f.memory)
		}
	}
	if f.tmp != "" {
		if ca.Spec.Limits.TmpBytes, err = ParseSize(f.tmp); err != nil || ca.Spec.Limits.TmpBytes < 1<<20 {
			return fail("--tmp-size %s: want a size of at least 1MiB", f.tmp)
		}
	}
	if f.pids < 0 || (f.pids > 0 && f.pids < 8) {
		return fail("--pids %d: want 8 or more", f.pids)
	}
	ca.Spec.Limits.Pids, ca.Spec.Limits.CPUs = f.pids, f.cpus
	for _, v := range f.volumes {
		parts := strings.Split(v, ":")
		if len(parts) < 2 || len(parts) > 3 || (len(parts) == 3 && parts[2] != "ro") {
			return fail("--volume %s: want NAME:/TARGET or NAME:/TARGET:ro", v)
		}
		ca.Spec.Volumes = append(ca.Spec.Volumes, hostmgr.VolumeMount{Name: parts[0], Target: parts[1], ReadOnly: len(parts) == 3})
	}
	files, err := f.openFiles(&ca.Spec)
	if err != nil {
		return hostmgr.CreateArgs{}, nil, err
	}
	if f.config != "" {
		gs, err := gatewaySpec(f.config)
		if err != nil {
			for _, fl := range files {
				fl.Close()
			}
			return hostmgr.CreateArgs{}, nil, err
		}
		ca.Spec.Gateway = gs
	}
	return ca, files, nil
}

// openFiles opens, here and as the caller, without following symlinks,
// what the daemon is to bind: the workspace, each --ro/--rw source, the
// --rootfs. They travel as descriptors, in that order; the daemon binds
// these very files and opens no path.
func (f *createFlags) openFiles(s *hostmgr.Spec) ([]*os.File, error) {
	files, err := f.openEach(s, nil)
	if err != nil {
		// Here, not in a defer over a named result: "return nil, err"
		// would have emptied it first.
		for _, fl := range files {
			fl.Close()
		}
		return nil, err
	}
	return files, nil
}

// openEach appends to files each descriptor openFiles sends; on error it
// returns what it opened so far, for the caller to close.
func (f *createFlags) openEach(s *hostmgr.Spec, files []*os.File) ([]*os.File, error) {
	open := func(flag, path string, dir bool) error {
		path, err := hostPath("sandbox create", flag, path)
		if err != nil {
			return err
		}
		flags := unix.O_PATH | unix.O_CLOEXEC
		if dir {
			flags |= unix.O_DIRECTORY
		}
		fd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{Flags: uint64(flags), Resolve: unix.RESOLVE_NO_SYMLINKS})
		if err != nil {
			return failure.Failf(failure.KindUsage, "sandbox create", "%s %s: %v", flag, path, err)
		}
		files = append(files, os.NewFile(uintptr(fd), path))
		return nil
	}
	if f.workspace != "" {
		if err := open("--workspace", f.workspace, true); err != nil {
			return files, err
		}
		s.Workspace = true
	}
	for _, p := range []struct {
		vals []string
		rw   bool
		name string
	}{{f.ro, false, "--ro"}, {f.rw, true, "--rw"}} {
		for _, v := range p.vals {
			host, target, err := bindArg("sandbox create", p.name, v)
			if err != nil {
				return files, err
			}
			if err := open(p.name, host, false); err != nil {
				return files, err
			}
			s.Binds = append(s.Binds, hostmgr.BindSpec{Target: target, Writable: p.rw})
		}
	}
	if f.rootfs != "" {
		if err := open("--rootfs", f.rootfs, true); err != nil {
			return files, err
		}
		s.Rootfs = true
	}
	if len(files) > proto.MaxFiles {
		return files, failure.Failf(failure.KindUsage, "sandbox create", "%d descriptors (workspace, binds, rootfs): a request carries at most %d", len(files), proto.MaxFiles)
	}
	return files, nil
}

// gatewaySpec reads a configuration, its policy files and its secrets as
// the caller, for the daemon.
func gatewaySpec(path string) (*hostmgr.GatewaySpec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, failure.Fail(failure.KindUsage, "config", err)
	}
	cfg, err := config.Parse(b, path)
	if err != nil {
		return nil, failure.Fail(failure.KindUsage, "config", err)
	}
	gs := &hostmgr.GatewaySpec{Source: filepath.Base(path), Config: b, Secrets: map[string][]byte{}}
	// The daemon parses the same bytes without a directory: policy files
	// travel by base name.
	for _, p := range cfg.Policy {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, failure.Fail(failure.KindUsage, "policy", err)
		}
		gs.Policies = append(gs.Policies, hostmgr.PolicySource{Name: filepath.Base(p), Data: data})
	}
	cust, err := custody.Load(cfg.Secrets, os.Getenv)
	if err != nil {
		return nil, failure.Fail(failure.KindCustody, "custodian", err)
	}
	for _, n := range cust.Names() {
		v, _ := cust.Secret(n)
		gs.Secrets[n] = v
	}
	return gs, nil
}

func sbExecCmd(g *globals, sf *sandboxFlags) *cobra.Command {
	var env []string
	tty := ttyAuto
	cmd := &cobra.Command{
		Use:   "exec NAME [--env K=V] [--tty auto|always|never] -- PROGRAM [ARGS...]",
		Short: "Run a program in a running sandbox, on a terminal of its own or with this command's stdin, stdout and stderr",
		Long: `Run PROGRAM inside the running sandbox NAME: its own init starts it, under the
same boundary and gateway identity as everything else in the sandbox, in
its own session. The exit status is the program's (126/127 when it cannot
be executed or found). If this command goes away, the program keeps
running until it ends or the sandbox stops. A draining sandbox refuses new
execs.

With a terminal on stdin (--tty auto, the default) the program gets a
pseudo-terminal of the sandbox's own as its controlling terminal, as with
cordon run: job control works, ^C, ^Z and ^\ go to its foreground process
group, and the window size follows. Your terminal is not sent to the
daemon; its stdout or stderr is where that is not a terminal. If this
command goes away the program's terminal hangs up (SIGHUP, as over ssh).
Without a terminal (or --tty never) the program gets this command's stdin,
stdout and stderr (passed as descriptors), and ^C is forwarded to it.`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 1 {
				return failure.Failf(failure.KindUsage, "sandbox exec", "put the program after --: cordon sandbox exec NAME -- PROGRAM [ARGS...]")
			}
			c, err := sf.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			t, err := execTerminalRequest(tty)
			if err != nil {
				return err
			}
			return g.execIn(cmd.Context(), c, sf, args[0], args[1:], env, t)
		},
	}
	cmd.Flags().StringArrayVar(&env, "env", nil, "K=V added to the program's environment (repeatable)")
	cmd.Flags().StringVar(&tty, "tty", ttyAuto, "the program's own pseudo-terminal: auto (when stdin, stdout or stderr is a terminal; the terminal itself is never sent into the sandbox), always, never")
	return cmd
}

// execTerminalRequest is exec's terminal request (nil: none), with
// exec's own usage error.
func execTerminalRequest(mode string) (*hostmgr.ExecTty, error) {
	switch mode {
	case ttyAuto, ttyAlways, ttyNever:
	default:
		return nil, failure.Failf(failure.KindUsage, "sandbox exec", "--tty %q: want auto, always or never", mode)
	}
	t, err := terminalRequest(mode)
	if err != nil || t == nil {
		return nil, err
	}
	return &hostmgr.ExecTty{Stdout: t.Stdout, Stderr: t.Stderr, Rows: t.Rows, Cols: t.Cols}, nil
}

// execIn runs argv in sandbox name and exits with its status. With tty
// the program runs on its own pseudo-terminal in the sandbox: only the
// descriptors that are not on it are sent, and the master comes back
// with the started answer.
func (g *globals) execIn(ctx context.Context, c *proto.Client, sf *sandboxFlags, name string, argv, env []string, tty *hostmgr.ExecTty) error {
	var pid atomic.Int64 // set by the exec's first answer, read by the signal forwarder
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	go func() {
		for s := range sigs {
			p := int(pid.Load())
			if p == 0 {
				continue
			}
			_ = sf.do(context.Background(), "signal", hostmgr.SignalArgs{Name: name, Pid: p, Signal: int(s.(syscall.Signal))}, nil, nil)
		}
	}()
	files := []*os.File{os.Stdin, os.Stdout, os.Stderr}
	if tty != nil {
		files = nil
		for _, f := range []struct {
			on bool
			f  *os.File
		}{{tty.Stdout, os.Stdout}, {tty.Stderr, os.Stderr}} {
			if !f.on {
				files = append(files, f.f)
			}
		}
	}
	var term *terminal
	// On every path, panics too, the terminal is restored.
	defer func() { term.stop() }()
	var exit hostmgr.ExecExit
	err := c.CallFiles(ctx, "exec", hostmgr.ExecArgs{Name: name, Argv: argv, Env: env, Tty: tty}, files, 1, func(r proto.Response) error {
		if r.Final {
			closeFiles(r.Files)
			if r.Error == nil {
				return json.Unmarshal(r.Result, &exit)
			}
			return nil
		}
		var s hostmgr.ExecStarted
		if json.Unmarshal(r.Result, &s) == nil {
			pid.Store(int64(s.Pid))
		}
		var err error
		term, err = execAttach(tty, s, r.Files, g.stdout, g.stderr)
		return err
	})
	term.stop()
	var pe *proto.Error
	if errors.As(err, &pe) && pe.Kind == proto.KindBadRequest && strings.HasPrefix(pe.Message, "exec ") {
		fmt.Fprintf(g.stderr, "cordon: %s\n", textsafe.Line(pe.Message))
		if strings.Contains(pe.Message, "no such file") || strings.Contains(pe.Message, "not found") {
			return &exitError{code: failure.ExitNotFound}
		}
		return &exitError{code: failure.ExitNoExec}
	}
	if err != nil {
		return err
	}
	code := exit.Code
	if exit.Signal != 0 {
		code = 128 + exit.Signal
	}
	return &exitError{code: code}
}

// execAttach takes what came with exec's started answer: nothing without
// a terminal request; with one, exactly one descriptor that is a pty
// master (checked here again: the client uses nothing else), which it
// connects to this command's terminal. It fails closed, never falling
// back to this terminal.
func execAttach(tty *hostmgr.ExecTty, s hostmgr.ExecStarted, files []*os.File, stdout, stderr io.Writer) (*terminal, error) {
	if tty == nil || !s.Tty || len(files) != 1 {
		closeFiles(files)
		if tty != nil || s.Tty || len(files) > 0 {
			return nil, failure.Failf(failure.KindStart, "sandbox exec", "the daemon answered the terminal request wrongly (asked %t, reported %t, %d descriptors)", tty != nil, s.Tty, len(files))
		}
		return nil, nil
	}
	if err := linux.CheckPtyMaster(files[0]); err != nil {
		files[0].Close()
		return nil, failure.Fail(failure.KindStart, "sandbox exec", err)
	}
	return attachMaster(files[0], stdout, stderr)
}

func closeFiles(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

func sbStopCmd(g *globals, sf *sandboxFlags) *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "stop NAME | --all",
		Short: "Stop a sandbox for good (kill its processes, close its gateway, revoke its approvals); --all: every sandbox",
		Args: func(cmd *cobra.Command, args []string) error {
			if all != (len(args) == 0) || len(args) > 1 {
				return failure.Failf(failure.KindUsage, "stop", "give one sandbox name, or --all")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if all {
				var r hostmgr.StopAllResult
				if err := sf.do(cmd.Context(), "stop_all", struct{}{}, nil, &r); err != nil {
					return err
				}
				if err := g.print(sf, r, func() {
					fmt.Fprintf(g.stdout, "stopped %d sandboxes in %s\n", len(r.Stopped), r.Duration.Round(time.Millisecond))
					for _, f := range r.Failed {
						fmt.Fprintf(g.stdout, "failed: %s\n", textsafe.Line(f))
					}
				}); err != nil {
					return err
				}
				if len(r.Failed) > 0 {
					return &exitError{code: failure.ExitRefused}
				}
				return nil
			}
			var i hostmgr.Info
			if err := sf.do(cmd.Context(), "stop", hostmgr.NameArgs{Name: args[0]}, nil, &i); err != nil {
				return err
			}
			return g.print(sf, i, func() { printInfo(g, []hostmgr.Info{i}); printTraps(g.stderr, i.WorkspaceTraps) })
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "emergency stop: every sandbox of the daemon (root)")
	return cmd
}

func sbLsCmd(g *globals, sf *sandboxFlags) *cobra.Command {
	var quiet bool
	cmd := &cobra.Command{
		Use:   "ls [-q]",
		Short: "List sandboxes (yours; every one for root)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if quiet && sf.json {
				return failure.Failf(failure.KindUsage, "ls", "give -q or --json, not both")
			}
			var is []hostmgr.Info
			if err := sf.do(cmd.Context(), "ls", struct{}{}, nil, &is); err != nil {
				return err
			}
			if quiet {
				for _, i := range is {
					fmt.Fprintln(g.stdout, textsafe.Line(i.Name))
				}
				return nil
			}
			return g.print(sf, is, func() { printInfo(g, is) })
		},
	}
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only the names, one a line")
	return cmd
}

func sbLogsCmd(g *globals, sf *sandboxFlags) *cobra.Command {
	var follow, raw bool
	var tail int
	cmd := &cobra.Command{
		Use:   "logs NAME [--follow] [--tail N] [--raw]",
		Short: "Print the output of a sandbox's main program",
		Long: `Print what the sandbox's main program wrote to its stdout and stderr.

That output is the program's: on a terminal it is shown through cordon's
escaper (newlines and tabs kept; escape sequences, other control characters,
bidi overrides and invalid UTF-8 shown as \u / \x escapes), so a program
cannot move the cursor, rewrite lines or set the title of the operator's
terminal. When stdout is not a terminal (a pipe, a file) the bytes are
written exactly as the program wrote them, like docker logs; --raw writes
them exactly to a terminal too.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := sf.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			out, flush := logsWriter(g.stdout, raw, isTerminal(g.stdout))
			defer flush()
			var off int64
			first := hostmgr.LogsArgs{Name: args[0]}
			switch {
			case tail == 0:
				first.Offset = -1 // the end: nothing of what is there
			case tail > 0:
				first.Tail = tail
			}
			for {
				var ch hostmgr.LogsChunk
				a := hostmgr.LogsArgs{Name: args[0], Offset: off}
				if first.Name != "" {
					a, first = first, hostmgr.LogsArgs{}
				}
				if err := c.Do(cmd.Context(), "logs", a, nil, &ch); err != nil {
					return err
				}
				out.Write(ch.Data)
				off = ch.Next
				if len(ch.Data) > 0 {
					continue
				}
				if !follow || ch.Done {
					return nil
				}
				select {
				case <-cmd.Context().Done():
					return nil
				case <-time.After(300 * time.Millisecond):
				}
			}
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing as the program writes, until it exits or the sandbox stops")
	cmd.Flags().IntVar(&tail, "tail", -1, "print only the last N lines first (0: none; with --follow, then what follows)")
	cmd.Flags().BoolVar(&raw, "raw", false, "write the program's bytes exactly, also to a terminal (escape sequences act on it)")
	return cmd
}

// logsWriter is where a program's output goes: escaped by textsafe when
// written to a terminal (unless raw), exactly as written otherwise.
func logsWriter(w io.Writer, raw, tty bool) (io.Writer, func()) {
	if raw || !tty {
		return w, func() {}
	}
	tw := textsafe.NewWriter(w)
	return tw, func() { _ = tw.Flush() }
}

// isTerminal reports whether w is a terminal (a tty answers TCGETS).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

func sbProfileCmd(g *globals, sf *sandboxFlags) *cobra.Command {
	var accept string
	cmd := &cobra.Command{
		Use:   "profile NAME SAFE_GUIDED|FULL_CONTROL_LAB [--accept PHRASE]",
		Short: "Switch a sandbox's profile (FULL_CONTROL_LAB needs the exact risk acceptance)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var i hostmgr.Info
			if err := sf.do(cmd.Context(), "profile", hostmgr.ProfileArgs{Name: args[0], Profile: args[1], Accept: accept}, nil, &i); err != nil {
				return err
			}
			return g.print(sf, i, func() { printInfo(g, []hostmgr.Info{i}) })
		},
	}
	cmd.Flags().StringVar(&accept, "accept", "", "the exact risk-acceptance phrase")
	return cmd
}

func volumeCmd(g *globals) *cobra.Command {
	sf := &sandboxFlags{}
	cmd := &cobra.Command{
		Use:   "volume",
		Short: "Named volumes managed by the daemon: create, ls, rm",
		Long: `A volume is a directory the daemon creates and manages; a sandbox names it
(cordon sandbox create --volume NAME:/data) and what it writes there
outlives the sandbox. A volume belongs to its creator; other users cannot
see or use it. rm refuses while a sandbox that is not stopped uses it, and
is idempotent.`,
		Example: `  cordon volume create cache
  cordon sandbox create job --volume cache:/cache -- ./build.sh
  cordon volume ls
  cordon volume rm cache`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&sf.socket, "socket", defaultSocket(), "the daemon's socket (env CORDON_SOCKET)")
	pf.BoolVar(&sf.json, "json", false, "machine-readable output")
	for _, op := range []struct{ use, op, short string }{
		{"create NAME", "volume_create", "Create a volume"},
		{"rm NAME", "volume_rm", "Remove a volume and its contents"},
	} {
		cmd.AddCommand(&cobra.Command{
			Use: op.use, Short: op.short, Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				var out json.RawMessage
				if err := sf.do(cmd.Context(), op.op, hostmgr.NameArgs{Name: args[0]}, nil, &out); err != nil {
					return err
				}
				return g.print(sf, out, func() { fmt.Fprintf(g.stdout, "%s: %s\n", strings.Fields(op.use)[0], textsafe.Line(args[0])) })
			},
		})
	}
	cmd.AddCommand(&cobra.Command{
		Use: "ls", Short: "List your volumes (every one for root)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var vs []struct {
				Name     string    `json:"name"`
				OwnerUID uint32    `json:"owner_uid"`
				Created  time.Time `json:"created"`
			}
			if err := sf.do(cmd.Context(), "volume_ls", struct{}{}, nil, &vs); err != nil {
				return err
			}
			return g.print(sf, vs, func() {
				tw := tabwriter.NewWriter(g.stdout, 2, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tOWNER\tCREATED")
				for _, v := range vs {
					fmt.Fprintf(tw, "%s\t%d\t%s\n", textsafe.Line(v.Name), v.OwnerUID, v.Created.Format(time.RFC3339))
				}
				tw.Flush()
			})
		},
	})
	return cmd
}
