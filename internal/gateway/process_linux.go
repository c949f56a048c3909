package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/broker/ingress"
	"github.com/cordon-project/cordon/internal/broker/model"
	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/gateway/proc"
	"github.com/cordon-project/cordon/internal/policy"
	"github.com/cordon-project/cordon/internal/store"
	"github.com/cordon-project/cordon/internal/telemetry"
)

// Argv0 makes the cordon binary act as a broker process; its first
// argument names the broker.
const Argv0 = proc.Argv0

// ToolPipe is the tool broker process's end of a stdio tool server: it
// writes requests to In and reads responses from Out.
type ToolPipe struct{ In, Out *os.File }

// StartOptions configure one sandbox's gateway.
type StartOptions struct {
	SandboxPid int // host pid of the sandbox init: its netns gets the listeners
	Config     ChildConfig
	Store      *store.Store
	Budget     store.Budget
	Logger     *slog.Logger
	Stderr     io.Writer
	// UID and GID the broker processes run as: the sandbox's own (the top
	// of its lease); 0 is refused, never replaced by a shared uid. Never
	// root, never a uid a sandbox process uses.
	UID, GID uint32
	// Adopt, when set, places each broker process in the sandbox's
	// cgroups before it reads its configuration (so before any agent
	// traffic): the agent cannot make its gateway exhaust the host.
	Adopt func(pid int) error
	// Policy decides every crossing (nil: policy.Default()).
	Policy *policy.Set
	// ConfigDigest is the configuration's digest, stamped on receipts.
	ConfigDigest string
	// Tools configures the tool broker's privileged side.
	Tools ToolPolicy
	// State bounds the sandbox's managed state (the state broker); nil
	// refuses every state operation.
	State *StatePolicy
	// ToolPipes are the pipes of the Stdio entries of the tool servers,
	// in order; Start hands them to the tool broker process alone and
	// closes them here.
	ToolPipes []ToolPipe
	// Crossings bound the host work and store growth of the sandbox's
	// crossings (crossbudget.go); the zero value limits nothing.
	Crossings CrossingLimits
	// Trace is the sandbox session's trace (Authority.Trace); nil: none.
	Trace *telemetry.Session
	// CheckDeclaredAddrs holds the model routes' and remote tool servers'
	// declared destinations to the egress broker's address checks when
	// the checked dialer resolves them (a configuration from a daemon
	// client other than root: it may not reach the host's loopback,
	// private or metadata services by declaring them).
	CheckDeclaredAddrs bool
}

// readyTimeout bounds the gateway's start, including listing every tool
// server's tools.
const readyTimeout = proc.ReadyTimeout

// DefaultApprovalTTL is how long an approval request stays open.
const DefaultApprovalTTL = 15 * time.Minute

// Process is a sandbox's running gateway: one unprivileged process per
// broker (brokerproc_linux.go), each with its own listener, authority
// channel, dialer channel and secrets.
type Process struct {
	procs   []*brokerProc
	done    chan struct{} // closed when every broker process has ended
	anyDone chan struct{} // closed when the first one ended
	store   *store.Store
	id      crossing.Identity
	log     *slog.Logger
	cancel  context.CancelFunc // ends the dialer servers
	// netns holds the sandbox's network namespace for the ingress
	// dialer (nil without routes); ingress are the routes' bound host
	// addresses, by route name.
	netns   *sandboxNetns
	ingress map[string]string
	// gate grants the ingress dialer one dial per connection the
	// authority admits (ingress_gate.go); nil without routes.
	gate *ingressGate

	srv      *Authority
	served   chan struct{} // closed when every authority channel was read to its end
	stopping atomic.Bool
	lostOnce sync.Once
	lost     atomic.Int64 // crossings charged as gateway_lost
}

