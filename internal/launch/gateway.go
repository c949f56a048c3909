package launch

// This file builds a sandbox's gateway (gateway.StartOptions) from the
// configuration: it is the one place that does, for cordon run and the
// daemon alike. It was moved from internal/cli/gateway.go as close to
// verbatim as possible.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/cordon-project/cordon/internal/broker/tool"
	"github.com/cordon-project/cordon/internal/config"
	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/custody"
	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/gateway"
	"github.com/cordon-project/cordon/internal/policy"
	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/store"
	"github.com/cordon-project/cordon/internal/telemetry"
)

// Plan is a loaded configuration with its custodied values and policy,
// ready to start a gateway once the sandbox is admitted.
type Plan struct {
	cfg     *config.Config
	secrets map[string][]byte // the custodied values, by name
	policy  *policy.Set
	// lab: FULL_CONTROL_LAB (daemon sandboxes): no approval waits, no
	// budget limits (policy is already permit-all).
	lab bool
	// unprivileged: the configuration is a daemon client's other than
	// root's, so the destinations it declares for the model routes and
	// tool servers are held to the egress address checks (no host
	// loopback, private, link-local or metadata address) when the
	// privileged side dials them.
	unprivileged bool
	// stderr gets the broker processes' stderr (Host.GatewayStderr).
	stderr io.Writer
	// trace is the session's trace the gateway (and the tool servers'
	// gateways) make crossing spans in; nil: none.
	trace *telemetry.Session
	// traceByGateway: trace is the gateway's own (StartGateway).
	traceByGateway bool
}

// identity is the identity of the plan's sandbox sandboxID (nil plan:
// only the sandbox id).
func (p *Plan) identity(sandboxID string) crossing.Identity {
	if p == nil || p.cfg == nil {
		return crossing.Identity{SandboxID: sandboxID}
	}
	return crossing.Identity{Workload: p.cfg.Workload, Tenant: p.cfg.Tenant, Purpose: p.cfg.Purpose, SandboxID: sandboxID}
}

// secretValues are the plan's custodied values, for the trace's redactor.
func (p *Plan) secretValues() [][]byte {
	out := make([][]byte, 0, len(p.secrets))
	for _, v := range p.secrets {
		out = append(out, v)
	}
	return out
}

// Config is the plan's configuration.
func (p *Plan) Config() *config.Config { return p.cfg }

// ToolServers is how many tool servers the plan starts, each in a
// sandbox of its own (the command servers; url servers are remote).
func (p *Plan) ToolServers() int {
	n := 0
	for _, t := range p.cfg.Tools {
		if len(t.Command) > 0 {
			n++
		}
	}
	return n
}

// PolicyDigest is the digest of the policy set the sandbox is decided by.
func (p *Plan) PolicyDigest() string { return p.policy.Digest() }

// LoadPlan loads a configuration file and its custodian for cordon run
// (the caller's own files and environment), refusing an invalid policy.
// workload is --workload: "default" or the config's own. warn gets the
// configuration's warnings.
func LoadPlan(path, workload string, warn func(string)) (*Plan, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return nil, failure.Fail(failure.KindUsage, "config", err)
	}
	return planOf(cfg, workload, warn)
}

// LoadBuiltinPlan is LoadPlan for a configuration built into cordon (an
// agent preset's): b is parsed as if read from source, touching no file.
// It must name none (no policy files, no secret files): source is a
// relative name, and a path resolved against it would be read from
// cordon's current directory — the user's project, the agent's
// workspace.
func LoadBuiltinPlan(b []byte, source, workload string, warn func(string)) (*Plan, error) {
	cfg, err := config.ParseDetached(b, source)
	if err != nil {
		return nil, failure.Fail(failure.KindInternal, "config", err)
	}
	if len(cfg.Policy) > 0 {
		return nil, failure.Failf(failure.KindInternal, "config", "%s: a built-in configuration names policy files %q", source, cfg.Policy)
	}
	for n, s := range cfg.Secrets {
		if s.File != "" {
			return nil, failure.Failf(failure.KindInternal, "config", "%s: a built-in configuration reads secret %s from a file", source, n)
		}
	}
	return planOf(cfg, workload, warn)
}

