package launch

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/cordon-project/cordon/internal/evidence"
	"github.com/cordon-project/cordon/internal/evlog"
	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/gateway"
	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/store"
	"github.com/cordon-project/cordon/internal/telemetry"
	"github.com/cordon-project/cordon/internal/trapscan"
)

// Host is what a lifecycle runs on: the provider (reached only through
// the seam), the store and the trusted side's logging.
type Host struct {
	Provider sandbox.Provider
	Store    *store.Store
	StateDir string
	Logger   *slog.Logger
	// Version is cordon's version, told to the gateway process.
	Version string
	// ToolStderr gets the tool servers' stderr, escaped and prefixed
	// with each server's name; nil discards it.
	ToolStderr io.Writer
	// GatewayStderr gets the gateway's broker processes' stderr (where
	// they log their decisions); nil is cordon's own stderr.
	GatewayStderr io.Writer
	// CheckpointEvery, when > 0, runs the evidence log's checkpointer
	// while a gateway is up (cordon run: receipts are leaves of the log).
	CheckpointEvery time.Duration
	// Telemetry makes each session's trace (internal/telemetry); nil
	// exports nothing, and receipts still carry trace and span ids.
	Telemetry *telemetry.Provider
}

func (h *Host) logger() *slog.Logger {
	if h.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return h.Logger
}

// Launch is one sandbox going through the lifecycle: Provision, Start
// (admit from evidence, then its gateway), Exec, Wait, Close.
type Launch struct {
	host *Host
	spec sandbox.Spec
	plan *Plan // nil: no way out
	sb   sandbox.Sandbox

	// Record is the evidence record Start read (nil before Start, or if
	// the provider failed before collecting evidence).
	Record *evidence.Record
	// Level is the admitted level (after Start).
	Level sandbox.Level

	gw *Gateway
	// trace is the session's trace: from Provision to Close.
	trace *telemetry.Session
}

// Provision validates spec, selects the provider (fail closed: a
// provider whose probed capability is below spec.Level is never used),
// fits spec to plan (nil: no gateway) and provisions. Nothing is created
// on the host unless every check passed. Close the Launch.
func Provision(ctx context.Context, h *Host, spec sandbox.Spec, plan *Plan) (*Launch, error) {
	if err := Validate(&spec); err != nil {
		return nil, err
	}
	if err := selectProvider(ctx, h.Provider, spec.Level); err != nil {
		return nil, err
	}
	if plan != nil {
		if err := plan.Apply(&spec); err != nil {
			return nil, err
		}
	}
	tr := h.Telemetry.NewSession(ctx, plan.identity(""))
	done := tr.Phase(telemetry.SpanProvision)
	sb, err := h.Provider.Provision(ctx, spec)
	done(err)
	if err != nil {
		tr.End(err)
		return nil, err
	}
	tr.SetIdentity(plan.identity(sb.ID()))
	if plan != nil {
		tr.Redact(plan.secretValues())
		plan.trace = tr
	}
	return &Launch{host: h, spec: spec, plan: plan, sb: sb, trace: tr}, nil
}

// Resume is a Launch for a sandbox provisioned elsewhere (the daemon's,
// created by an earlier request or re-attached after a restart).
func Resume(h *Host, spec sandbox.Spec, plan *Plan, sb sandbox.Sandbox) *Launch {
	return &Launch{host: h, spec: spec, plan: plan, sb: sb}
}

// selectProvider probes the provider and selects it only if it can
// evidence want on this host.
func selectProvider(ctx context.Context, p sandbox.Provider, want sandbox.Level) error {
	capab, err := p.Probe(ctx)
	if err != nil {
		return err
	}
	if _, err := sandbox.Select(want, []sandbox.Candidate{{Provider: p, Capability: capab}}); err != nil {
		why := strings.Join(capab.Missing, "; ")
		if why == "" {
			why = "its provider " + capab.Provider + " reaches " + capab.MaxLevel.String()
		}
		return failure.Failf(failure.KindUnsupported, "select provider", "this host cannot build the boundary for %s: missing %s", want, why)
	}
	return nil
}

// Sandbox is the provisioned sandbox.
func (l *Launch) Sandbox() sandbox.Sandbox { return l.sb }

