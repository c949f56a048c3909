package cli

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestManPages renders every man page with `cordon gen man` and checks
// that each visible command of the tree has exactly one page, naming the
// command with its summary and every one of its flags — so a command or
// flag added without reaching its page fails here — and that no page is
// left over from a command that is gone.
func TestManPages(t *testing.T) {
	dir := t.TempDir()
	if code, out, errs := execCLI(t, "gen", "man", dir); code != 0 {
		t.Fatalf("gen man = %d, %q, %q", code, out, errs)
	}
	root := newRoot(&globals{})
	root.InitDefaultCompletionCmd()
	var want []string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		name := strings.ReplaceAll(c.CommandPath(), " ", "-") + ".1"
		want = append(want, name)
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("command %q has no man page: %v", c.CommandPath(), err)
		}
		page := string(b)
		if c.Short == "" || !strings.Contains(page, ".SH NAME\n"+strings.TrimSuffix(name, ".1")+" - ") ||
			!strings.Contains(page, `\fB`+c.CommandPath()) || !strings.Contains(page, `.TH "CORDON" "1"`) {
			t.Errorf("%s: want a section-1 page naming %q with a summary; got:\n%.300s", name, c.CommandPath(), page)
		}
		c.NonInheritedFlags().VisitAll(func(f *pflag.Flag) {
			if !f.Hidden && !strings.Contains(page, `\fB--`+f.Name+`\fP`) {
				t.Errorf("%s: flag --%s is not on the page", name, f.Name)
			}
		})
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() && !sub.IsAdditionalHelpTopicCommand() {
				walk(sub)
			}
		}
	}
	walk(root)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	sort.Strings(want)
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("man pages (-want +got):\n%s", d)
	}
	// Positive control: the walk sees the commands the packaging relies on,
	// and the hidden gen command has no page.
	for _, must := range []string{"cordon.1", "cordon-run.1", "cordon-daemon.1", "cordon-doctor.1", "cordon-config-check.1"} {
		if _, err := os.Stat(filepath.Join(dir, must)); err != nil {
			t.Errorf("no %s: %v", must, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "cordon-gen.1")); err == nil {
		t.Errorf("the hidden gen command has a man page")
	}
}

// TestCompletionFiles checks that `cordon gen completions` writes the
// bash, zsh and fish scripts under the names their shells load, each
// asking the binary for completions at run time (cordon __complete).
func TestCompletionFiles(t *testing.T) {
	dir := t.TempDir()
	if code, out, errs := execCLI(t, "gen", "completions", dir); code != 0 {
		t.Fatalf("gen completions = %d, %q, %q", code, out, errs)
	}
	for name, mark := range map[string]string{"cordon": "complete -o default -F __start_cordon cordon", "_cordon": "#compdef cordon", "cordon.fish": "complete -c cordon"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || !strings.Contains(string(b), mark) || !strings.Contains(string(b), "__complete") {
			t.Errorf("%s: want a script with %q that calls __complete (err %v)", name, mark, err)
		}
	}
}

// TestGenRefusesPlantedFiles checks that `cordon gen man|completions DIR`,
// run as root by a packager, never writes through a name planted in DIR:
// a symlink named like a page or a script is refused and its target left
// as it was, and a DIR another user could write (mode 0777, or a symlink
// to a directory) is refused before anything is written. Control: a fresh
// DIR gets every file.
func TestGenRefusesPlantedFiles(t *testing.T) {
	for _, sub := range []struct{ kind, planted string }{{"man", "cordon.1"}, {"completions", "cordon"}} {
		victim := filepath.Join(t.TempDir(), "victim")
		if err := os.WriteFile(victim, []byte("precious\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		if err := os.Symlink(victim, filepath.Join(dir, sub.planted)); err != nil {
			t.Fatal(err)
		}
		code := genExit(sub.kind, dir)
		if b, _ := os.ReadFile(victim); string(b) != "precious\n" || code == 0 {
			t.Errorf("gen %s into a DIR with %s a symlink = exit %d, victim now %.40q; want refused, victim untouched", sub.kind, sub.planted, code, b)
		}
		open := t.TempDir()
		if err := os.Chmod(open, 0o777); err != nil {
			t.Fatal(err)
		}
		if code := genExit(sub.kind, open); code == 0 {
			t.Errorf("gen %s into a mode-0777 DIR = exit 0, want refused", sub.kind)
		}
		if ents, _ := os.ReadDir(open); len(ents) != 0 {
			t.Errorf("gen %s into a mode-0777 DIR wrote %d files", sub.kind, len(ents))
		}
		link := filepath.Join(t.TempDir(), "link")
		if err := os.Symlink(t.TempDir(), link); err != nil {
			t.Fatal(err)
		}
		if code := genExit(sub.kind, link); code == 0 {
			t.Errorf("gen %s into a DIR that is a symlink = exit 0, want refused", sub.kind)
		}
		fresh := filepath.Join(t.TempDir(), "out")
		if code, out, errs := execCLI(t, "gen", sub.kind, fresh); code != 0 {
			t.Errorf("control: gen %s into a fresh DIR = %d, %q, %q", sub.kind, code, out, errs)
		}
		if _, err := os.Stat(filepath.Join(fresh, sub.planted)); err != nil {
			t.Errorf("control: gen %s wrote no %s: %v", sub.kind, sub.planted, err)
		}
	}
}

// genExit runs cordon gen KIND DIR: 0, or 1 when it fails.
func genExit(kind, dir string) int {
	var out strings.Builder
	root := newRoot(&globals{stdout: &out, stderr: &out})
	root.SetArgs([]string{"gen", kind, dir})
	root.SetOut(&out)
	root.SetErr(&out)
	if root.Execute() != nil {
		return 1
	}
	return 0
}