func planOf(cfg *config.Config, workload string, warn func(string)) (*Plan, error) {
	var err error
	if workload != "default" && workload != cfg.Workload {
		return nil, failure.Failf(failure.KindUsage, "config", "--workload %s disagrees with the config's workload %s", workload, cfg.Workload)
	}
	for _, w := range cfg.Warnings() {
		warn(w)
	}
	// An invalid policy refuses to start; no policy files: the built-in
	// permit-all, and the config's allow-lists decide alone.
	pol := policy.Default()
	if len(cfg.Policy) > 0 {
		if pol, err = policy.Load(cfg.Policy...); err != nil {
			return nil, failure.Fail(failure.KindPolicyRejected, "policy", err)
		}
	}
	cust, err := custody.Load(cfg.Secrets, os.Getenv)
	if err != nil {
		return nil, failure.Fail(failure.KindCustody, "custodian", err)
	}
	values := map[string][]byte{}
	for _, n := range cust.Names() {
		v, _ := cust.Secret(n)
		values[n] = v
	}
	return &Plan{cfg: cfg, secrets: values, policy: pol}, nil
}

// Apply fits spec to the plan: its workload is the config's, a
// configuration that would let a secret into the sandbox is refused, and
// the program is pointed at the gateway (its variables last, so they win
// over the caller's).
func (p *Plan) Apply(spec *sandbox.Spec) error {
	spec.Workload = p.cfg.Workload
	if err := p.CheckLeaks(*spec); err != nil {
		return err
	}
	spec.Env = append(spec.Env, gateway.Env()...)
	return nil
}

// CheckLeaks refuses a spec that would hand one of the plan's secrets to
// the program: a secret's file under a bind, the workspace, the rootfs or
// the base layout, or a secret's value in the environment. cordon run
// checks it in Apply; the daemon, which starts the gateway later, at
// create (its binds are descriptors: judged by the path the kernel has
// for each).
func (p *Plan) CheckLeaks(spec sandbox.Spec) error {
	if err := p.cfg.CheckLeaks(visibleInSandbox(spec), spec.Env, p.secrets); err != nil {
		return failure.Fail(failure.KindPolicyRejected, "config", err)
	}
	return nil
}

// EnvLeaks refuses environment entries ("K=V") that carry one of secrets'
// values: the daemon's exec --env, checked against the sandbox's
// custodied values as cordon run checks --env (CheckLeaks).
func EnvLeaks(env []string, secrets map[string][]byte) error {
	if err := (&config.Config{}).CheckLeaks(nil, env, secrets); err != nil {
		return failure.Fail(failure.KindPolicyRejected, "config", err)
	}
	return nil
}

// visibleInSandbox reports whether a host path can be seen from inside: it
// is under a bind source, the workspace, the rootfs or the base layout.
func visibleInSandbox(spec sandbox.Spec) func(string) bool {
	roots := []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc/ssl/certs", "/etc/ca-certificates", "/etc/alternatives", "/etc/ld.so.conf.d"}
	if spec.Workspace != "" {
		roots = append(roots, spec.Workspace)
	}
	if spec.Rootfs != "" {
		roots = append(roots, spec.Rootfs)
	}
	for _, f := range []*os.File{spec.WorkspaceFile, spec.RootfsFile} {
		if p, ok := fdPath(f); ok {
			roots = append(roots, p)
		}
	}
	for _, b := range spec.Binds {
		if p, ok := fdPath(b.File); ok {
			roots = append(roots, p)
		} else if b.Source != "" {
			roots = append(roots, b.Source)
		}
	}
	return func(p string) bool {
		p = filepath.Clean(p)
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		for _, r := range roots {
			r = filepath.Clean(r)
			if p == r || strings.HasPrefix(p, r+"/") {
				return true
			}
		}
		return false
	}
}

