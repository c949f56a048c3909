package agent

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/sandbox"
)

// HomeTarget is where the agent's home (--agent-home) is bound in the
// sandbox, read-write, and what HOME points to. The sandbox's own HOME
// (/home/agent) is a scratch tmpfs that does not survive a run.
const HomeTarget = "/agent-home"

// Workspace is the program's working directory in the sandbox when
// --workspace is given (the provider binds it there).
const Workspace = "/workspace"

// A Preset is one agent: how to find it on the host, how to run it in
// the sandbox, and what its home needs before its first run.
type Preset struct {
	// Name is what --agent takes ("claude").
	Name string
	// Command is the program's name on the caller's PATH ("claude").
	Command string
	// Package is the npm package that ships it ("@anthropic-ai/claude-code").
	Package string
	// Runtime names the interpreter the package's entry point needs on
	// PATH in the sandbox ("node"), "" for a native executable.
	Runtime string
	// Config is the built-in gateway configuration (cordon/v1 YAML) used
	// without --config.
	Config []byte
	// ConfigName names Config in errors (examples/claude-code.yaml).
	ConfigName string
	// Env is the agent's environment in the sandbox (after the gateway's).
	Env []string
	// Args returns the arguments cordon puts before the user's.
	Args func() []string
	// Seeds are the files the agent's home needs before its first run,
	// written only when absent (Seed).
	Seeds []SeedFile
}

// A SeedFile is one file in the agent's home, relative to it.
type SeedFile struct {
	Path string
	Data func() ([]byte, error)
}

var presets = map[string]*Preset{}

// register adds p; each agent's file calls it from init.
func register(p *Preset) {
	if _, dup := presets[p.Name]; dup {
		panic("agent: preset " + p.Name + " registered twice")
	}
	presets[p.Name] = p
}

