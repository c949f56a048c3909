package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/testkit"
)

// agentHome is a fresh host directory for --agent-home, owned by wsOwner
// as a user's own directory would be.
func agentHome(t *testing.T) string {
	t.Helper()
	d := filepath.Join(t.TempDir(), "agent-home")
	if err := os.Mkdir(d, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(d, wsOwner, wsOwner); err != nil {
		t.Fatal(err)
	}
	return d
}

// checkNoKey fails when the custodied key is in any file under dir (the
// agent's home or workspace, read from the host).
func checkNoKey(t *testing.T, dir string) {
	t.Helper()
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), fakeKey) {
			t.Errorf("the custodied key is in %s, inside the sandbox's view", p)
		}
		return nil
	})
}

// checkUpstreamKey: every request the upstream saw carried the custodied
// key (x-api-key or Bearer), never the placeholder; at least one on path.
func checkUpstreamKey(t *testing.T, up *testkit.ModelUpstream, path string) {
	t.Helper()
	n := 0
	for _, s := range up.Seen() {
		if s.Path == path {
			n++
		}
		if s.APIKey != fakeKey && s.Auth != "Bearer "+fakeKey {
			t.Errorf("upstream request %s carried x-api-key %q, Authorization %q: want the custodied key", s.Path, s.APIKey, s.Auth)
		}
	}
	if n == 0 {
		t.Fatalf("the upstream saw no %s request: %+v", path, up.Seen())
	}
}

// One command: `cordon run --agent claude -- -p …` finds the install,
// binds it read-only, seeds its home, and its request reaches the fake
// upstream through the broker with the custodied key.
func TestAgentClaudeOneShot(t *testing.T) {
	testkit.RequireRoot(t)
	dir := claudeDir(t)
	st := newStateDir(t)
	const answer = "preset-one-shot-answer-17"
	up := testkit.NewModelUpstream(t, fakeKey, answer)
	cfg := gatewayConfig(t, up.URL(), "")
	home, ws := agentHome(t), workspace(t)
	r := cordon(t, cordonBin, st, "run", "--agent", "claude", "--agent-path", dir, "--agent-home", home, "--workspace", ws,
		"--config", cfg, "--timeout", "90s", "--", "-p", "say the magic words", "--model", "claude-sonnet-4-5")
	if r.Code != 0 || !strings.Contains(r.Stdout, answer) {
		t.Fatalf("cordon run --agent claude -- -p = %d\nstdout: %s\nstderr: %s\nupstream saw: %+v", r.Code, r.Stdout, r.Stderr, up.Seen())
	}
	checkUpstreamKey(t, up, "/v1/messages")
	checkNoKey(t, home)
	// The seed: written by cordon, owned by the home's owner.
	fi, err := os.Lstat(filepath.Join(home, ".claude.json"))
	if err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("seeded .claude.json: %v %v", fi, err)
	}
}

// The agent home: cordon (root) never writes through a symlink the
// agent left there (a .claude.json symlink to a host file is left alone
// and the host file untouched), and a home that does not exist yet is
// created for an unprivileged owner. Without --config the preset's
// built-in configuration is used (it wants ANTHROPIC_API_KEY).
func TestAgentHome(t *testing.T) {
	testkit.RequireRoot(t)
	dir := claudeDir(t)
	st := newStateDir(t)
	home := agentHome(t)
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("host file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(home, ".claude.json")); err != nil {
		t.Fatal(err)
	}
	// Without --config the preset's built-in configuration custodies the
	// key from cordon's own ANTHROPIC_API_KEY: absent here, refused.
	r := cordon(t, cordonBin, st, "run", "--agent", "claude", "--agent-path", dir, "--agent-home", home, "--timeout", "30s", "--", "--version")
	if r.Code != 125 || !strings.Contains(r.Stderr, "ANTHROPIC_API_KEY") {
		t.Fatalf("--agent claude without --config or ANTHROPIC_API_KEY = %d %q, want 125 naming ANTHROPIC_API_KEY", r.Code, r.Stderr)
	}
	up := testkit.NewModelUpstream(t, fakeKey, "unused")
	r = cordon(t, cordonBin, st, "run", "--agent", "claude", "--agent-path", dir, "--agent-home", home, "--config", gatewayConfig(t, up.URL(), ""),
		"--timeout", "30s", "--", "--version")
	if b, _ := os.ReadFile(victim); string(b) != "host file\n" {
		t.Fatalf("the symlink's target was written: %q (run: %d %s)", b, r.Code, r.Stderr)
	}
	if fi, err := os.Lstat(filepath.Join(home, ".claude.json")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the agent's symlink was replaced: %v %v", fi, err)
	}
	if r.Code != 0 || !strings.Contains(r.Stdout, "2.1.") {
		t.Fatalf("claude --version = %d %q %q", r.Code, r.Stdout, r.Stderr)
	}
	// An --agent-home that does not exist yet is created for an
	// unprivileged owner (root-owned, it would be refused as a writable
	// bind) and used.
	fresh := filepath.Join(t.TempDir(), "new", "home")
	r = cordon(t, cordonBin, st, "run", "--agent", "claude", "--agent-path", dir, "--agent-home", fresh, "--config", gatewayConfig(t, up.URL(), ""),
		"--timeout", "30s", "--", "--version")
	fi, err := os.Stat(fresh)
	if r.Code != 0 || err != nil || fi.Sys().(*syscall.Stat_t).Uid != 65533 {
		t.Fatalf("run with a new --agent-home = %d %q; home %v %v, want it created for uid 65533", r.Code, r.Stderr, fi, err)
	}
	if _, err := os.Lstat(filepath.Join(fresh, ".claude.json")); err != nil {
		t.Fatalf("the new home was not seeded: %v", err)
	}
}

