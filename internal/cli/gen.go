package cli

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/failure"
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
			return genFailure(genMan(cmd.Root(), args[0]))
		},
	}, &cobra.Command{
		Use:   "completions DIR",
		Short: "Write the bash (cordon), zsh (_cordon) and fish (cordon.fish) completion scripts into DIR",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return genFailure(genCompletions(cmd.Root(), args[0]))
		},
	})
	return cmd
}

// genFailure: a DIR gen cannot or must not write into is a usage error.
func genFailure(err error) error {
	if err == nil {
		return nil
	}
	return failure.Fail(failure.KindUsage, "gen", err)
}

// genDir is a directory gen writes into, usually as root (a packager):
// opened without following a symlink and refused unless the caller owns
// it and no one else may write it, each file then created in it without
// following a symlink — a name planted there (cordon.1 -> /etc/shadow)
// is never written through.
type genDir struct {
	path string
	fd   int
}

func openGenDir(dir string) (*genDir, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("gen: open %s (a directory, not a symlink): %w", dir, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("gen: %s: %w", dir, err)
	}
	if int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 {
		unix.Close(fd)
		return nil, fmt.Errorf("gen: %s must be owned by uid %d and writable by no one else (it is uid %d, mode %04o)", dir, os.Geteuid(), st.Uid, st.Mode&0o7777)
	}
	return &genDir{path: dir, fd: fd}, nil
}

func (d *genDir) Close() error { return unix.Close(d.fd) }

// write creates (or truncates) name in d, never through a symlink, with
// what gen writes into it.
func (d *genDir) write(name string, gen func(io.Writer) error) error {
	fd, err := unix.Openat(d.fd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return fmt.Errorf("gen: create %s in %s: %w", name, d.path, err)
	}
	f := os.NewFile(uintptr(fd), name)
	err = gen(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// genMan writes the man pages of root's tree into dir: one per available
// command, named as cobra's GenManTree names them (cordon-sandbox-ls.1).
func genMan(root *cobra.Command, dir string) error {
	d, err := openGenDir(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	// The completion command cobra adds at Execute has a page too.
	root.InitDefaultCompletionCmd()
	root.DisableAutoGenTag = true
	h := doc.GenManHeader{Title: "CORDON", Section: "1", Source: "cordon " + currentVersion().Version, Manual: "cordon manual"}
	var walk func(c *cobra.Command) error
	walk = func(c *cobra.Command) error {
		for _, sub := range c.Commands() {
			if !sub.IsAvailableCommand() || sub.IsAdditionalHelpTopicCommand() {
				continue
			}
			if err := walk(sub); err != nil {
				return err
			}
		}
		name := strings.ReplaceAll(c.CommandPath(), " ", "-") + ".1"
		return d.write(name, func(w io.Writer) error { hc := h; return doc.GenMan(c, &hc, w) })
	}
	if err := walk(root); err != nil {
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
	gen  func(*cobra.Command, io.Writer) error
}{
	{"cordon", func(c *cobra.Command, w io.Writer) error { return c.GenBashCompletionV2(w, true) }},
	{"_cordon", func(c *cobra.Command, w io.Writer) error { return c.GenZshCompletion(w) }},
	{"cordon.fish", func(c *cobra.Command, w io.Writer) error { return c.GenFishCompletion(w, true) }},
}

func genCompletions(root *cobra.Command, dir string) error {
	d, err := openGenDir(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	for _, f := range completionFiles {
		if err := d.write(f.name, func(w io.Writer) error { return f.gen(root, w) }); err != nil {
			return fmt.Errorf("completion %s: %w", f.name, err)
		}
	}
	return nil
}