// Names are the registered presets, sorted.
func Names() []string {
	var out []string
	for n := range presets {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Lookup returns the preset called name, or a usage failure listing them.
func Lookup(name string) (*Preset, error) {
	if p, ok := presets[name]; ok {
		return p, nil
	}
	return nil, failure.Failf(failure.KindUsage, "agent", "--agent %q: no such preset (known: %s)", name, strings.Join(Names(), ", "))
}

// Install is an agent found on the host.
type Install struct {
	// Program is the entry point (absolute, symlinks resolved).
	Program string
	// Modules is the node_modules directory that holds the package and
	// its siblings (optional native dependencies live there): the one
	// directory bound read-only.
	Modules string
	// Runtime is the runtime's executable (absolute, resolved), "" when
	// the preset needs none.
	Runtime string
}

// Find locates p's installation: in dir when given (--agent-path: an npm
// prefix, a node_modules directory, the package directory itself, or a
// directory where `npm install PACKAGE` ran), else through p.Command on
// path (the caller's PATH), following symlinks to the package directory.
func (p *Preset) Find(dir, path string) (*Install, error) {
	var pkg string
	if dir != "" {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return nil, failure.Failf(failure.KindUsage, "agent", "--agent-path %s: %v", dir, err)
		}
		for _, c := range []string{abs, filepath.Join(abs, "node_modules", p.Package), filepath.Join(abs, "lib", "node_modules", p.Package), filepath.Join(abs, p.Package)} {
			if isPackage(c, p.Package) {
				pkg = c
				break
			}
		}
		if pkg == "" {
			return nil, failure.Failf(failure.KindUsage, "agent", "--agent-path %s: no npm package %s there (looked in ., node_modules/, lib/node_modules/)", dir, p.Package)
		}
	} else {
		cmd, err := lookPath(p.Command, path)
		if err != nil {
			return nil, failure.Failf(failure.KindUsage, "agent", "%s is not on your PATH: install it (npm install -g %s) or name its directory with --agent-path DIR", p.Command, p.Package)
		}
		real, err := filepath.EvalSymlinks(cmd)
		if err != nil {
			return nil, failure.Failf(failure.KindUsage, "agent", "resolve %s: %v", cmd, err)
		}
		for d := filepath.Dir(real); d != "/" && d != "."; d = filepath.Dir(d) {
			if isPackage(d, p.Package) {
				pkg = d
				break
			}
		}
		if pkg == "" {
			return nil, failure.Failf(failure.KindUsage, "agent", "%s (%s) is not inside the npm package %s; name the package's directory with --agent-path DIR", cmd, real, p.Package)
		}
	}
	pkg, err := filepath.EvalSymlinks(pkg)
	if err != nil {
		return nil, failure.Failf(failure.KindUsage, "agent", "resolve %s: %v", pkg, err)
	}
	in := &Install{Modules: modulesDir(pkg, p.Package)}
	if in.Program, err = entryPoint(pkg, p.Command); err != nil {
		return nil, err
	}
	if p.Runtime != "" {
		rt, err := lookPath(p.Runtime, path)
		if err != nil {
			return nil, failure.Failf(failure.KindUsage, "agent", "%s needs %s, which is not on your PATH", p.Name, p.Runtime)
		}
		if in.Runtime, err = filepath.EvalSymlinks(rt); err != nil {
			return nil, failure.Failf(failure.KindUsage, "agent", "resolve %s: %v", rt, err)
		}
	}
	return in, nil
}

// isPackage reports whether dir holds package.json naming pkg.
func isPackage(dir, pkg string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if err != nil {
		return false
	}
	var m struct {
		Name string `json:"name"`
	}
	return json.Unmarshal(b, &m) == nil && m.Name == pkg
}

// modulesDir is the node_modules directory holding the package at dir
// (one level up, two for a scoped package), or dir itself when the
// package is not in one.
func modulesDir(dir, pkg string) string {
	up := dir
	for range strings.Count(pkg, "/") + 1 {
		up = filepath.Dir(up)
	}
	if filepath.Base(up) == "node_modules" {
		return up
	}
	return dir
}

// entryPoint is the file package.json's "bin" names for command.
func entryPoint(pkg, command string) (string, error) {
	b, err := os.ReadFile(filepath.Join(pkg, "package.json"))
	if err != nil {
		return "", failure.Failf(failure.KindUsage, "agent", "read %s/package.json: %v", pkg, err)
	}
	var m struct {
		Bin json.RawMessage `json:"bin"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return "", failure.Failf(failure.KindUsage, "agent", "%s/package.json: %v", pkg, err)
	}
	var rel string
	var bins map[string]string
	if json.Unmarshal(m.Bin, &bins) == nil {
		rel = bins[command]
	} else {
		_ = json.Unmarshal(m.Bin, &rel)
	}
	if rel == "" {
		return "", failure.Failf(failure.KindUsage, "agent", "%s/package.json names no %q program in \"bin\"", pkg, command)
	}
	p := filepath.Join(pkg, filepath.Clean("/"+rel))
	if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() {
		return "", failure.Failf(failure.KindUsage, "agent", "%s: the package's program %s is missing (is the install complete?)", pkg, p)
	}
	return p, nil
}

// lookPath finds name in the colon-separated list path (exec.LookPath,
// against the caller's PATH rather than cordon's environment).
func lookPath(name, path string) (string, error) {
	for _, d := range filepath.SplitList(path) {
		if !filepath.IsAbs(d) {
			continue
		}
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: not found on PATH", name)
}

// visibleDirs are the host directories the sandbox already shows
// read-only (its /usr layout): a package or runtime under them needs no
// bind. Kept in step with the native provider's base directories.
var visibleDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib64"}

// Visible reports whether the host path p is already visible read-only
// in every sandbox.
func Visible(p string) bool {
	for _, d := range visibleDirs {
		if p == d || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}

// Setup is what a preset adds to a run.
type Setup struct {
	Argv  []string
	Binds []sandbox.Bind
	Env   []string
}

// Plan builds the run for p with in installed, home (absolute) as its
// home, and the user's args after cordon's.
func (p *Preset) Plan(in *Install, home string, args []string) Setup {
	var s Setup
	seen := map[string]bool{}
	bindRO := func(dir string) {
		if Visible(dir) || seen[dir] {
			return
		}
		seen[dir] = true
		s.Binds = append(s.Binds, sandbox.Bind{Source: dir, Target: dir})
	}
	bindRO(in.Modules)
	path := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	if in.Runtime != "" {
		// A runtime outside /usr (nvm, a tarball): its prefix, read-only,
		// at the same path, its bin first on PATH.
		bin := filepath.Dir(in.Runtime)
		if !Visible(bin) {
			bindRO(filepath.Dir(bin))
			path = bin + ":" + path
		}
	}
	s.Binds = append(s.Binds, sandbox.Bind{Source: home, Target: HomeTarget, Writable: true})
	s.Env = append([]string{"PATH=" + path, "HOME=" + HomeTarget}, p.Env...)
	s.Argv = append([]string{in.Program}, p.Args()...)
	s.Argv = append(s.Argv, args...)
	return s
}
