package cli

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"

	"github.com/cordon-project/cordon/internal/agent"
	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/launch"
	"github.com/cordon-project/cordon/internal/sandbox"
)

// agentOpts are the --agent flags of cordon run (package agent holds the
// presets).
type agentOpts struct {
	name string
	path string
	home string
}

func addAgentFlags(fl *pflag.FlagSet, a *agentOpts) {
	fl.StringVar(&a.name, "agent", "", fmt.Sprintf("run a coding agent installed on this host (%s): it is the program, and arguments after -- go to it; see docs/agents.md", strings.Join(agent.Names(), ", ")))
	fl.StringVar(&a.path, "agent-path", "", "with --agent: the agent's npm install directory (default: found through the agent's command on your PATH)")
	fl.StringVar(&a.home, "agent-home", "", "with --agent: host directory for the agent's own state (settings, sessions), bound read-write at "+agent.HomeTarget+" and kept between runs (default: a managed directory per workload and agent beside the state directory)")
}

// checkAgentArgs checks the command line shape with and without --agent.
func (a *agentOpts) checkArgs(args []string, dash int) error {
	if a.name == "" {
		if a.path != "" || a.home != "" {
			return failure.Failf(failure.KindUsage, "run", "--agent-path and --agent-home need --agent")
		}
		if len(args) == 0 {
			return failure.Failf(failure.KindUsage, "run", "no program: give its argv after --: cordon run [flags] -- PROGRAM [ARGS...], or run an agent: cordon run --agent NAME")
		}
		if dash != 0 {
			return failure.Failf(failure.KindUsage, "run", "put the program after --: cordon run [flags] -- PROGRAM [ARGS...]")
		}
		return nil
	}
	if len(args) > 0 && dash != 0 {
		return failure.Failf(failure.KindUsage, "run", "with --agent the agent is the program; put its arguments after --: cordon run --agent %s -- ARGS...", a.name)
	}
	return nil
}

// loadPlan is the gateway plan: --config, else the preset's built-in
// configuration with --agent, else none (no way out).
func (r *aRun) loadPlan() (*launch.Plan, error) {
	warn := func(w string) { r.g.logger().Warn(w) }
	if r.f.config != "" {
		return launch.LoadPlan(r.f.config, r.f.workload, warn)
	}
	if r.f.agent.name == "" {
		return nil, nil
	}
	p, err := agent.Lookup(r.f.agent.name)
	if err != nil {
		return nil, err
	}
	return launch.LoadBuiltinPlan(p.Config, p.ConfigName, r.f.workload, warn)
}

// applyAgent makes the preset the program: it finds the agent on the
// host, prepares its home (seeding what its first run needs, never
// through a symlink), and adds its binds, environment and argv to spec.
func (r *aRun) applyAgent(spec *sandbox.Spec, plan *launch.Plan) error {
	a := r.f.agent
	if a.name == "" {
		return nil
	}
	p, err := agent.Lookup(a.name)
	if err != nil {
		return err
	}
	in, err := p.Find(a.path, os.Getenv("PATH"))
	if err != nil {
		return err
	}
	home := a.home
	if home != "" {
		if home, err = hostPath("run", "--agent-home", home); err != nil {
			return err
		}
		if err := newAgentHome(home); err != nil {
			return err
		}
	} else {
		workload := spec.Workload
		if plan != nil {
			workload = plan.Config().Workload
		}
		if home, err = agent.ManagedHome(agent.HomesDir(r.g.stateDir), workload, p.Name, agent.Owner(os.Getenv)); err != nil {
			return err
		}
	}
	if _, err := p.Seed(home); err != nil {
		return err
	}
	s := p.Plan(in, home, spec.Argv)
	spec.Argv = s.Argv
	spec.Binds = append(spec.Binds, s.Binds...)
	spec.Env = append(s.Env, spec.Env...)
	return launch.Validate(spec)
}

