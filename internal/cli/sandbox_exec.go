package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/hostmgr"
	"github.com/cordon-project/cordon/internal/hostmgr/proto"
	"github.com/cordon-project/cordon/internal/sandbox/linux"
	"github.com/cordon-project/cordon/internal/textsafe"
	"github.com/spf13/cobra"
)

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