// Spec is the spec as provisioned (with the gateway's variables).
func (l *Launch) Spec() sandbox.Spec { return l.spec }

// Start builds the boundary and admits the sandbox from the evidence
// (Admit). mark, when set, may amend the record before admission (the
// daemon's FULL_CONTROL_LAB marks the bypassed controls) and enforce
// false admits whatever the evidence shows (FULL_CONTROL_LAB: the risk
// was accepted); Record is set either way.
func (l *Launch) Start(ctx context.Context, mark func(*evidence.Record), enforce bool) error {
	done := l.trace.Phase(telemetry.SpanStart)
	adm, err := l.sb.Start(ctx)
	done(err)
	l.Record = adm.Record
	if l.Record != nil {
		l.Record.LevelRequested = l.spec.Level
		if mark != nil {
			mark(l.Record)
			adm.Level = min(adm.Level, l.Record.LevelAdmitted)
		}
	}
	if err != nil {
		return err
	}
	done = l.trace.Phase(telemetry.SpanAdmission)
	l.Level, err = Admit(adm, l.spec.Level)
	done(err)
	if err != nil && enforce {
		return err
	}
	return nil
}

// Admit is the one admission rule, for every sandbox cordon starts
// (cordon run's, the daemon's, tool servers'): the level admitted is the
// one the evidence record supports — the record's LevelAdmitted, computed
// by the trusted side from what it read, never the provider's summary
// when the two disagree — and below want the sandbox is refused
// (evidence_insufficient). No record, no evidence: refused.
func Admit(adm sandbox.Admission, want sandbox.Level) (sandbox.Level, error) {
	if adm.Record == nil {
		return sandbox.LevelUnknown, failure.Failf(failure.KindEvidence, "admission", "the provider returned no evidence record; nothing is admitted without evidence")
	}
	got := min(adm.Record.LevelAdmitted, adm.Level)
	if got < want {
		var unverified []string
		for _, name := range evidence.Boundaries() {
			if b := adm.Record.Boundaries[name]; !b.Verified {
				unverified = append(unverified, name+" ("+failedFacts(b)+")")
			}
		}
		return got, failure.Failf(failure.KindEvidence, "admission",
			"the evidence supports %s, below the requested %s; unverified boundaries: %s (see --evidence for all the facts); the program was not started",
			got, want, strings.Join(unverified, ", "))
	}
	return got, nil
}

// failedFacts names the checks that left b unverified, each with what it
// wanted and what it read, so a refusal is diagnosable from the error
// alone.
func failedFacts(b evidence.Boundary) string {
	var out []string
	for _, c := range b.Facts {
		if !c.OK {
			out = append(out, fmt.Sprintf("%s: want %q, got %q", c.Name, c.Want, c.Got))
		}
	}
	if len(out) == 0 {
		return "no facts"
	}
	return strings.Join(out, "; ")
}

// StartGateway starts the sandbox's gateway (and its tool servers) from
// the plan, once the sandbox is admitted. Without a plan it does nothing.
func (l *Launch) StartGateway(ctx context.Context) error {
	if l.plan == nil {
		return nil
	}
	done := l.trace.Phase(telemetry.SpanGateway)
	gw, err := StartGateway(ctx, l.host, l.sb, l.plan)
	done(err)
	if err != nil {
		return err
	}
	l.gw = gw
	return nil
}

// Gateway is the running gateway (nil without a plan or before
// StartGateway).
func (l *Launch) Gateway() *Gateway { return l.gw }

// Exec runs the program.
func (l *Launch) Exec(ctx context.Context) error { return l.sb.Exec(ctx) }

// Wait waits for the program to end.
func (l *Launch) Wait(ctx context.Context) (sandbox.Exit, error) { return l.sb.Wait(ctx) }

// ScanTraps reports what the program (and the tool servers, stopped
// first: nothing writes after the scan) left in their writable binds that
// can trap a host user. Call it once the program has ended.
func (l *Launch) ScanTraps(ctx context.Context) []trapscan.Report {
	out := l.sb.ScanTraps()
	if l.gw != nil {
		out = append(out, l.gw.tools.haltAndScan(ctx)...)
	}
	return out
}

