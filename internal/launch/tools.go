package launch

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/cordon-project/cordon/internal/broker/model"
	"github.com/cordon-project/cordon/internal/config"
	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/gateway"
	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/store"
	"github.com/cordon-project/cordon/internal/textsafe"
	"github.com/cordon-project/cordon/internal/trapscan"
)

// toolServers are the contained upstream MCP servers of one run: each in
// its own sandbox on its own lease, with only the binds it declares, and
// — when it declares egress — its own gateway. They speak MCP over their
// stdin and stdout, which are pipes to the agent's gateway process.
type toolServers struct {
	sbs   []sandbox.Sandbox
	gws   []*gateway.Process
	pipes []gateway.ToolPipe
}

// startTools starts every command tool server of the plan, admitted at
// DEDICATED_CONTAINER like any sandbox. On error, whatever started is
// stopped and deprovisioned (in the daemon a tool server's sandbox
// outlives the request: one left behind would run on, leased, with no
// record that reaches it).
func (p *Plan) startTools(ctx context.Context, prov sandbox.Provider, st *store.Store, log *slog.Logger, stderr io.Writer) (*toolServers, error) {
	ts := &toolServers{}
	for _, t := range p.cfg.Tools {
		if len(t.Command) == 0 {
			continue
		}
		if err := ts.start(ctx, p, t, prov, st, log, stderr); err != nil {
			ts.stop(context.WithoutCancel(ctx))
			return nil, failure.Fail(failure.KindOf(err), "tool server "+t.Name, err)
		}
	}
	return ts, nil
}

func (ts *toolServers) start(ctx context.Context, p *Plan, t config.Tool, prov sandbox.Provider, st *store.Store, log *slog.Logger, stderr io.Writer) error {
	env := []string{}
	for _, k := range sortedKeys(t.Env) {
		env = append(env, k+"="+t.Env[k])
	}
	for _, k := range sortedKeys(t.SecretEnv) {
		v, ok := p.secrets[t.SecretEnv[k]]
		if !ok {
			return failure.Failf(failure.KindCustody, "custodian", "secret %q is not custodied", t.SecretEnv[k])
		}
		env = append(env, k+"="+string(v))
	}
	if len(t.Egress.Allow) > 0 {
		env = append(env, gateway.Env()...)
	}
	inR, inW, err := os.Pipe() // gateway → server's stdin
	if err != nil {
		return err
	}
	outR, outW, err := os.Pipe() // server's stdout → gateway
	if err != nil {
		inR.Close()
		inW.Close()
		return err
	}
	closeAll := func() {
		for _, f := range []*os.File{inR, inW, outR, outW} {
			f.Close()
		}
	}
	spec := sandbox.Spec{
		Workload: p.cfg.Workload, Argv: t.Command, Env: env, Level: sandbox.DedicatedContainer,
		Limits: sandbox.Limits{MemoryBytes: t.Memory},
		Stdin:  inR, Stdout: outW, Stderr: toolStderr(stderr, t.Name),
	}
	for _, b := range t.Binds {
		spec.Binds = append(spec.Binds, sandbox.Bind{Source: b.Source, Target: b.Target, Writable: b.Writable})
	}
	sb, err := prov.Provision(ctx, spec)
	if err != nil {
		closeAll()
		return err
	}
	ts.sbs = append(ts.sbs, sb)
	adm, err := sb.Start(ctx)
	inR.Close()
	outW.Close()
	if err == nil {
		_, err = Admit(adm, sandbox.DedicatedContainer)
	}
	if err == nil && len(t.Egress.Allow) > 0 {
		var gw *gateway.Process
		gw, err = p.startToolGateway(sb, st, log, t)
		if gw != nil {
			ts.gws = append(ts.gws, gw)
		}
	}
	if err == nil {
		err = sb.Exec(ctx)
	}
	if err != nil {
		inW.Close()
		outR.Close()
		return err
	}
	ts.pipes = append(ts.pipes, gateway.ToolPipe{In: inW, Out: outR})
	return nil
}

// startToolGateway gives a tool server its own gateway: egress only, on
// the server's own allow-list, under the workload's policy and budgets.
func (p *Plan) startToolGateway(sb sandbox.Sandbox, st *store.Store, log *slog.Logger, t config.Tool) (*gateway.Process, error) {
	c := p.cfg
	cc := gateway.ChildConfig{
		Identity: crossing.Identity{Workload: c.Workload, Tenant: c.Tenant, Purpose: c.Purpose, SandboxID: sb.ID()},
		Model:    model.Config{Limits: model.Limits{MaxRequestBytes: 1, MaxResponseBytes: 1, MaxConcurrentStreams: 1}},
		Egress:   t.Egress.BrokerConfig(),
		Secrets:  map[string][]byte{},
	}
	return startGateway(sb, st, log, cc, p, c, nil, false, nil) // no managed state for a tool server
}

// haltAndScan ends every tool server's processes, keeping its sandbox
// (and bind descriptors) until stop, and reports what each left in its
// writable binds that can trap a host user: a tool server writes there for
// the agent. A server that does not stop is reported as not scanned.
func (ts *toolServers) haltAndScan(ctx context.Context) []trapscan.Report {
	if ts == nil {
		return nil
	}
	var out []trapscan.Report
	for _, sb := range ts.sbs {
		if err := sb.Stop(ctx); err != nil {
			out = append(out, trapscan.Report{Root: "tool server " + sb.ID(), Traps: []trapscan.Trap{},
				Truncated: fmt.Sprintf("not scanned: the tool server did not stop: %v", err)})
			continue
		}
		out = append(out, sb.ScanTraps()...)
	}
	return out
}

// stop ends every tool server and its gateway, and releases their leases.
func (ts *toolServers) stop(ctx context.Context) {
	if ts == nil {
		return
	}
	for _, tp := range ts.pipes {
		tp.In.Close()
		tp.Out.Close()
	}
	var wg sync.WaitGroup
	for _, sb := range ts.sbs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = sb.Stop(ctx)
			_ = sb.Deprovision(ctx)
		}()
	}
	wg.Wait()
	for _, gw := range ts.gws {
		_ = gw.Stop()
	}
}

// prefixWriter prefixes each line a tool server writes to stderr.
// toolStderr is where a tool server's stderr goes: w, escaped, each line
// prefixed with the server's name.
func toolStderr(w io.Writer, name string) io.Writer {
	return &prefixWriter{w: textsafe.NewWriter(w), prefix: "tool " + name + ": "}
}

// prefixWriter marks each line a tool server writes to its stderr with the
// server's name. The server is an upstream: its bytes reach the operator's
// terminal only through textsafe (w is a textsafe.Writer).
type prefixWriter struct {
	mu     sync.Mutex
	w      io.Writer
	prefix string
	mid    bool
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var sb strings.Builder
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if line == "" {
			continue
		}
		if !p.mid {
			sb.WriteString(p.prefix)
		}
		sb.WriteString(line)
		p.mid = !strings.HasSuffix(line, "\n")
	}
	if _, err := io.WriteString(p.w, sb.String()); err != nil {
		return 0, err
	}
	return len(b), nil
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
