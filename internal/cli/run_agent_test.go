package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/sandbox"
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