// newAgentHome creates an --agent-home that does not exist yet, 0700 and
// owned by the user who ran sudo (agent.Owner), as a managed home is: a
// root-owned one would be refused as a writable bind.
func newAgentHome(home string) error {
	if _, err := os.Lstat(home); err == nil || !os.IsNotExist(err) {
		return nil // there: the provider checks it when it binds it
	}
	if err := os.MkdirAll(filepath.Dir(home), 0o755); err != nil {
		return failure.Failf(failure.KindUsage, "run", "--agent-home %s: %v", home, err)
	}
	if err := os.Mkdir(home, 0o700); err != nil {
		return failure.Failf(failure.KindUsage, "run", "--agent-home %s: %v", home, err)
	}
	uid := agent.Owner(os.Getenv)
	if err := os.Lchown(home, uid, uid); err != nil {
		return failure.Failf(failure.KindProvision, "run", "--agent-home %s: %v", home, err)
	}
	return nil
}

// notFound is the refusal when the program is not in the sandbox: what
// the sandbox shows (its PATH, the binds) and the bind that would fix
// it, from a host-side lookup of argv[0] on the caller's PATH.
func notFound(spec sandbox.Spec, msg string) error {
	prog := spec.Argv[0]
	var b strings.Builder
	fmt.Fprintf(&b, "%s (not found in the sandbox).\n", msg)
	path := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, kv := range spec.Env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	fmt.Fprintf(&b, "  The sandbox shows the host's /usr, /bin, /sbin and /lib* read-only; its PATH is %s.\n", path)
	if spec.Workspace != "" {
		fmt.Fprintf(&b, "  --workspace %s is at /workspace.\n", spec.Workspace)
	}
	for _, bd := range spec.Binds {
		mode := "ro"
		if bd.Writable {
			mode = "rw"
		}
		fmt.Fprintf(&b, "  bind (%s) %s -> %s\n", mode, bd.Source, bd.Target)
	}
	b.WriteString(fixHint(prog))
	return failure.Failf(failure.KindExec, prog, "%s", strings.TrimRight(b.String(), "\n"))
}

// fixHint suggests the bind (or the preset) that would make prog visible.
func fixHint(prog string) string {
	for _, n := range agent.Names() {
		if p, _ := agent.Lookup(n); p != nil && filepath.Base(prog) == p.Command {
			return fmt.Sprintf("  %s is a coding agent: run it with `cordon run --agent %s` (it finds and binds the install; see docs/agents.md).\n", p.Command, n)
		}
	}
	host := prog
	if !filepath.IsAbs(prog) {
		lp, err := exec.LookPath(prog)
		if err != nil {
			return fmt.Sprintf("  %s is not on your PATH either: bind the directory that holds it, e.g. cordon run --ro /opt/x:/opt/x -- /opt/x/bin/%s\n", prog, filepath.Base(prog))
		}
		host = lp
	}
	real, err := filepath.EvalSymlinks(host)
	if err != nil {
		return fmt.Sprintf("  %s does not exist on this host either: bind the directory that holds it, e.g. cordon run --ro /opt/x:/opt/x -- /opt/x/bin/%s\n", host, filepath.Base(prog))
	}
	dir := filepath.Dir(real)
	if filepath.Base(dir) == "bin" {
		dir = filepath.Dir(dir)
	}
	target := dir
	for _, r := range []string{"/tmp", "/home", "/root", "/run", "/etc", "/usr", "/dev", "/proc", "/sys"} {
		if target == r || strings.HasPrefix(target, r+"/") {
			// The sandbox owns these paths: bind elsewhere.
			target = "/opt/" + filepath.Base(dir)
			break
		}
	}
	rel, _ := filepath.Rel(dir, real)
	return fmt.Sprintf("  On this host it is %s: bind it read-only, e.g. cordon run --ro %s:%s -- %s\n", real, dir, target, filepath.Join(target, rel))
}