// fdPath is the host path the kernel has for a descriptor the caller
// opened (nothing is opened by it); ok is false without one.
func fdPath(f *os.File) (string, bool) {
	if f == nil {
		return "", false
	}
	p, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
	if err != nil || !filepath.IsAbs(p) {
		return "", false
	}
	return p, true
}

// start opens the gateway's listeners in the admitted sandbox and starts
// the unprivileged gateway process, with the tool servers' pipes.
func (p *Plan) start(sb sandbox.Sandbox, st *store.Store, log *slog.Logger, tools *toolServers, version string) (*gateway.Process, error) {
	c := p.cfg
	cc := gateway.ChildConfig{
		Identity: crossing.Identity{Workload: c.Workload, Tenant: c.Tenant, Purpose: c.Purpose, SandboxID: sb.ID()},
		Model:    c.ModelConfig(),
		Egress:   c.EgressConfig(),
		Tool:     c.ToolConfig(),
		Ingress:  c.IngressConfig(),
		Secrets:  map[string][]byte{},
		Version:  version,
	}
	for n, v := range p.secrets {
		cc.Secrets[n] = v
	}
	var pipes []gateway.ToolPipe
	if tools != nil {
		pipes, tools.pipes = tools.pipes, nil // the gateway process owns them now
	}
	// The workload's managed state: its retention applies to what is
	// stored before the program can read any of it.
	sp := statePolicyOf(c)
	if _, err := st.RetainState(context.Background(), gateway.StateScope(cc.Identity), sp.Retention); err != nil {
		for _, tp := range pipes {
			tp.In.Close()
			tp.Out.Close()
		}
		return nil, failure.Fail(failure.KindStore, "state retention", err)
	}
	return startGateway(sb, st, log, cc, p, c, pipes, p.lab, sp)
}

// toolOffer is the privileged side's view of the tool servers: each
// server's name and tool globs.
func toolOffer(ts []tool.ServerConfig) (servers map[string]bool, allow map[string][]string) {
	servers, allow = map[string]bool{}, map[string][]string{}
	for _, t := range ts {
		servers[t.Name], allow[t.Name] = true, t.Allow
	}
	return servers, allow
}

// statePolicyOf is the bounds of the workload's managed state.
func statePolicyOf(c *config.Config) *gateway.StatePolicy {
	return &gateway.StatePolicy{QuotaBytes: c.State.QuotaBytes, QuotaEntries: c.State.QuotaEntries,
		MaxValueBytes: c.State.MaxValueBytes, Retention: c.State.Retention}
}