// Close stops the gateway and its tool servers and deprovisions the
// sandbox. Idempotent.
func (l *Launch) Close(ctx context.Context) {
	if l.gw != nil {
		l.gw.Stop()
		l.gw = nil
	}
	_ = l.sb.Deprovision(ctx)
	l.trace.End(nil) // flushes within telemetry.ExportTimeout
}

// TraceID is the session's trace id ("" when there is none).
func (l *Launch) TraceID() string { return l.trace.TraceID() }

// Gateway is a sandbox's running way out: the gateway process, the tool
// servers it speaks to, and the evidence log's checkpointer.
type Gateway struct {
	Proc  *gateway.Process
	tools *toolServers
	// stopLog stops the checkpointer after a final checkpoint; nil: none.
	stopLog func()
	// trace is a session this gateway began (a daemon sandbox's, whose
	// gateway starts apart from its Launch) and ends at Stop; nil: the
	// Launch's.
	trace *telemetry.Session
}

// StartGateway starts sb's gateway from plan: the evidence log's
// checkpointer (Host.CheckpointEvery), the tool servers, each in its own
// sandbox admitted by the same rule, then the gateway process. On error
// whatever started is stopped.
func StartGateway(ctx context.Context, h *Host, sb sandbox.Sandbox, plan *Plan) (*Gateway, error) {
	if _, _, ok := sb.Lease().Top(); !ok {
		// Checked first, before anything starts: see startGateway.
		return nil, failure.Failf(failure.KindStart, "gateway", "the sandbox has no leased identity for its gateway to run as")
	}
	gw := &Gateway{}
	if plan.trace == nil || plan.traceByGateway {
		// A daemon sandbox: its session's trace runs from its gateway's
		// start to its stop (a new one at each start).
		gw.trace = h.Telemetry.NewSession(ctx, plan.identity(sb.ID()))
		gw.trace.Redact(plan.secretValues())
		plan.trace, plan.traceByGateway = gw.trace, true
	}
	if h.CheckpointEvery > 0 {
		// Receipts are leaves of the evidence log; it signs a checkpoint
		// every few seconds and once more after the gateway has stopped
		// (Stop). No log, no crossings.
		el, err := evlog.Open(h.Store, h.StateDir)
		if err != nil {
			return nil, failure.Fail(failure.KindStore, "evidence log", err)
		}
		// The cheap check (O(log n) stored hashes, no receipt bodies):
		// the latest checkpoint still matches the log; a run never adds
		// to a log whose signed tree was changed.
		if err := el.CheckLatest(ctx); err != nil {
			return nil, failure.Fail(failure.KindStore, "evidence log",
				fmt.Errorf("%w; run 'cordon evidence verify' to see what changed", err))
		}
		el.Logger = h.logger()
		cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan error, 1)
		go func() { done <- el.RunCheckpointer(cctx, h.CheckpointEvery) }()
		gw.stopLog = func() {
			cancel()
			if err := <-done; err != nil {
				h.logger().Error("evidence log: final checkpoint", "err", err)
			}
		}
	}
	stderr := h.ToolStderr
	if stderr == nil {
		stderr = io.Discard
	}
	// On error, stop what started (the checkpointer, the tool servers)
	// here: a deferred stop of a named result would see it nil.
	var err error
	plan.stderr = h.GatewayStderr
	if gw.tools, err = plan.startTools(ctx, h.Provider, h.Store, h.logger(), stderr); err != nil {
		gw.Stop()
		return nil, err
	}
	if gw.Proc, err = plan.start(sb, h.Store, h.logger(), gw.tools, h.Version); err != nil {
		gw.Stop()
		return nil, err
	}
	return gw, nil
}

// Stop stops the gateway process, then the tool servers, then signs the
// final checkpoint. It always returns nil (hostmgr.Gateway).
func (g *Gateway) Stop() error {
	if g == nil {
		return nil
	}
	if g.Proc != nil {
		_ = g.Proc.Stop()
		g.Proc = nil
	}
	g.tools.stop(context.Background())
	g.tools = nil
	if g.stopLog != nil {
		g.stopLog()
		g.stopLog = nil
	}
	g.trace.End(nil)
	return nil
}

// Kill ends the gateway process at once (emergency stop); Stop still
// follows.
func (g *Gateway) Kill() {
	if g != nil && g.Proc != nil {
		g.Proc.Kill()
	}
}