// Interactive, in a real terminal: the UI comes up with no onboarding
// screen and no connectivity error, a typed prompt is answered by the
// fake upstream through the broker, the agent writes a file in the
// workspace with its own Write tool (checked on the host), and the key
// is nowhere inside. A second run sees the first run's state.
func TestAgentClaudeInteractive(t *testing.T) {
	testkit.RequireRoot(t)
	dir := claudeDir(t)
	st := newStateDir(t)
	const answer = "interactive-answer-from-the-broker"
	up := testkit.NewModelUpstream(t, fakeKey, answer)
	up.ToolName = "Write"
	up.ToolInput = `{"file_path":"/workspace/made-by-claude.txt","content":"written through Claude's own Write tool\n"}`
	cfg := gatewayConfig(t, up.URL(), "")
	home, ws := agentHome(t), workspace(t)
	x := testkit.NewTmux(t, 120, 40, nil, cordonBin, "--state-dir", st, "run", "--agent", "claude", "--agent-path", dir,
		"--agent-home", home, "--workspace", ws, "--config", cfg, "--timeout", "120s", "--", "--model", "claude-sonnet-4-5")
	screen := x.WaitFor(`❯`, 60*time.Second)
	for _, bad := range []string{"Failed to connect", "ERR_PROXY", "Choose the text style", "Do you trust", "Detected a custom API key", "Select login method"} {
		if strings.Contains(screen, bad) {
			t.Fatalf("first screen shows %q:\n%s", bad, screen)
		}
	}
	pid := descendantRunning(x.PID(), filepath.Join(dir, "node_modules/@anthropic-ai/claude-code/bin/claude.exe"))
	if pid == 0 {
		t.Fatal("no Claude Code process below the terminal")
	}
	checkAgentEnv(t, pid, "ANTHROPIC_API_KEY")
	x.Type("write the file please")
	x.Keys(false, "Enter")
	// Claude asks before its first write: answer as a person would.
	screen = x.WaitFor(`(?i)do you want to (create|make this edit)|the tool said`, 60*time.Second)
	for i := 0; i < 10 && !strings.Contains(screen, "the tool said"); i++ {
		time.Sleep(time.Second) // the dialog takes keys once drawn
		if strings.Contains(x.Screen(), "Do you want to") {
			x.Keys(false, "Enter")
		}
		screen = x.Screen()
	}
	screen = x.WaitFor(`the tool said`, 30*time.Second)
	b, err := os.ReadFile(filepath.Join(ws, "made-by-claude.txt"))
	if err != nil || !strings.Contains(string(b), "own Write tool") {
		t.Fatalf("the file Claude wrote, read on the host: %q %v\nscreen:\n%s", b, err, screen)
	}
	checkUpstreamKey(t, up, "/v1/messages")
	checkNoKey(t, home)
	checkNoKey(t, ws)
	x.Keys(false, "C-d")
	x.Keys(false, "C-d")
	x.WaitExit(30 * time.Second)

	// State survives: the second run continues the first one's session
	// from --agent-home, so its request carries the earlier turns.
	sessions, _ := filepath.Glob(filepath.Join(home, ".claude", "projects", "*", "*.jsonl"))
	if len(sessions) == 0 {
		t.Fatalf("no session transcript under %s/.claude/projects after the first run", home)
	}
	up.ToolName = "" // the first run has ended: no request is in flight
	before := len(up.Seen())
	r := cordon(t, cordonBin, st, "run", "--agent", "claude", "--agent-path", dir, "--agent-home", home, "--workspace", ws,
		"--config", cfg, "--timeout", "90s", "--", "-p", "--continue", "again", "--model", "claude-sonnet-4-5")
	if r.Code != 0 || !strings.Contains(r.Stdout, answer) {
		t.Fatalf("second run: %d %s %s", r.Code, r.Stdout, r.Stderr)
	}
	most := up.MostMessages(before, "/v1/messages")
	if most < 3 {
		t.Fatalf("the continued session's request carried %d messages, want the first run's turns too (>= 3)", most)
	}
}