// Start opens the listeners in the sandbox's namespace and starts the
// unprivileged broker processes that serve them. The sandbox may start
// only once Start returns: every broker process then serves; if any fails
// to start, Start fails (the sandbox gets no partial way out).
func Start(o StartOptions) (*Process, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	// The pipes are this call's to close, whatever happens below: the
	// tool broker process holds its own copies once started.
	defer func() {
		for _, tp := range o.ToolPipes {
			tp.In.Close()
			tp.Out.Close()
		}
	}()
	if o.UID == 0 || o.GID == 0 {
		// A gateway without the sandbox's own identity would share one
		// with every other such gateway (signals, /proc): refuse.
		return nil, errors.New("gateway: no uid and gid of the sandbox's own to run the broker processes as")
	}
	if err := chargeEarlier(o); err != nil {
		return nil, err
	}
	specs, err := brokerSpecs(o)
	if err != nil {
		return nil, err
	}
	lfiles, ns, ingressAddrs, err := openListeners(o, specs)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, f := range lfiles {
			f.Close()
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	p := &Process{done: make(chan struct{}), anyDone: make(chan struct{}), store: o.Store, id: o.Config.Identity, log: o.Logger, cancel: cancel,
		netns: ns, ingress: ingressAddrs}
	for _, s := range specs {
		if d, ok := s.policy.(ingressDial); ok {
			p.gate = d.gate
		}
	}
	sp, src, err := spawnSource(o)
	if err != nil {
		cancel()
		ns.close()
		return nil, err
	}
	p.procs = append(p.procs, sp)
	if err := p.adopt(o, sp); err != nil {
		p.abort()
		return nil, err
	}
	for i := range specs {
		bp, err := spawnBroker(ctx, o, &specs[i], src)
		if err != nil {
			p.abort()
			return nil, err
		}
		p.procs = append(p.procs, bp)
		if err := p.adopt(o, bp); err != nil {
			p.abort()
			return nil, err
		}
	}
	go p.collect()
	if err := p.configure(o, specs); err != nil {
		p.Stop()
		return nil, err
	}
	return p, p.serve(o)
}

// openListeners opens each broker's listener inside the sandbox and, when
// routes are declared, the ingress routes' listeners on the host; it sets
// them in specs and returns every file (the caller closes them once the
// processes hold their copies), the sandbox's netns for the ingress
// dialer and the routes' bound addresses.
func openListeners(o StartOptions, specs []brokerSpec) ([]*os.File, *sandboxNetns, map[string]string, error) {
	var ports []int
	for _, s := range specs {
		if s.port > 0 {
			ports = append(ports, s.port)
		}
	}
	lfiles, err := ListenInNetns(o.SandboxPid, ports)
	if err != nil {
		return nil, nil, nil, err
	}
	j := 0
	for i := range specs {
		if specs[i].port > 0 {
			specs[i].lfile = lfiles[j]
			j++
		}
	}
	closeAll := func() {
		for _, f := range lfiles {
			f.Close()
		}
	}
	var ns *sandboxNetns
	addrs := map[string]string{}
	for i := range specs {
		if specs[i].broker != ingress.Name {
			continue
		}
		routes := specs[i].cfg.Ingress.Routes
		files, bound, err := listenIngress(routes)
		if err != nil {
			closeAll()
			return nil, nil, nil, err
		}
		lfiles = append(lfiles, files...)
		if ns, err = openSandboxNetns(o.SandboxPid); err != nil {
			closeAll()
			return nil, nil, nil, err
		}
		specs[i].lfiles, specs[i].socket = files, ns.socket
		for k, r := range routes {
			addrs[r.Name] = bound[k]
		}
	}
	return lfiles, ns, addrs, nil
}

// IngressAddrs are the declared inbound routes' host addresses, by route
// name, as bound (a listen port 0 resolved).
func (p *Process) IngressAddrs() map[string]string {
	out := make(map[string]string, len(p.ingress))
	for k, v := range p.ingress {
		out[k] = v
	}
	return out
}

// chargeEarlier charges what an earlier gateway of this sandbox left
// open: none is alive (one per sandbox, and a restart stops the old one
// first).
func chargeEarlier(o StartOptions) error {
	if o.Store == nil {
		return nil
	}
	lctx, cancel := context.WithTimeout(context.Background(), lostTimeout)
	lost, err := o.Store.ChargeReservations(lctx, o.Config.Identity.SandboxID, o.Budget, nil)
	cancel()
	if err != nil {
		return fmt.Errorf("charge the crossings an earlier gateway left open: %w", err)
	}
	if len(lost) > 0 {
		o.Logger.Warn("an earlier gateway of this sandbox left crossings open: charged in full", "sandbox", o.Config.Identity.SandboxID,
			"crossings", len(lost), "reason", store.ReasonGatewayLost)
	}
	return nil
}

// adopt places a gateway process in the sandbox's cgroups at once, before
// it reads its configuration (so before any agent traffic).
func (p *Process) adopt(o StartOptions, bp *brokerProc) error {
	if o.Adopt == nil {
		return nil
	}
	if err := o.Adopt(bp.pid()); err != nil {
		return fmt.Errorf("place the %s gateway process in the sandbox's cgroups: %w", bp.name, err)
	}
	return nil
}

// configure writes each broker process its configuration, once all are
// started (the test hook's configuration names its siblings' pids).
func (p *Process) configure(o StartOptions, specs []brokerSpec) error {
	pids := p.Pids()
	for _, s := range specs {
		for _, bp := range p.procs {
			if bp.name != s.broker {
				continue
			}
			if err := bp.configure(s, pids); err != nil {
				return fmt.Errorf("configure the %s broker process: %w", bp.name, err)
			}
		}
	}
	return nil
}

// serve starts answering every broker process's authority channel and
// waits until all of them report they serve.
func (p *Process) serve(o StartOptions) error {
	ready := make(chan struct{})
	tools := o.Tools
	if tools.Servers == nil {
		tools.Servers = map[string]bool{}
	}
	if tools.ApprovalTTL <= 0 {
		tools.ApprovalTTL = DefaultApprovalTTL
	}
	want := 0
	for _, bp := range p.procs {
		if bp.name != proc.SocketSource {
			want++
		}
	}
	srv := &Authority{Store: o.Store, ID: o.Config.Identity, Budget: o.Budget, Logger: o.Logger, Ready: ready, ReadyWant: want,
		Policy: o.Policy, ConfigDigest: o.ConfigDigest, Tools: &tools, State: o.State, Crossings: o.Crossings, ingress: p.gate, Trace: o.Trace}
	if err := srv.initReceipts(context.Background()); err != nil {
		p.Stop()
		return fmt.Errorf("count the sandbox's receipts: %w", err)
	}
	p.srv, p.served = srv, make(chan struct{})
	var serving sync.WaitGroup
	for _, bp := range p.procs {
		if bp.name == proc.SocketSource {
			continue // its channel is the dialer's, not an authority channel
		}
		serving.Add(1)
		go func() {
			defer serving.Done()
			srv.Serve(bp.channel, bp.name)
		}()
	}
	go func() {
		serving.Wait()
		close(p.served)
	}()
	go p.watch()
	// The program starts only once its way out is up: a broker process
	// that failed to start refuses the run rather than leaving it without
	// a broker.
	select {
	case <-ready:
		return nil
	case <-p.anyDone:
		p.Stop()
		return errors.New("a broker process exited before serving (see its error above)")
	case <-time.After(readyTimeout):
		p.Stop()
		return fmt.Errorf("the broker processes did not become ready within %s (tool servers must answer initialize and tools/list by then)", readyTimeout)
	}
}

// collect closes anyDone when the first broker process ends and done
// when the last one has.
func (p *Process) collect() {
	var once sync.Once
	var wg sync.WaitGroup
	for _, bp := range p.procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-bp.done
			once.Do(func() { close(p.anyDone) })
		}()
	}
	wg.Wait()
	close(p.done)
}

