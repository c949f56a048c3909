package cli

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/oci"
	"github.com/cordon-project/cordon/internal/safefile"
)

type execFlags struct {
	process, pidFile, consoleSocket, cwd, user string
	env                                        []string
	detach, tty                                bool
	preserveFDs                                int
}

func (o *ociFlags) execCmd() *cobra.Command {
	f := &execFlags{}
	cmd := &cobra.Command{
		Use:   "exec [flags] ID [COMMAND [ARGS...]]",
		Short: "Run another process in a running container, inside the same sandbox and boundary",
		Long: `Run a process in a container's sandbox, under the same boundary as its program.
The process is given by --process (an OCI process JSON, as engines pass it) or by
COMMAND. Its exit status is this command's; with --detach, a proxy process (its pid
in --pid-file) stands for it: signals sent to the proxy reach the process, and the
process is killed if the proxy is.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.fail(o.exec(cmd.Context(), args[0], args[1:], f))
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.process, "process", "p", "", "the process as OCI process JSON (a file)")
	fl.StringVar(&f.pidFile, "pid-file", "", "write the process's pid (its proxy's) to this file")
	fl.StringVar(&f.consoleSocket, "console-socket", "", "Unix socket to send the terminal's master to")
	fl.BoolVarP(&f.detach, "detach", "d", false, "return once the process runs (its proxy lives on)")
	fl.BoolVarP(&f.tty, "tty", "t", false, "give the process a terminal of the sandbox's own (with COMMAND)")
	fl.StringVar(&f.cwd, "cwd", "", "working directory inside (with COMMAND)")
	fl.StringArrayVarP(&f.env, "env", "e", nil, "K=V (with COMMAND; repeatable)")
	fl.StringVarP(&f.user, "user", "u", "", "UID[:GID] (with COMMAND; must be the container's)")
	fl.IntVar(&f.preserveFDs, "preserve-fds", 0, "refused unless 0")
	return cmd
}

// execProcess is the process an exec asks for: --process, else COMMAND
// with the container's own user, environment and directory defaults.
func (o *ociFlags) execProcess(s *oci.State, argv []string, f *execFlags) (*specs.Process, error) {
	if f.process != "" {
		if len(argv) > 0 {
			return nil, failure.Failf(failure.KindUsage, "oci exec", "give --process or COMMAND, not both")
		}
		b, err := safefile.ReadBounded(f.process, oci.MaxConfigBytes, false)
		if err != nil {
			return nil, failure.Fail(failure.KindUsage, "oci exec --process", err)
		}
		var p specs.Process
		if err := json.Unmarshal(b, &p); err != nil {
			return nil, failure.Failf(failure.KindUsage, "oci exec --process", "not an OCI process: %v", err)
		}
		return &p, nil
	}
	if len(argv) == 0 {
		return nil, failure.Failf(failure.KindUsage, "oci exec", "no --process and no COMMAND")
	}
	cfg, _, err := oci.Load(s.Bundle)
	if err != nil {
		return nil, err
	}
	p := &specs.Process{Args: argv, Env: append(cfg.Process.Env, f.env...), Cwd: cfg.Process.Cwd, User: cfg.Process.User, Terminal: f.tty}
	if f.cwd != "" {
		p.Cwd = f.cwd
	}
	if f.user != "" {
		u, g, _ := strings.Cut(f.user, ":")
		uid, err1 := strconv.ParseUint(u, 10, 32)
		gid, err2 := strconv.ParseUint(g, 10, 32)
		if err1 != nil || (g != "" && err2 != nil) {
			return nil, failure.Failf(failure.KindUsage, "oci exec", "--user %q is not UID[:GID]", clipText(f.user))
		}
		p.User.UID = uint32(uid)
		if g != "" {
			p.User.GID = uint32(gid)
		}
	}
	return p, nil
}

func (o *ociFlags) exec(ctx context.Context, id string, argv []string, f *execFlags) error {
	if f.preserveFDs != 0 {
		return failure.Failf(failure.KindPolicyRejected, "oci exec", "--preserve-fds %d: no descriptor beyond stdio reaches a sandbox", f.preserveFDs)
	}
	r, err := o.openRoot()
	if err != nil {
		return err
	}
	s, err := r.Load(id)
	if err != nil {
		return err
	}
	if s.Live() == specs.StateStopped {
		return failure.Failf(failure.KindUsage, "oci exec", "container %s is not running", id)
	}
	p, err := o.execProcess(s, argv, f)
	if err != nil {
		return err
	}
	if p.Terminal != (f.consoleSocket != "") && f.detach {
		return failure.Failf(failure.KindUsage, "oci exec", "process.terminal and --console-socket go together")
	}
	pf, err := os.CreateTemp(r.Path(id), "exec-*.json")
	if err != nil {
		return failure.Fail(failure.KindStart, "oci exec", err)
	}
	defer os.Remove(pf.Name())
	if err := json.NewEncoder(pf).Encode(p); err != nil {
		pf.Close()
		return failure.Fail(failure.KindStart, "oci exec", err)
	}
	pf.Close()
	if !f.detach {
		if f.pidFile != "" {
			if err := writePidFile(f.pidFile, os.Getpid()); err != nil {
				return err
			}
		}
		code := o.proxy(ctx, r.Path(id), pf.Name(), f.consoleSocket, nil)
		return &exitError{code: code}
	}
	args := append(o.forwardArgs(), "__exec-proxy", "--process", pf.Name(), "--console-socket", f.consoleSocket, id)
	cmd, pr, err := statusChild(args, f.consoleSocket == "")
	if err != nil {
		return err
	}
	defer pr.Close()
	st, err := readStatus(pr, 30*time.Second)
	if err != nil || !st.OK {
		_ = cmd.Process.Kill()
		_, _ = cmd.Process.Wait()
		if err == nil {
			err = relayed(st)
		}
		return err
	}
	_ = cmd.Process.Release()
	if f.pidFile != "" {
		return writePidFile(f.pidFile, st.Pid)
	}
	return nil
}

func (o *ociFlags) execProxyCmd() *cobra.Command {
	var process, console string
	cmd := &cobra.Command{
		Use:    "__exec-proxy --process FILE ID",
		Short:  "internal: stands for an exec'd process (started by exec --detach)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := o.openRoot() // the root checked as every call checks it
			if err == nil {
				err = oci.CheckID(args[0])
			}
			if err != nil {
				reportStatus(keeperStatus{Error: describe(err), Kind: string(failure.KindOf(err))})
				return err
			}
			return &exitError{code: o.proxy(cmd.Context(), r.Path(args[0]), process, console, reportStatus)}
		},
	}
	cmd.Flags().StringVar(&process, "process", "", "the process JSON")
	cmd.Flags().StringVar(&console, "console-socket", "", "the engine's console socket")
	return cmd
}

// proxy asks the keeper in dir to run the process in processFile with
// this process's stdio (or a terminal sent to console), relays signals to
// it and returns its exit status. report, when set, is told when it has
// started (or why not).
func (o *ociFlags) proxy(ctx context.Context, dir, processFile, console string, report func(keeperStatus)) int {
	fail := func(err error) int {
		_ = o.fail(err)
		if report != nil {
			report(keeperStatus{Error: describe(err), Kind: string(failure.KindOf(err))})
		} else {
			o.g.logger().Error("oci exec", "err", describe(err))
		}
		return failure.ExitRefused
	}
	b, err := safefile.ReadBounded(processFile, oci.MaxConfigBytes, false)
	if err != nil {
		return fail(failure.Fail(failure.KindUsage, "oci exec", err))
	}
	var p specs.Process
	if err := json.Unmarshal(b, &p); err != nil {
		return fail(failure.Fail(failure.KindUsage, "oci exec", err))
	}
	c, err := oci.Dial(dir)
	if err != nil {
		return fail(failure.Failf(failure.KindStart, "oci exec", "the container's keeper does not answer: %v", err))
	}
	defer c.Close()
	var files []*os.File
	if !p.Terminal {
		files = []*os.File{os.Stdin, os.Stdout, os.Stderr}
	}
	if err := c.Send(oci.Request{Op: "exec", Process: &p}, files...); err != nil {
		return fail(failure.Fail(failure.KindStart, "oci exec", err))
	}
	var rep oci.Reply
	got, err := c.Recv(&rep, 1)
	if err != nil {
		return fail(failure.Fail(failure.KindStart, "oci exec", err))
	}
	if !rep.Started {
		closeFiles(got)
		return fail(failure.Failf(failure.Kind(rep.Kind), "oci exec", "%s", rep.Error))
	}
	if p.Terminal {
		if len(got) != 1 {
			closeFiles(got)
			return fail(failure.Failf(failure.KindStart, "oci exec", "no terminal came back"))
		}
		err := sendMaster(console, got[0])
		got[0].Close()
		if err != nil {
			return fail(err)
		}
	}
	if report != nil {
		report(keeperStatus{OK: true, Pid: os.Getpid()})
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH, syscall.SIGCONT)
	go func() {
		for s := range sigs {
			_ = c.Send(oci.Request{Op: "signal", Signal: int(s.(syscall.Signal))})
		}
	}()
	for {
		var end oci.Reply
		fs, err := c.Recv(&end, 0)
		closeFiles(fs)
		if err != nil {
			return failure.ExitRefused
		}
		if end.Exited {
			return end.Code
		}
	}
}

// sendMaster hands a terminal's master to an engine's console socket.
func sendMaster(path string, master *os.File) error {
	if path == "" {
		return failure.Failf(failure.KindUsage, "oci exec", "a terminal was asked for without --console-socket")
	}
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return failure.Fail(failure.KindStart, "oci --console-socket", err)
	}
	defer c.Close()
	if _, _, err := c.WriteMsgUnix([]byte("/dev/ptmx"), unix.UnixRights(int(master.Fd())), nil); err != nil {
		return failure.Fail(failure.KindStart, "oci --console-socket", err)
	}
	return nil
}