// Without --agent-home the agent gets a managed home beside the state
// directory (never inside it), per user, tenant, workload and agent,
// owned by an unprivileged uid, and its session is there after the run.
func TestAgentClaudeManagedHome(t *testing.T) {
	testkit.RequireRoot(t)
	dir := claudeDir(t)
	st := newStateDir(t)
	t.Cleanup(func() { os.RemoveAll(st + "-agents") })
	const answer = "managed-home-answer"
	up := testkit.NewModelUpstream(t, fakeKey, answer)
	cfg := gatewayConfig(t, up.URL(), "")
	r := cordon(t, cordonBin, st, "run", "--agent", "claude", "--agent-path", dir, "--workspace", workspace(t),
		"--config", cfg, "--timeout", "90s", "--", "-p", "hello", "--model", "claude-sonnet-4-5")
	if r.Code != 0 || !strings.Contains(r.Stdout, answer) {
		t.Fatalf("run with the managed home = %d %s %s", r.Code, r.Stdout, r.Stderr)
	}
	// 65533: root ran cordon (no SUDO_UID); acme and e2e: the config's
	// tenant and workload.
	home := filepath.Join(st+"-agents", "65533", "acme", "e2e", "claude")
	fi, err := os.Stat(home)
	if err != nil {
		t.Fatalf("managed home: %v", err)
	}
	if s := fi.Sys().(*syscall.Stat_t); s.Uid != 65533 || fi.Mode().Perm() != 0o700 {
		t.Fatalf("managed home %s: uid %d mode %v, want 65533 and 0700", home, s.Uid, fi.Mode().Perm())
	}
	if sessions, _ := filepath.Glob(filepath.Join(home, ".claude", "projects", "*", "*.jsonl")); len(sessions) == 0 {
		t.Fatalf("no session in the managed home %s", home)
	}
	checkNoKey(t, home)
}

// descendantRunning returns a process below ancestor whose argv[0] is
// prog (0 when none).
func descendantRunning(ancestor int, prog string) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cl, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.HasPrefix(string(cl), prog+"\x00") {
			continue
		}
		for p, n := pid, 0; p > 1 && n < 64; n++ {
			if p == ancestor {
				return pid
			}
			stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p), "stat"))
			if err != nil {
				break
			}
			s := string(stat)
			f := strings.Fields(s[strings.LastIndex(s, ")")+1:])
			if len(f) < 2 {
				break
			}
			p, _ = strconv.Atoi(f[1])
		}
	}
	return 0
}

// checkAgentEnv reads the running agent's environment from the host: the
// placeholder key, never the custodied one, and HOME at the agent home.
func checkAgentEnv(t *testing.T, pid int, placeholderVar string) {
	t.Helper()
	env, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "environ"))
	if err != nil {
		t.Fatalf("read the agent's environment: %v", err)
	}
	vars := strings.Split(string(env), "\x00")
	if strings.Contains(string(env), fakeKey) {
		t.Errorf("the custodied key is in the agent's environment")
	}
	if !slices.Contains(vars, "HOME=/agent-home") || !slices.ContainsFunc(vars, func(v string) bool {
		return strings.HasPrefix(v, placeholderVar+"=") && strings.Contains(v, "cordon-placeholder")
	}) {
		t.Errorf("the agent's environment lacks HOME=/agent-home or a placeholder %s: %q", placeholderVar, vars)
	}
}