// abort ends the processes started so far, when Start fails before
// collect runs.
func (p *Process) abort() {
	p.stopping.Store(true)
	for _, bp := range p.procs {
		bp.kill()
		<-bp.done
		bp.close()
	}
	p.cancel()
	p.netns.close()
}

// Kill ends every broker process at once (emergency stop): the listeners
// close with them. Stop still has to be called to release what they held.
func (p *Process) Kill() {
	p.stopping.Store(true) // an emergency stop, not a lost gateway
	for _, bp := range p.procs {
		bp.kill()
	}
}

// Stop ends the broker processes (their listeners close with them) and
// charges in full, with a gateway_lost receipt, every crossing they still
// held open (lost.go).
func (p *Process) Stop() error {
	p.stopping.Store(true)
	for _, bp := range p.procs {
		bp.signal(syscall.SIGTERM)
	}
	select {
	case <-p.done:
	case <-time.After(2 * time.Second):
		p.Kill()
		<-p.done
	}
	p.settleLost()
	p.cancel()
	for _, bp := range p.procs {
		bp.close()
	}
	p.netns.close()
	var err error
	if p.store != nil {
		if p.srv != nil {
			p.srv.finishReceipts(context.Background())
		}
		err = p.store.ReleaseCrossings(context.Background(), p.id.SandboxID)
	}
	return err
}

