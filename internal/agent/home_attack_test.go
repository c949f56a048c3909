package agent

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/testkit"
)

// Two sudo users running the same workload's agent must not share a
// managed home: user B's agent would read user A's sessions and plant
// settings (hooks) that run in A's next sandbox.
func TestManagedHomeNotSharedBetweenUsers(t *testing.T) {
	testkit.RequireRoot(t)
	homes := filepath.Join(t.TempDir(), "state-agents")
	a, err := ManagedHome(homes, "local", "claude-code", "claude", 1000)
	if err != nil {
		t.Fatalf("ManagedHome for uid 1000: %v", err)
	}
	b, err := ManagedHome(homes, "local", "claude-code", "claude", 1001)
	if err != nil {
		t.Fatalf("ManagedHome for uid 1001: %v", err)
	}
	if a == b {
		t.Fatalf("uid 1000 and uid 1001 got the same managed home %s", a)
	}
	// Nor do two tenants with a workload of the same name.
	if c, err := ManagedHome(homes, "other", "claude-code", "claude", 1000); err != nil || c == a {
		t.Fatalf("tenant other's home = %s, %v; tenant local's is %s", c, err, a)
	}
	for uid, h := range map[uint32]string{1000: a, 1001: b} {
		var st syscall.Stat_t
		if err := syscall.Stat(h, &st); err != nil || st.Uid != uid {
			t.Errorf("home %s: uid %d (%v), want %d", h, st.Uid, err, uid)
		}
	}
}

// The managed homes' directory (beside the state directory) is checked
// like the state directory: a directory another user owns or may write
// (e.g. --state-dir in a shared directory, where a local user created
// STATE-agents first) would let that user plant or swap agent homes.
func TestManagedHomeRefusesUnsafeHomesDir(t *testing.T) {
	testkit.RequireRoot(t)
	mk := func(t *testing.T, mode os.FileMode, uid int) string {
		d := filepath.Join(t.TempDir(), "state-agents")
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, uid, uid); err != nil {
			t.Fatal(err)
		}
		return d
	}
	// Positive control: root's, 0711.
	if _, err := ManagedHome(mk(t, 0o711, 0), "t", "w", "claude", 1000); err != nil {
		t.Fatalf("a root-owned 0711 homes directory was refused: %v", err)
	}
	for _, tt := range []struct {
		name string
		mode os.FileMode
		uid  int
	}{{"another user's", 0o755, 1234}, {"world-writable", 0o777, 0}, {"group-writable", 0o775, 0}} {
		if h, err := ManagedHome(mk(t, tt.mode, tt.uid), "t", "w", "claude", 1000); err == nil {
			t.Errorf("%s homes directory: ManagedHome = %s, want a refusal", tt.name, h)
		}
	}
	// A symlink where the homes directory should be is refused.
	real := mk(t, 0o711, 0)
	link := filepath.Join(t.TempDir(), "state-agents")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	if h, err := ManagedHome(link, "t", "w", "claude", 1000); err == nil {
		t.Errorf("a symlinked homes directory: ManagedHome = %s, want a refusal", h)
	}
}

// A home already there that belongs to someone else is refused, not
// handed to this user's agent.
func TestManagedHomeRefusesForeignHome(t *testing.T) {
	testkit.RequireRoot(t)
	homes := filepath.Join(t.TempDir(), "state-agents")
	h, err := ManagedHome(homes, "t", "w", "claude", 1000)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(h, 1234, 1234); err != nil {
		t.Fatal(err)
	}
	if got, err := ManagedHome(homes, "t", "w", "claude", 1000); err == nil {
		t.Errorf("a home owned by uid 1234 was handed to uid 1000: %s", got)
	}
}

// A runtime outside /usr is bound as the one executable, never its
// directory's parent: node copied to ~/bin (a tarball unpacked into the
// home, npm's prefix set to ~) made the whole host home (~/.ssh, the
// agents' own host credentials) visible read-only.
func TestPlanRuntimeBindIsTheExecutableOnly(t *testing.T) {
	p, _ := Lookup("codex")
	in := &Install{Program: "/opt/x/node_modules/@openai/codex/bin/codex.js", Modules: "/opt/x/node_modules", Runtime: "/home/alice/bin/node"}
	s := p.Plan(in, "/srv/home", nil)
	var runtime bool
	for _, b := range s.Binds {
		if b.Source == "/home/alice" || b.Source == "/home/alice/bin" || b.Source == "/home" {
			t.Errorf("the runtime's bind exposes %s (binds %+v)", b.Source, s.Binds)
		}
		if b.Source == in.Runtime {
			runtime = b.Target == in.Runtime && !b.Writable
		}
	}
	if !runtime {
		t.Errorf("binds %+v: want %s read-only at the same path", s.Binds, in.Runtime)
	}
	if !strings.HasPrefix(s.Env[0], "PATH=/home/alice/bin:") {
		t.Errorf("env %q: want the runtime's directory first on PATH", s.Env)
	}
}

