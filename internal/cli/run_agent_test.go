package cli

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cordon-project/cordon/internal/agent"
	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/testkit"
)

func TestAgentCheckArgs(t *testing.T) {
	for _, tt := range []struct {
		opts agentOpts
		args []string
		dash int
		ok   bool
	}{
		{agentOpts{}, []string{"/bin/true"}, 0, true},
		{agentOpts{}, nil, -1, false},                              // no program
		{agentOpts{}, []string{"/bin/true"}, -1, false},            // program not after --
		{agentOpts{home: "/x"}, []string{"/bin/true"}, 0, false},   // --agent-home alone
		{agentOpts{name: "claude"}, nil, -1, true},                 // the agent, no args
		{agentOpts{name: "claude"}, []string{"-p", "hi"}, 0, true}, // args after --
		{agentOpts{name: "claude"}, []string{"hi"}, -1, false},     // args not after --
	} {
		err := tt.opts.checkArgs(tt.args, tt.dash)
		if (err == nil) != tt.ok || (err != nil && failure.KindOf(err) != failure.KindUsage) {
			t.Errorf("checkArgs(%+v, %q, %d) = %v, want ok %v", tt.opts, tt.args, tt.dash, err, tt.ok)
		}
	}
}

func TestNotFoundNamesTheFix(t *testing.T) {
	dir := t.TempDir()
	prog := filepath.Join(dir, "bin", "tool")
	if err := os.MkdirAll(filepath.Dir(prog), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(prog, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	spec := sandbox.Spec{Argv: []string{prog}, Binds: []sandbox.Bind{{Source: "/srv/data", Target: "/data"}}, Env: []string{"PATH=/usr/bin:/bin"}}
	err := notFound(spec, "no such file")
	msg := err.Error()
	for _, want := range []string{"PATH is /usr/bin:/bin", "(ro) /srv/data -> /data", "--ro " + dir + ":/opt/" + filepath.Base(dir) + " -- /opt/" + filepath.Base(dir) + "/bin/tool"} {
		if !strings.Contains(msg, want) {
			t.Errorf("notFound = %q, want it to contain %q", msg, want)
		}
	}
	if failure.KindOf(err) != failure.KindExec {
		t.Errorf("kind = %v", failure.KindOf(err))
	}
	if got := fixHint("claude"); !strings.Contains(got, "--agent claude") {
		t.Errorf("fixHint(claude) = %q", got)
	}
}

// The hint never suggests binding a home directory (or what holds one):
// a tool in ~/bin used to give `--ro /home/alice:/opt/alice`, the whole
// home, ~/.ssh and all, for a user to paste.
func TestNotFoundHintNeverBindsAHome(t *testing.T) {
	home := filepath.Join(t.TempDir(), "alice")
	for _, rel := range []string{"bin/tool", "tool"} {
		prog := filepath.Join(home, rel)
		if err := os.MkdirAll(filepath.Dir(prog), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(prog, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		got := fixHintHomes(prog, []string{home})
		for _, bad := range []string{"--ro " + home + ":", "--ro " + filepath.Dir(home) + ":"} {
			if strings.Contains(got, bad) {
				t.Errorf("fixHint(%s) = %q: suggests binding the home", prog, got)
			}
		}
		if !strings.Contains(got, "--ro ") {
			t.Errorf("fixHint(%s) = %q: no bind suggested", prog, got)
		}
	}
	// Positive control: outside any home, the install's prefix is named.
	other := filepath.Join(t.TempDir(), "tools")
	prog := filepath.Join(other, "bin", "tool")
	if err := os.MkdirAll(filepath.Dir(prog), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(prog, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := fixHintHomes(prog, []string{home}); !strings.Contains(got, "--ro "+other+":") {
		t.Errorf("fixHint(%s) = %q, want the prefix %s", prog, got, other)
	}
}

// A new --agent-home is created and chowned (as root) without following
// a symlink anywhere on its path: a parent another user could swap for a
// symlink between the mkdir and the chown made root chown whatever the
// symlink reached. A symlinked parent is refused and nothing is created
// or chowned through it.
func TestNewAgentHomeNeverThroughASymlink(t *testing.T) {
	testkit.RequireRoot(t)
	base := t.TempDir()
	real := filepath.Join(base, "real")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	if err := newAgentHome(filepath.Join(base, "link", "home")); err == nil {
		t.Error("a new --agent-home under a symlink was created")
	}
	if _, err := os.Lstat(filepath.Join(real, "home")); !os.IsNotExist(err) {
		t.Errorf("a directory was created through the symlink: %v", err)
	}
	// Positive control: without the symlink it is created, 0700, for the
	// managed owner.
	h := filepath.Join(base, "real", "new", "home")
	if err := newAgentHome(h); err != nil {
		t.Fatalf("newAgentHome(%s) = %v", h, err)
	}
	fi, err := os.Lstat(h)
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 || fi.Sys().(*syscall.Stat_t).Uid != uint32(agent.Owner(os.Getenv)) {
		t.Fatalf("new home %v %v, want a 0700 directory owned by %d", fi, err, agent.Owner(os.Getenv))
	}
}

// cordon prints a failure as one escaped line (textsafe.Line): the
// not-found error's line breaks came out as literal \u000a between its
// parts. It is one readable line; a newline in what it quotes (a bind
// source) is still escaped.
func TestNotFoundPrintsReadably(t *testing.T) {
	spec := sandbox.Spec{Argv: []string{"/nonexistent/tool"}, Binds: []sandbox.Bind{{Source: "/srv/da\nta", Target: "/data"}}}
	got := describe(notFound(spec, "no such file"))
	if strings.Count(got, `\u000a`) != 1 || !strings.Contains(got, `/srv/da\u000ata`) {
		t.Errorf("describe(notFound) = %q: want its parts on one line, the source's own newline escaped", got)
	}
	if !strings.Contains(got, "(not found in the sandbox); the sandbox shows") || !strings.Contains(got, "; bind (ro) ") {
		t.Errorf("describe(notFound) = %q", got)
	}
}