// watch notices a broker process that ended while nobody stopped it —
// killed by the OOM killer or anyone else, or crashed — ends the others
// (the sandbox's way out is one unit: a gateway with a broker missing is
// lost) and at once charges what they held open: its outcome was not
// observed.
func (p *Process) watch() {
	<-p.anyDone
	if p.stopping.Load() {
		return
	}
	var ended []string
	for _, bp := range p.procs {
		if bp.exited() {
			ended = append(ended, bp.name+" ("+bp.state()+")")
		}
		bp.kill()
	}
	<-p.done
	p.log.Error("a broker process ended unexpectedly: the sandbox has no way out until it is stopped; its open crossings are charged in full",
		"sandbox", p.id.SandboxID, "ended", strings.Join(ended, ", "), "reason", store.ReasonGatewayLost)
	p.settleLost()
}

// settleLost charges, once, what the ended gateway held open; the
// authority channels are read to their end first, so every settle they
// sent counts.
func (p *Process) settleLost() {
	p.lostOnce.Do(func() {
		if p.srv == nil || p.store == nil {
			return
		}
		select {
		case <-p.anyDone:
		default:
			return // still running: nothing is lost (Stop kills it first)
		}
		// One ended: the others are being ended (watch, Stop).
		<-p.done
		select {
		case <-p.served:
		case <-time.After(5 * time.Second):
			p.log.Warn("the gateway's authority channels did not drain; charging what it held")
		}
		ctx, cancel := context.WithTimeout(context.Background(), lostTimeout)
		defer cancel()
		lost, err := p.srv.chargeLost(ctx)
		p.lost.Store(int64(len(lost)))
		if err != nil {
			p.log.Error("charge the gateway's open crossings", "sandbox", p.id.SandboxID, "err", err)
		} else if len(lost) > 0 {
			p.log.Warn("crossings the gateway left open were charged in full", "sandbox", p.id.SandboxID, "crossings", len(lost),
				"reason", store.ReasonGatewayLost)
		}
	})
}

// Pid is the model broker process's host pid (0 before it started); see
// Pids for every gateway process.
func (p *Process) Pid() int {
	for _, bp := range p.procs {
		if bp.name == model.Name {
			return bp.pid()
		}
	}
	return 0
}

// Pids are the gateway processes' host pids, by broker (and
// proc.SocketSource for the socket source).
func (p *Process) Pids() map[string]int {
	m := make(map[string]int, len(p.procs))
	for _, bp := range p.procs {
		m[bp.name] = bp.pid()
	}
	return m
}

// Exited reports whether the gateway has ended: a broker process ended
// (the others are ended with it).
func (p *Process) Exited() bool {
	select {
	case <-p.anyDone:
		return true
	default:
		return false
	}
}

// Lost is how many crossings were charged in full because the gateway
// ended before settling them.
func (p *Process) Lost() int64 {
	if p.Exited() {
		p.settleLost() // waits for the charge if it is under way
	}
	return p.lost.Load()
}

// channelPairs makes n SOCK_SEQPACKET socketpairs: the root side's ends as
// connections, the gateway process's ends as files to hand over.
func channelPairs(n int) ([]net.Conn, []*os.File, error) {
	var conns []net.Conn
	var files []*os.File
	fail := func(err error) ([]net.Conn, []*os.File, error) {
		for _, c := range conns {
			c.Close()
		}
		for _, f := range files {
			f.Close()
		}
		return nil, nil, err
	}
	for i := 0; i < n; i++ {
		pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fail(err)
		}
		parentEnd := os.NewFile(uintptr(pair[0]), "authority")
		files = append(files, os.NewFile(uintptr(pair[1]), "authority-child"))
		conn, err := net.FileConn(parentEnd)
		parentEnd.Close()
		if err != nil {
			return fail(err)
		}
		conns = append(conns, conn)
	}
	return conns, files, nil
}