// startGateway starts one sandbox's gateway process as the top uid of the
// sandbox's lease, in the sandbox's cgroups. state nil: the sandbox has no
// managed state (a tool server's gateway).
func startGateway(sb sandbox.Sandbox, st *store.Store, log *slog.Logger, cc gateway.ChildConfig, p *Plan, c *config.Config, pipes []gateway.ToolPipe, lab bool, state *gateway.StatePolicy) (*gateway.Process, error) {
	pid := sb.InitPid()
	if pid <= 0 {
		for _, tp := range pipes {
			tp.In.Close()
			tp.Out.Close()
		}
		return nil, failure.Failf(failure.KindStart, "gateway", "the sandbox has no live init")
	}
	// The gateway runs as the top uid of the sandbox's leased range: unique
	// to this sandbox, owning nothing, and no sandbox process runs as it
	// (the program is uid 1000 inside and cannot change uid).
	uid, gid, ok := sb.Lease().Top()
	if !ok {
		// Never a shared uid: a gateway without its own identity would
		// share it with every other such gateway.
		for _, tp := range pipes {
			tp.In.Close()
			tp.Out.Close()
		}
		return nil, failure.Failf(failure.KindStart, "gateway", "the sandbox has no leased identity for its gateway to run as")
	}
	adopt := sb.Adopt
	servers, allow := toolOffer(cc.Tool.Servers)
	budget := store.Budget{Limits: c.Budgets.Limits(), Streams: c.Budgets.ConcurrentStreams, Window: c.Budgets.Window}
	callLimit := c.Budgets.ToolCalls
	if lab {
		budget, callLimit = store.Budget{Window: c.Budgets.Window}, 0 // FULL_CONTROL_LAB: counted, not limited
	}
	proc, err := gateway.Start(gateway.StartOptions{
		SandboxPid: pid, Config: cc, Store: st, Logger: log, Stderr: p.stderr, UID: uid, GID: gid, Adopt: adopt,
		Budget: budget,
		Policy: p.policy, ConfigDigest: c.Digest,
		// A daemon client's own configuration may not point the
		// privileged side's dialer at the host's private services.
		CheckDeclaredAddrs: p.unprivileged,
		Tools: gateway.ToolPolicy{Servers: servers, Allow: allow, MaxArgumentBytes: int(c.Limits.MaxToolArgumentBytes),
			CallLimit: callLimit, Window: c.Budgets.Window, ApprovalTTL: c.Approvals.TTL, SkipApprovals: lab},
		ToolPipes: pipes,
		State:     state,
		Crossings: gateway.CrossingLimits{MaxReceipts: c.Crossings.MaxReceipts, Rate: float64(c.Crossings.Rate), Burst: c.Crossings.Burst},
		Trace:     p.trace,
	})
	if err != nil {
		return nil, failure.Fail(failure.KindStart, "gateway", fmt.Errorf("%w", err))
	}
	for name, addr := range proc.IngressAddrs() {
		log.Info("ingress route listening", "route", name, "listen", addr, "sandbox", sb.ID())
	}
	return proc, nil
}

// Detached is a gateway configuration as a daemon client sends it: the
// cordon/v1 YAML, its policy files' contents and the secret values the
// client resolved as the caller. Nothing in it is read from a path.
type Detached struct {
	Source   string
	Config   []byte
	Policies []policy.Source
	Secrets  map[string][]byte // nil: not sent (validation only)
	// Unprivileged: the client is not root. Its configuration may not
	// re-allow address ranges (egress.unsafe_allow_ranges), and the
	// destinations it declares for model routes and tool servers must
	// pass the egress address checks when dialled.
	Unprivileged bool
}

// firstUnprivilegedPort is the first host port a daemon client's ingress
// route may listen on: the kernel's default ip_unprivileged_port_start,
// fixed here so that a host setting never widens what a client may ask
// root to bind.
const firstUnprivilegedPort = 1024