// package.json is read from directories other users may own (a shared
// install, every directory walked up from the command): a FIFO there
// must not hang cordon (root), a symlink there is not followed, and a
// huge file is not read whole.
func TestFindPackageJSONNotAFileOrHuge(t *testing.T) {
	p, _ := Lookup("claude")
	fifo := filepath.Join(t.TempDir(), "pkg")
	if err := os.Mkdir(fifo, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(fifo, "package.json"), 0o644); err != nil {
		t.Fatal(err)
	}
	huge := filepath.Join(t.TempDir(), "pkg")
	if err := os.Mkdir(huge, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(huge, "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	// {"name":"@anthropic-ai/claude-code","bin":{"claude":"c"}} then 64 MiB of spaces (sparse: NULs)
	if _, err := f.WriteString(`{"name":"@anthropic-ai/claude-code","bin":{"claude":"c"}}`); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(64 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.WriteFile(filepath.Join(huge, "c"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Positive control: the same package with a small package.json is found.
	small := filepath.Join(t.TempDir(), "pkg")
	if err := os.Mkdir(small, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(small, "package.json"), []byte(`{"name":"@anthropic-ai/claude-code","bin":{"claude":"c"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(small, "c"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Find(small, ""); err != nil {
		t.Fatalf("positive control: Find(%s) = %v", small, err)
	}
	linked := filepath.Join(t.TempDir(), "pkg")
	if err := os.Mkdir(linked, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(small, "package.json"), filepath.Join(linked, "package.json")); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{fifo, huge, linked} {
		done := make(chan error, 1)
		go func() { _, err := p.Find(dir, ""); done <- err }()
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("Find(%s) accepted its package.json", dir)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("Find(%s) blocked reading package.json", dir)
		}
	}
}

// The agent owns its home (through the idmapped bind) and may chmod it:
// that does not lock it out of its next run, and UID/ keeps other local
// users from reaching it.
func TestManagedHomeAgentChmod(t *testing.T) {
	testkit.RequireRoot(t)
	homes := filepath.Join(t.TempDir(), "state-agents")
	h, err := ManagedHome(homes, "t", "w", "claude", 1000)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(h, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := ManagedHome(homes, "t", "w", "claude", 1000); err != nil {
		t.Fatalf("a home its agent made 0777 was refused: %v", err)
	}
	fi, err := os.Stat(filepath.Join(homes, "1000"))
	if err != nil || fi.Mode().Perm()&0o077 != 0 || fi.Sys().(*syscall.Stat_t).Uid != 1000 {
		t.Fatalf("%s/1000: %v %v, want 0700 and uid 1000", homes, fi, err)
	}
}

// The package directory bound read-only is never a home directory (or
// what holds one): a package.json naming the agent's package in a home
// (--agent-path ~, or found walking up from the command) made Find bind
// the whole home.
func TestFindRefusesAPackageThatIsAHome(t *testing.T) {
	p, _ := Lookup("claude")
	home := filepath.Join(t.TempDir(), "alice")
	if err := os.MkdirAll(filepath.Join(home, ".ssh"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "package.json"), []byte(`{"name":"@anthropic-ai/claude-code","bin":{"claude":"c"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "c"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	old := hostHomes
	hostHomes = func() []string { return []string{home} }
	defer func() { hostHomes = old }()
	if in, err := p.Find(home, ""); err == nil {
		t.Fatalf("Find(%s) = %+v: the home would be bound", home, in)
	}
	// Positive control: the same package elsewhere is found.
	hostHomes = func() []string { return []string{"/nonexistent-home"} }
	if _, err := p.Find(home, ""); err != nil {
		t.Fatalf("positive control: Find(%s) = %v", home, err)
	}
}

func TestExposesHome(t *testing.T) {
	homes := []string{"/root", "/home", "/var/www", "/srv/u/alice"}
	for dir, want := range map[string]bool{
		"/": true, "/home": true, "/home/bob": true, "/var": true, "/var/www": true, "/srv/u": true,
		"/srv/u/alice/.nvm": false, "/opt/node": false, "/var/www-data": false, "/home/bob/bin": false,
	} {
		if got := ExposesHome(dir, homes); got != want {
			t.Errorf("ExposesHome(%s) = %v, want %v", dir, got, want)
		}
	}
	if h := HostHomes(); !slices.Contains(h, "/root") || !slices.Contains(h, "/home") {
		t.Errorf("HostHomes() = %q, want /root and /home at least", h)
	}
}
