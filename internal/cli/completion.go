package cli

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cordon-project/cordon/internal/agent"
	"github.com/cordon-project/cordon/internal/conformance/record"
	"github.com/cordon-project/cordon/internal/hostmgr"
	"github.com/cordon-project/cordon/internal/hostmgr/proto"
	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/sandbox/registry"
)

// Shell completion. Cobra's `cordon completion bash|zsh|fish|powershell`
// writes a script that asks `cordon __complete ARGS…` for candidates; the
// tables below give it what cobra cannot infer from the command tree.

// completeTimeout bounds how long a completion waits for the daemon: a
// <TAB> must never hang the user's shell.
const completeTimeout = time.Second

// nameCommands take a sandbox name as their first argument (command
// paths without the leading "cordon ").
var nameCommands = []string{
	"sandbox start", "sandbox exec", "sandbox stop", "sandbox rm", "sandbox logs",
	"sandbox status", "sandbox profile", "sandbox readmit", "stop",
}

// profiles are the sandbox profiles (sandbox create --profile, sandbox
// profile NAME PROFILE).
var profiles = []string{"SAFE_GUIDED", "FULL_CONTROL_LAB"}

// flagValues are the fixed values of enumerated flags, by flag name.
func flagValues() map[string][]string {
	var levels []string
	for _, l := range sandbox.Levels() {
		levels = append(levels, l.String())
	}
	return map[string][]string{
		"level":      levels,
		"profile":    profiles,
		"agent":      agent.Names(),
		"broker":     {"model", "egress", "tool", "state", "ingress"},
		"tty":        {ttyAuto, ttyAlways, ttyNever},
		"log-format": {"text", "json"},
		"log-level":  {"debug", "info", "warn", "error"},
		"provider":   registry.Names(),
		"class":      classNames(),
	}
}

func classNames() []string {
	var out []string
	for _, c := range record.Classes() {
		out = append(out, string(c))
	}
	return out
}

// fileFlags take a file (completed from the file system); dirFlags a
// directory.
var (
	fileFlags = []string{"config", "evidence", "log-file", "json-file", "pubkey", "checkpoint", "socket", "out", "html"}
	dirFlags  = []string{"workspace", "rootfs", "state-dir", "volume-dir", "policy-dir", "agent-path", "agent-home"}
	// ro/rw take HOST[:SANDBOX]: a file or a directory.
	bindFlags = []string{"ro", "rw"}
)

// addCompletions registers, over the whole command tree, sandbox-name
// completion for the commands that take one and value or file completion
// for the flags that take one.
func addCompletions(root *cobra.Command) {
	values := flagValues()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		path := strings.TrimPrefix(c.CommandPath(), root.Name()+" ")
		if slices.Contains(nameCommands, path) && c.ValidArgsFunction == nil {
			c.ValidArgsFunction = completeNameArg(path)
		}
		for _, fs := range []*pflag.FlagSet{c.LocalNonPersistentFlags(), c.PersistentFlags()} {
			fs.VisitAll(func(f *pflag.Flag) {
				if _, done := c.GetFlagCompletionFunc(f.Name); done {
					return
				}
				var fn cobra.CompletionFunc
				switch {
				case values[f.Name] != nil:
					fn = prefixed(values[f.Name])
				case slices.Contains(fileFlags, f.Name), slices.Contains(bindFlags, f.Name):
					fn = func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
						return nil, cobra.ShellCompDirectiveDefault
					}
				case slices.Contains(dirFlags, f.Name):
					fn = func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
						return nil, cobra.ShellCompDirectiveFilterDirs
					}
				default:
					return
				}
				_ = c.RegisterFlagCompletionFunc(f.Name, fn)
			})
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// completeNameArg completes a command's first argument with the names of
// the caller's sandboxes (the daemon scopes ls: a user sees their own,
// root every one); sandbox profile's second with the profiles; exec's
// program and its arguments with the shell's own file completion.
func completeNameArg(path string) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		switch {
		case len(args) == 1 && path == "sandbox profile":
			return prefixed(profiles)(cmd, args, toComplete)
		case len(args) > 0 && path == "sandbox exec":
			return nil, cobra.ShellCompDirectiveDefault
		case len(args) > 0:
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		socket, err := cmd.Flags().GetString("socket")
		if err != nil || socket == "" {
			socket = defaultSocket()
		}
		var out []string
		for _, n := range sandboxNames(cmd.Context(), socket) {
			if strings.HasPrefix(n, toComplete) {
				out = append(out, n)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// sandboxNames asks the daemon for the caller's sandboxes' names, within
// completeTimeout; nothing (never an error: this is the user's shell) when
// it is unreachable, slow or answers something else. Only valid names are
// returned: nothing the shell could read as more than a word.
func sandboxNames(ctx context.Context, socket string) []string {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, completeTimeout)
	defer cancel()
	ch := make(chan []string, 1)
	go func() {
		c, err := proto.Dial(socket)
		if err != nil {
			ch <- nil
			return
		}
		defer c.Close()
		var is []hostmgr.Info
		if c.Do(ctx, "ls", struct{}{}, nil, &is) != nil {
			ch <- nil
			return
		}
		var names []string
		for _, i := range is {
			if proto.ValidName(i.Name) == nil {
				names = append(names, i.Name)
			}
		}
		ch <- names
	}()
	select {
	case n := <-ch:
		return n
	case <-ctx.Done():
		return nil
	}
}

// prefixed completes with the values that begin with what was typed.
func prefixed(values []string) cobra.CompletionFunc {
	return func(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		var out []string
		for _, v := range values {
			if strings.HasPrefix(v, toComplete) {
				out = append(out, v)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}
