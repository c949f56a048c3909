package agent

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/config"
	"github.com/cordon-project/cordon/internal/gateway"
	"github.com/cordon-project/cordon/internal/testkit"
)

// fakeInstall lays out what `npm install -g PKG` leaves under prefix:
// lib/node_modules/PKG with package.json and its bin, and bin/CMD a
// symlink to it. It returns prefix.
func fakeInstall(t *testing.T, pkg, cmd, rel string) string {
	t.Helper()
	prefix := t.TempDir()
	dir := filepath.Join(prefix, "lib", "node_modules", pkg)
	if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(rel)), 0o755); err != nil {
		t.Fatal(err)
	}
	pj, _ := json.Marshal(map[string]any{"name": pkg, "bin": map[string]string{cmd: rel}})
	if err := os.WriteFile(filepath.Join(dir, "package.json"), pj, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, rel), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(prefix, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..", "lib", "node_modules", pkg, rel), filepath.Join(prefix, "bin", cmd)); err != nil {
		t.Fatal(err)
	}
	return prefix
}

func TestFindThroughPATHAndAgentPath(t *testing.T) {
	p, err := Lookup("claude")
	if err != nil {
		t.Fatal(err)
	}
	prefix := fakeInstall(t, p.Package, p.Command, "bin/claude.exe")
	prefix, _ = filepath.EvalSymlinks(prefix)
	wantProg := filepath.Join(prefix, "lib/node_modules/@anthropic-ai/claude-code/bin/claude.exe")
	wantMods := filepath.Join(prefix, "lib/node_modules")
	for _, tt := range []struct{ name, dir, path string }{
		{"PATH", "", "/nonexistent:" + filepath.Join(prefix, "bin")},
		{"--agent-path prefix", prefix, ""},
		{"--agent-path package", filepath.Join(prefix, "lib/node_modules", p.Package), ""},
		{"--agent-path node_modules parent", filepath.Join(prefix, "lib"), ""},
	} {
		in, err := p.Find(tt.dir, tt.path)
		if err != nil {
			t.Fatalf("%s: Find = %v", tt.name, err)
		}
		if in.Program != wantProg || in.Modules != wantMods {
			t.Errorf("%s: Find = %+v, want program %s in %s", tt.name, in, wantProg, wantMods)
		}
	}
	if _, err := p.Find("", "/nonexistent"); err == nil || !strings.Contains(err.Error(), "npm install -g @anthropic-ai/claude-code") {
		t.Errorf("Find with claude not on PATH = %v, want the install hint", err)
	}
	if _, err := p.Find(t.TempDir(), ""); err == nil {
		t.Error("Find in a directory without the package succeeded")
	}
}

func TestPlanBindsOnlyThePackageRuntimeAndHome(t *testing.T) {
	p, _ := Lookup("codex")
	in := &Install{Program: "/opt/x/node_modules/@openai/codex/bin/codex.js", Modules: "/opt/x/node_modules", Runtime: "/usr/bin/node"}
	s := p.Plan(in, "/srv/home", []string{"exec", "hi"})
	if len(s.Binds) != 2 || s.Binds[0].Source != "/opt/x/node_modules" || s.Binds[0].Writable ||
		s.Binds[1].Source != "/srv/home" || s.Binds[1].Target != HomeTarget || !s.Binds[1].Writable {
		t.Fatalf("binds = %+v, want the node_modules read-only and the home read-write (node is under /usr: no bind)", s.Binds)
	}
	if s.Argv[0] != in.Program || s.Argv[len(s.Argv)-2] != "exec" || !strings.Contains(strings.Join(s.Argv, " "), `sandbox_mode="danger-full-access"`) {
		t.Errorf("argv = %q", s.Argv)
	}
	// A runtime outside /usr: the executable read-only, its directory
	// first on PATH.
	in.Runtime = "/opt/node24/bin/node"
	s = p.Plan(in, "/srv/home", nil)
	if s.Binds[1].Source != "/opt/node24/bin/node" || !strings.HasPrefix(s.Env[0], "PATH=/opt/node24/bin:") {
		t.Errorf("runtime outside /usr: binds %+v env %q", s.Binds, s.Env)
	}
}

// The seed goes in only when absent, never through a symlink, and
// belongs to the home's owner.
func TestSeedNeverFollowsSymlinksOrReplaces(t *testing.T) {
	p, _ := Lookup("claude")
	home := t.TempDir()
	wrote, err := p.Seed(home)
	if err != nil || len(wrote) != 1 {
		t.Fatalf("Seed in an empty home = %v, %v", wrote, err)
	}
	b, _ := os.ReadFile(filepath.Join(home, ".claude.json"))
	key := gateway.PlaceholderAnthropicKey
	if !bytes.Contains(b, []byte(`"hasCompletedOnboarding": true`)) || !bytes.Contains(b, []byte(key[len(key)-20:])) {
		t.Errorf("seed = %s", b)
	}
	// The agent changed it: a second run leaves it alone.
	if err := os.WriteFile(filepath.Join(home, ".claude.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if wrote, err := p.Seed(home); err != nil || len(wrote) != 0 {
		t.Fatalf("second Seed = %v, %v, want nothing written", wrote, err)
	}
	// A symlink left by the agent is neither followed nor replaced.
	home2 := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.Symlink(victim, filepath.Join(home2, ".claude.json")); err != nil {
		t.Fatal(err)
	}
	if wrote, err := p.Seed(home2); err != nil || len(wrote) != 0 {
		t.Fatalf("Seed over a symlink = %v, %v", wrote, err)
	}
	if _, err := os.Lstat(victim); !os.IsNotExist(err) {
		t.Fatalf("the symlink's target was created: %v", err)
	}
	// A home reached through a symlink is refused.
	link := filepath.Join(t.TempDir(), "home-link")
	if err := os.Symlink(home, link); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Seed(link); err == nil {
		t.Fatal("Seed through a symlinked home succeeded")
	}
	// A seed under a directory that is a symlink is refused, not followed.
	q := &Preset{Seeds: []SeedFile{{Path: "sub/f", Data: func() ([]byte, error) { return []byte("x"), nil }}}}
	home3 := t.TempDir()
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(home3, "sub")); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Seed(home3); err == nil {
		t.Fatal("Seed through a symlinked subdirectory succeeded")
	}
	if _, err := os.Lstat(filepath.Join(outside, "f")); !os.IsNotExist(err) {
		t.Fatalf("a file was created through the symlinked directory: %v", err)
	}
}