// DetachedPlan parses a configuration a daemon client sent, without
// reading any path it names. host are the operator's host-wide policies,
// added to the sandbox's. lab (FULL_CONTROL_LAB) replaces the sandbox's
// own policy with permit-all; the host policies still apply.
func DetachedPlan(d Detached, host []policy.Source, lab bool) (*Plan, error) {
	cfg, err := config.ParseDetached(d.Config, d.Source)
	if err != nil {
		return nil, err
	}
	if d.Unprivileged {
		// Re-allowing loopback, private or metadata ranges is the host
		// operator's decision, never a daemon client's: not for the
		// sandbox's egress, nor for a tool server's.
		if len(cfg.Egress.UnsafeAllowRanges) > 0 {
			return nil, failure.Failf(failure.KindPolicyRejected, "gateway", "egress.unsafe_allow_ranges: only root may re-allow address ranges in a daemon sandbox's configuration")
		}
		for _, r := range cfg.Ingress {
			// A route reachable from the network is the host operator's
			// decision, never a daemon client's.
			if r.UnsafeListen || !r.Listen.Addr().IsLoopback() {
				return nil, failure.Failf(failure.KindPolicyRejected, "gateway", "ingress %s: unsafe_listen: only root may declare a route on a non-loopback address in a daemon sandbox's configuration", r.Name)
			}
			// The listener is opened by root: a client may not have it take
			// a port below 1024, which only root can bind and which local
			// programs trust as root's (a client could otherwise stand in
			// for the host's sshd, DNS or HTTPS on loopback). The default
			// listen, 127.0.0.1:<port>, passes: a route's sandbox port is
			// 1024 or more (config).
			if p := r.Listen.Port(); p != 0 && p < firstUnprivilegedPort {
				return nil, failure.Failf(failure.KindPolicyRejected, "gateway", "ingress %s: listen %s is a privileged port: only root may declare a route on a host port below %d in a daemon sandbox's configuration (listen on a port from %d on, or 0 for any free port)", r.Name, r.Listen, firstUnprivilegedPort, firstUnprivilegedPort)
			}
		}
		for _, t := range cfg.Tools {
			if len(t.Egress.UnsafeAllowRanges) > 0 {
				return nil, failure.Failf(failure.KindPolicyRejected, "gateway", "tool server %s: egress.unsafe_allow_ranges: only root may re-allow address ranges in a daemon sandbox's configuration", t.Name)
			}
		}
	}
	for _, t := range cfg.Tools {
		if len(t.Binds) > 0 {
			// The binds of a tool server are host paths in the
			// configuration: the daemon opens no path a caller names.
			return nil, fmt.Errorf("tool server %s: binds name host paths, which the daemon never opens for a caller (use cordon run, or a tool server without binds)", t.Name)
		}
	}
	for name := range cfg.Secrets {
		if _, ok := d.Secrets[name]; !ok && d.Secrets != nil {
			return nil, fmt.Errorf("secret %s: the client sent no value for it", name)
		}
	}
	if len(d.Policies) != len(cfg.Policy) {
		return nil, fmt.Errorf("the configuration names %d policy files, the client sent %d", len(cfg.Policy), len(d.Policies))
	}
	var srcs []policy.Source
	for i, p := range d.Policies {
		if p.Name != cfg.Policy[i] {
			return nil, fmt.Errorf("policy file %d: the client sent %s, the configuration names %s", i, p.Name, cfg.Policy[i])
		}
		srcs = append(srcs, p)
	}
	if lab {
		srcs = nil
	}
	secrets := d.Secrets
	if secrets == nil {
		secrets = map[string][]byte{}
	}
	p := &Plan{cfg: cfg, secrets: secrets, lab: lab, unprivileged: d.Unprivileged}
	if len(srcs) == 0 && len(host) == 0 {
		p.policy = policy.Default()
		return p, nil
	}
	if len(srcs) == 0 {
		srcs = append(srcs, policy.DefaultSource())
	}
	for _, h := range host {
		srcs = append(srcs, policy.Source{Name: "host/" + h.Name, Data: h.Data})
	}
	if p.policy, err = policy.LoadSources(srcs...); err != nil {
		return nil, err
	}
	return p, nil
}

// GatewayEnv is the variables that point a sandbox's programs at its
// gateway (the daemon adds them to every exec).
func GatewayEnv() []string { return gateway.Env() }

// AdmitConfig is what a gateway built from cfg would admit of r, by the
// configuration's checks alone (cordon policy explain).
func AdmitConfig(cfg *config.Config, r gateway.AdmitRequest) gateway.Admission {
	servers, allow := toolOffer(cfg.ToolConfig().Servers)
	return gateway.Admit(gateway.ChildConfig{Model: cfg.ModelConfig(), Egress: cfg.EgressConfig(), Ingress: cfg.IngressConfig()},
		&gateway.ToolPolicy{Servers: servers, Allow: allow}, statePolicyOf(cfg), r)
}
