package cli

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// genCmd is the hidden `cordon gen`: files generated from the command
// tree for packaging (scripts/package.sh), so that the man pages and the
// shell completions always match the binary they ship with.
func genCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:    "gen",
		Short:  "Generate man pages and shell completions from the command tree (for packagers)",
		Hidden: true,
		Args:   cobra.NoArgs,
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "man DIR",
		Short: "Write one section-1 man page per command into DIR (cordon.1, cordon-run.1, ...)",
		Long: `Write one section-1 man page per visible command into DIR. The date in
each page is SOURCE_DATE_EPOCH when set (reproducible builds), else now.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return genMan(cmd.Root(), args[0])
		},
	}, &cobra.Command{
		Use:   "completions DIR",
		Short: "Write the bash (cordon), zsh (_cordon) and fish (cordon.fish) completion scripts into DIR",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return genCompletions(cmd.Root(), args[0])
		},
	})
	return cmd
}

// genMan writes the man pages of root's tree into dir.
func genMan(root *cobra.Command, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// The completion command cobra adds at Execute has a page too.
	root.InitDefaultCompletionCmd()
	root.DisableAutoGenTag = true
	h := &doc.GenManHeader{Title: "CORDON", Section: "1", Source: "cordon " + currentVersion().Version, Manual: "cordon manual"}
	if err := doc.GenManTree(root, h, dir); err != nil {
		return fmt.Errorf("man pages into %s: %w", dir, err)
	}
	return nil
}

// completionFiles are the completion scripts and their file names, as
// their shells look them up in the standard directories
// (/usr/share/bash-completion/completions/cordon,
// /usr/share/zsh/vendor-completions/_cordon,
// /usr/share/fish/vendor_completions.d/cordon.fish). Each asks the binary
// (cordon __complete) at run time, so dynamic completions work.
var completionFiles = []struct {
	name string
	gen  func(*cobra.Command, string) error
}{
	{"cordon", func(c *cobra.Command, f string) error { return c.GenBashCompletionFileV2(f, true) }},
	{"_cordon", func(c *cobra.Command, f string) error { return c.GenZshCompletionFile(f) }},
	{"cordon.fish", func(c *cobra.Command, f string) error { return c.GenFishCompletionFile(f, true) }},
}

func genCompletions(root *cobra.Command, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range completionFiles {
		if err := f.gen(root, filepath.Join(dir, f.name)); err != nil {
			return fmt.Errorf("completion %s: %w", f.name, err)
		}
	}
	return nil
}