func TestManagedHome(t *testing.T) {
	testkit.RequireRoot(t) // it chowns the home to its user
	homes := filepath.Join(t.TempDir(), "state-agents")
	h, err := ManagedHome(homes, "local", "claude-code", "claude", 1000)
	if err != nil || h != filepath.Join(homes, "1000", "local", "claude-code", "claude") {
		t.Fatalf("ManagedHome = %q, %v", h, err)
	}
	if fi, err := os.Stat(h); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("home %v %v, want a 0700 directory", fi, err)
	}
	for _, bad := range [][2]string{{"local", "../x"}, {"../x", "w"}, {"a/b", "w"}, {"local", ".."}, {"", "w"}} {
		if _, err := ManagedHome(homes, bad[0], bad[1], "claude", 1000); err == nil {
			t.Errorf("tenant %q workload %q naming a path was accepted", bad[0], bad[1])
		}
	}
	if _, err := ManagedHome(homes, "local", "w", "claude", 0); err == nil {
		t.Error("a managed home for root was accepted")
	}
	if HomesDir("/var/lib/cordon/") != "/var/lib/cordon-agents" {
		t.Errorf("HomesDir = %s", HomesDir("/var/lib/cordon/"))
	}
}

// The built-in configurations parse, and examples/ carries the same text
// (the preset embeds its own copy: go:embed cannot reach examples/).
func TestBuiltinConfigsMatchExamples(t *testing.T) {
	for _, n := range Names() {
		p, _ := Lookup(n)
		if _, err := config.ParseDetached(p.Config, p.ConfigName); err != nil {
			t.Errorf("%s: built-in config: %v", n, err)
		}
		ex, err := os.ReadFile(filepath.Join("..", "..", p.ConfigName))
		if err != nil || !bytes.Equal(ex, p.Config) {
			t.Errorf("%s: %s differs from the embedded configuration (%v): keep them the same", n, p.ConfigName, err)
		}
	}
}

func TestLookupUnknown(t *testing.T) {
	if _, err := Lookup("nope"); err == nil || !strings.Contains(err.Error(), "claude") {
		t.Errorf("Lookup(nope) = %v, want the known presets listed", err)
	}
}

// The Gemini preset: its own sandbox off, its home at the agent home, a
// default model, and the settings seed (API-key auth, no usage reports,
// no update checks) in .gemini/, created with the directory.
func TestGeminiPreset(t *testing.T) {
	p, err := Lookup("gemini")
	if err != nil {
		t.Fatal(err)
	}
	s := p.Plan(&Install{Program: "/opt/g/node_modules/@google/gemini-cli/bundle/gemini.js", Modules: "/opt/g/node_modules", Runtime: "/usr/bin/node"}, "/srv/home", []string{"-p", "hi"})
	for _, want := range []string{"GEMINI_CLI_HOME=" + HomeTarget, "GEMINI_SANDBOX=false", "GEMINI_CLI_TRUST_WORKSPACE=true", "GEMINI_MODEL=" + GeminiDefaultModel} {
		if !slices.Contains(s.Env, want) {
			t.Errorf("env %q lacks %s", s.Env, want)
		}
	}
	if strings.Join(s.Argv, " ") != "/opt/g/node_modules/@google/gemini-cli/bundle/gemini.js -p hi" {
		t.Errorf("argv = %q", s.Argv)
	}
	home := t.TempDir()
	if wrote, err := p.Seed(home); err != nil || len(wrote) != 1 {
		t.Fatalf("Seed = %v, %v", wrote, err)
	}
	var m struct {
		Security struct {
			Auth struct{ SelectedType string } `json:"auth"`
		} `json:"security"`
		Privacy struct{ UsageStatisticsEnabled *bool } `json:"privacy"`
		General struct{ EnableAutoUpdate *bool }       `json:"general"`
	}
	b, _ := os.ReadFile(filepath.Join(home, ".gemini", "settings.json"))
	if err := json.Unmarshal(b, &m); err != nil || m.Security.Auth.SelectedType != "gemini-api-key" ||
		m.Privacy.UsageStatisticsEnabled == nil || *m.Privacy.UsageStatisticsEnabled || m.General.EnableAutoUpdate == nil || *m.General.EnableAutoUpdate {
		t.Errorf("settings.json = %s (%v)", b, err)
	}
}
