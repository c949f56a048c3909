package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/testkit"
)

// A runtime found outside /usr is bound as the executable alone: with
// node in ~/bin (a tarball unpacked into the home, npm's prefix set to
// ~), the home itself used to be bound read-only, ~/.ssh and all. The
// "node" here is a script the Codex entry point (#!/usr/bin/env node)
// runs; it reports, from inside, whether the home's secret is there and
// (positive control) whether the agent's package is.
func TestAgentRuntimeBindsOnlyTheExecutable(t *testing.T) {
	testkit.RequireRoot(t)
	dir := codexDir(t)
	st := newStateDir(t)
	// Not under /tmp: the runtime is bound at its own path, and /tmp is
	// the sandbox's.
	base, err := os.MkdirTemp("/var/tmp", "cordon-e2e-runtime-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	home := filepath.Join(base, "home", "alice")
	secret := filepath.Join(home, ".ssh", "id_ed25519")
	for _, d := range []string{filepath.Join(home, "bin"), filepath.Dir(secret)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(secret, []byte("host secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pkg := filepath.Join(dir, "node_modules/@openai/codex/package.json")
	script := "#!/bin/sh\n" +
		"if [ -e " + secret + " ]; then echo host-home=exposed; else echo host-home=hidden; fi\n" +
		"if [ -e " + pkg + " ]; then echo package=visible; fi\n"
	if err := os.WriteFile(filepath.Join(home, "bin", "node"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	up := testkit.NewModelUpstream(t, fakeKey, "unused")
	cmd := exec.Command(cordonBin, "--state-dir", st, "run", "--agent", "codex", "--agent-path", dir, "--agent-home", agentHome(t),
		"--config", gatewayConfig(t, up.URL(), ""), "--timeout", "60s", "--", "--version")
	cmd.Env = []string{"PATH=" + filepath.Join(home, "bin") + ":/usr/bin:/bin"}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	_ = cmd.Run()
	if !strings.Contains(out.String(), "package=visible") {
		t.Fatalf("the runtime did not run in the sandbox (exit %d)\nstdout: %s\nstderr: %s", cmd.ProcessState.ExitCode(), out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "host-home=hidden") {
		t.Fatalf("the host home around the runtime is visible in the sandbox:\n%s", out.String())
	}
}
