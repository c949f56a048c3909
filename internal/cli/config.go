package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cordon-project/cordon/internal/config"
	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/textsafe"
)

// exitConfigProblems is the exit status of `cordon config check` when a
// file has problems: 1, as linters do, so scripts tell "the file is
// wrong" from cordon's own failures (125).
const exitConfigProblems = 1

func configCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Work with configuration files (cordon run --config)",
		Long: `Commands for the configuration file given to cordon run --config and
cordon sandbox create --config. See docs/config.md.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(configCheckCmd(g))
	return cmd
}

func configCheckCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "check FILE...",
		Short: "List every problem in configuration files, with file:line:column",
		Long: `Check each configuration file exactly as cordon run --config loads it (the
same checker: a file that passes here loads there, and a file refused there
lists the same problems here). Every problem is listed at once, in line
order, as FILE:LINE:COLUMN: FIELD: MESSAGE on stderr: YAML syntax errors,
unknown and duplicate keys, values of the wrong type, and the range and
semantic checks (sizes, durations, ports, host names, duplicate names,
references to secrets that are not declared, policy files that do not
exist, ...). A YAML syntax error stops the check of that file: nothing after
it can be read.

Exit 0 and print "ok: FILE" for each valid file (with any setting that
weakens isolation as a warning on stderr); exit 1 when any file has a
problem. --json prints one JSON list of {file, line, column, path, message}
on stdout instead ([] when every file is valid); line and column are 0 when
unknown.

Examples:

  cordon config check cordon.yaml
  ok: cordon.yaml

  cordon config check --json examples/*.yaml`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, files []string) error {
			all := []*config.Error{}
			for _, f := range files {
				probs, err := config.CheckFile(f)
				if err != nil {
					probs = []*config.Error{{Source: f, Msg: err.Error()}}
				}
				all = append(all, probs...)
				if asJSON {
					continue
				}
				for _, p := range probs {
					fmt.Fprintln(g.stderr, textsafe.Line(p.Error()))
				}
				if len(probs) == 0 {
					printConfigOK(g, f)
				}
			}
			if asJSON {
				if err := writeJSON(g.stdout, all); err != nil {
					return err
				}
			}
			if len(all) == 0 {
				return nil
			}
			if !asJSON {
				err := failure.Failf(failure.KindUsage, "config check", "%s in %s", plural(len(all), "problem"), plural(len(files), "file"))
				fmt.Fprintf(g.stderr, "cordon: %s\n", describe(err))
			}
			return &exitError{code: exitConfigProblems}
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the problems as one JSON list")
	return cmd
}

// printConfigOK reports a valid file and what in it weakens isolation.
func printConfigOK(g *globals, f string) {
	fmt.Fprintf(g.stdout, "ok: %s\n", textsafe.Line(f))
	if c, err := config.Load(f); err == nil {
		for _, w := range c.Warnings() {
			fmt.Fprintf(g.stderr, "%s: warning: %s\n", textsafe.Line(f), textsafe.Line(w))
		}
	}
}

// plural is "1 problem", "2 problems".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// describeConfigProblems renders a configuration refused with several
// problems (cordon run --config, sandbox create --config) as check does:
// a summary with the failure kind, then one problem per line — not one
// line with the list's newlines escaped.
func describeConfigProblems(err error) (string, bool) {
	var first *config.Error
	var list interface{ Unwrap() []error }
	if !errors.As(err, &first) || !errors.As(err, &list) {
		return "", false
	}
	probs := list.Unwrap()
	lines := []string{textsafe.Line(fmt.Sprintf("%s: config: %s in %s:", failure.KindOf(err), plural(len(probs), "problem"), first.Source))}
	for _, p := range probs {
		lines = append(lines, textsafe.Line(p.Error()))
	}
	return strings.Join(lines, "\n"), true
}
