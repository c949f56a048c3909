package cli

import (
	"context"
	"fmt"
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
)

// gatewayPlan is a loaded configuration with its custodian, ready to start
// a gateway once the sandbox is admitted.
type gatewayPlan struct {
	cfg     *config.Config
	secrets map[string][]byte // the custodied values, by name
	policy  *policy.Set
	// lab: FULL_CONTROL_LAB (daemon sandboxes): no approval waits, no
	// budget limits (policy is already permit-all).
	lab bool
}

// prepareGateway loads --config and the custodian, refuses a configuration
// that would let a secret into the sandbox, and points the program at the
// gateway. It returns nil without --config.
func (g *globals) prepareGateway(f *runFlags, spec *sandbox.Spec) (*gatewayPlan, error) {
	if f.config == "" {
		return nil, nil
	}
	cfg, err := config.Load(f.config)
	if err != nil {
		return nil, failure.Fail(failure.KindUsage, "config", err)
	}
	if f.workload != "default" && f.workload != cfg.Workload {
		return nil, failure.Failf(failure.KindUsage, "config", "--workload %s disagrees with the config's workload %s", f.workload, cfg.Workload)
	}
	spec.Workload = cfg.Workload
	for _, w := range cfg.Warnings() {
		g.logger().Warn(w)
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
	if err := cfg.CheckLeaks(visibleInSandbox(*spec), spec.Env, values); err != nil {
		return nil, failure.Fail(failure.KindPolicyRejected, "config", err)
	}
	// The gateway's variables come last so they win over --env.
	spec.Env = append(spec.Env, gateway.Env()...)
	return &gatewayPlan{cfg: cfg, secrets: values, policy: pol}, nil
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
	for _, b := range spec.Binds {
		roots = append(roots, b.Source)
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

// start opens the gateway's listeners in the admitted sandbox and starts
// the unprivileged gateway process, with the tool servers' pipes.
func (p *gatewayPlan) start(sb sandbox.Sandbox, st *store.Store, log *slog.Logger, tools *toolServers) (*gateway.Process, error) {
	c := p.cfg
	cc := gateway.ChildConfig{
		Identity: crossing.Identity{Workload: c.Workload, Tenant: c.Tenant, Purpose: c.Purpose, SandboxID: sb.ID()},
		Model:    c.ModelConfig(),
		Egress:   c.EgressConfig(),
		Tool:     c.ToolConfig(),
		Secrets:  map[string][]byte{},
		Version:  Version,
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
	return startGateway(sb, st, log, cc, p.policy, c, pipes, p.lab, sp)
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
func startGateway(sb sandbox.Sandbox, st *store.Store, log *slog.Logger, cc gateway.ChildConfig, pol *policy.Set, c *config.Config, pipes []gateway.ToolPipe, lab bool, state *gateway.StatePolicy) (*gateway.Process, error) {
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
	var uid, gid uint32
	if l, ok := sb.(interface{ Lease() store.Lease }); ok {
		uid, gid = l.Lease().UID+l.Lease().Size-1, l.Lease().GID+l.Lease().Size-1
	}
	var adopt func(int) error
	if a, ok := sb.(interface{ Adopt(int) error }); ok {
		adopt = a.Adopt
	}
	servers, allow := toolOffer(cc.Tool.Servers)
	budget := store.Budget{Limits: c.Budgets.Limits(), Streams: c.Budgets.ConcurrentStreams, Window: c.Budgets.Window}
	callLimit := c.Budgets.ToolCalls
	if lab {
		budget, callLimit = store.Budget{Window: c.Budgets.Window}, 0 // FULL_CONTROL_LAB: counted, not limited
	}
	proc, err := gateway.Start(gateway.StartOptions{
		SandboxPid: pid, Config: cc, Store: st, Logger: log, UID: uid, GID: gid, Adopt: adopt,
		Budget: budget,
		Policy: pol,
		Tools: gateway.ToolPolicy{Servers: servers, Allow: allow, MaxArgumentBytes: int(c.Limits.MaxToolArgumentBytes),
			CallLimit: callLimit, Window: c.Budgets.Window, ApprovalTTL: c.Approvals.TTL, SkipApprovals: lab},
		ToolPipes: pipes,
		State:     state,
		Crossings: gateway.CrossingLimits{MaxReceipts: c.Crossings.MaxReceipts, Rate: float64(c.Crossings.Rate), Burst: c.Crossings.Burst},
	})
	if err != nil {
		return nil, failure.Fail(failure.KindStart, "gateway", fmt.Errorf("%w", err))
	}
	return proc, nil
}
