package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/gateway/proc"
	"github.com/cordon-project/cordon/internal/policy"
	"github.com/cordon-project/cordon/internal/store"
)

// Argv0 makes the cordon binary act as the gateway process.
const Argv0 = proc.Argv0

// DefaultUID is the gateway's uid when no per-sandbox one is given:
// nobody. A per-sandbox uid (the top of the sandbox's leased range, which
// no sandbox process runs as) keeps gateways of different sandboxes from
// signalling each other.
const DefaultUID = 65534

// ToolPipe is the gateway's end of a stdio tool server: it writes
// requests to In and reads responses from Out.
type ToolPipe struct{ In, Out *os.File }

// StartOptions configure one sandbox's gateway.
type StartOptions struct {
	SandboxPid int // host pid of the sandbox init: its netns gets the listeners
	Config     ChildConfig
	Store      *store.Store
	Budget     store.Budget
	Logger     *slog.Logger
	Stderr     io.Writer
	// UID and GID the gateway process runs as; 0 means DefaultUID. Never
	// root, never a uid a sandbox process uses.
	UID, GID uint32
	// Adopt, when set, places the gateway process in the sandbox's
	// cgroups before it reads its configuration (so before any agent
	// traffic): the agent cannot make its gateway exhaust the host.
	Adopt func(pid int) error
	// Policy decides every crossing (nil: policy.Default()).
	Policy *policy.Set
	// Tools configures the tool broker's privileged side.
	Tools ToolPolicy
	// State bounds the sandbox's managed state (the state broker); nil
	// refuses every state operation.
	State *StatePolicy
	// ToolPipes are the pipes of the Stdio entries of Config.Tools, in
	// order; Start closes them in this process once handed over.
	ToolPipes []ToolPipe
	// Crossings bound the host work and store growth of the sandbox's
	// crossings (crossbudget.go); the zero value limits nothing.
	Crossings CrossingLimits
}

// readyTimeout bounds the gateway's start, including listing every tool
// server's tools.
const readyTimeout = proc.ReadyTimeout

// DefaultApprovalTTL is how long an approval request stays open.
const DefaultApprovalTTL = 15 * time.Minute

// Process is a running gateway.
type Process struct {
	cmd      *exec.Cmd
	channels []net.Conn // the authority channels, one per broker
	done     chan struct{}
	store    *store.Store
	id       crossing.Identity
	log      *slog.Logger

	srv      *Authority
	served   chan struct{} // closed when every authority channel was read to its end
	stopping atomic.Bool
	lostOnce sync.Once
	lost     atomic.Int64 // crossings charged as gateway_lost
}

// Start opens the listeners in the sandbox's namespace and starts the
// unprivileged gateway process that serves them.
func Start(o StartOptions) (*Process, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.UID == 0 || o.GID == 0 {
		o.UID, o.GID = DefaultUID, DefaultUID
	}
	// No earlier gateway of this sandbox is alive (one per sandbox, and a
	// restart stops the old one first): whatever it left open is lost.
	if o.Store != nil {
		lctx, cancel := context.WithTimeout(context.Background(), lostTimeout)
		lost, err := o.Store.ChargeReservations(lctx, o.Config.Identity.SandboxID, o.Budget, nil)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("charge the crossings an earlier gateway left open: %w", err)
		}
		if len(lost) > 0 {
			o.Logger.Warn("an earlier gateway of this sandbox left crossings open: charged in full", "sandbox", o.Config.Identity.SandboxID,
				"crossings", len(lost), "reason", store.ReasonGatewayLost)
		}
	}
	ports := map[string]int{"model": ModelPort, "egress": EgressPort, "tools": ToolsPort, "state": StatePort}
	o.Config.Listeners = []string{"model", "egress", "tools", "state"}
	var ps []int
	for _, n := range o.Config.Listeners {
		ps = append(ps, ports[n])
	}
	lfiles, err := ListenInNetns(o.SandboxPid, ps)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, f := range lfiles {
			f.Close()
		}
	}()
	// One authority channel per broker, each served bound to its broker.
	o.Config.Channels = Brokers
	conns, childEnds, err := channelPairs(len(o.Config.Channels))
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, f := range childEnds {
			f.Close()
		}
	}()
	closeConns := func() {
		for _, c := range conns {
			c.Close()
		}
	}
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		closeConns()
		return nil, err
	}
	defer cfgR.Close()
	stderr := o.Stderr
	if stderr == nil {
		stderr = os.Stderr
	}
	p := &Process{channels: conns, done: make(chan struct{}), store: o.Store, id: o.Config.Identity, log: o.Logger}
	extra := append(append([]*os.File{cfgR}, childEnds...), lfiles...)
	for _, tp := range o.ToolPipes {
		extra = append(extra, tp.In, tp.Out)
	}
	defer func() {
		for _, tp := range o.ToolPipes {
			tp.In.Close()
			tp.Out.Close()
		}
	}()
	p.cmd = &exec.Cmd{
		Path: "/proc/self/exe", Args: []string{Argv0}, Env: []string{},
		Stderr: stderr, ExtraFiles: extra,
		SysProcAttr: &syscall.SysProcAttr{
			Credential: &syscall.Credential{Uid: o.UID, Gid: o.GID, Groups: []uint32{}},
			Pdeathsig:  syscall.SIGKILL,
			Setsid:     true,
		},
	}
	started := make(chan error, 1)
	go func() {
		// The parent-death signal follows the thread that forked: keep it.
		runtime.LockOSThread()
		err := p.cmd.Start()
		started <- err
		if err == nil {
			_ = p.cmd.Wait()
		}
		close(p.done)
	}()
	if err := <-started; err != nil {
		cfgW.Close()
		closeConns()
		return nil, fmt.Errorf("start the gateway process: %w", err)
	}
	if o.Adopt != nil {
		if err := o.Adopt(p.cmd.Process.Pid); err != nil {
			cfgW.Close()
			p.Stop()
			return nil, fmt.Errorf("place the gateway in the sandbox's cgroups: %w", err)
		}
	}
	b, err := json.Marshal(o.Config)
	if err == nil {
		_, err = cfgW.Write(b)
	}
	cfgW.Close()
	if err != nil {
		p.Stop()
		return nil, fmt.Errorf("configure the gateway process: %w", err)
	}
	ready := make(chan struct{})
	tools := o.Tools
	if tools.Servers == nil {
		tools.Servers = map[string]bool{}
	}
	if tools.ApprovalTTL <= 0 {
		tools.ApprovalTTL = DefaultApprovalTTL
	}
	srv := &Authority{Store: o.Store, ID: o.Config.Identity, Budget: o.Budget, Logger: o.Logger, Ready: ready,
		Policy: o.Policy, Tools: &tools, State: o.State, Crossings: o.Crossings}
	if err := srv.initReceipts(context.Background()); err != nil {
		p.Stop()
		return nil, fmt.Errorf("count the sandbox's receipts: %w", err)
	}
	p.srv, p.served = srv, make(chan struct{})
	var serving sync.WaitGroup
	for i, conn := range conns {
		serving.Add(1)
		go func() {
			defer serving.Done()
			srv.Serve(conn, o.Config.Channels[i])
		}()
	}
	go func() {
		serving.Wait()
		close(p.served)
	}()
	go p.watch()
	// The program starts only once its way out is up: a gateway that failed
	// to start refuses the run rather than leaving it without a broker.
	select {
	case <-ready:
		return p, nil
	case <-p.done:
		p.Stop()
		return nil, errors.New("the gateway process exited before serving (see its error above)")
	case <-time.After(readyTimeout):
		p.Stop()
		return nil, fmt.Errorf("the gateway process did not become ready within %s (tool servers must answer initialize and tools/list by then)", readyTimeout)
	}
}

// Kill ends the gateway process at once (emergency stop): its listeners
// close with it. Stop still has to be called to release what it held.
func (p *Process) Kill() {
	p.stopping.Store(true) // an emergency stop, not a lost gateway
	if p.cmd.Process != nil {
		_ = p.cmd.Process.Kill()
	}
}

// Stop ends the gateway process (its listeners close with it) and
// charges in full, with a gateway_lost receipt, every crossing it still
// held open (lost.go).
func (p *Process) Stop() error {
	p.stopping.Store(true)
	if p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(2 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	p.settleLost()
	for _, c := range p.channels {
		c.Close()
	}
	var err error
	if p.store != nil {
		if p.srv != nil {
			p.srv.finishReceipts(context.Background())
		}
		err = p.store.ReleaseCrossings(context.Background(), p.id.SandboxID)
	}
	return err
}

// watch notices a gateway process that ended while nobody stopped it —
// killed by the OOM killer or anyone else, or crashed — and at once
// charges what it held open: its outcome was not observed.
func (p *Process) watch() {
	<-p.done
	if p.stopping.Load() {
		return
	}
	p.log.Error("the gateway process ended unexpectedly: the sandbox has no way out until it is stopped; its open crossings are charged in full",
		"sandbox", p.id.SandboxID, "state", p.cmd.ProcessState.String(), "reason", store.ReasonGatewayLost)
	p.settleLost()
}

// settleLost charges, once, what the ended gateway held open; the
// authority channels are read to their end first, so every settle it
// sent counts.
func (p *Process) settleLost() {
	p.lostOnce.Do(func() {
		if p.srv == nil || p.store == nil {
			return
		}
		select {
		case <-p.done:
		default:
			return // still running: nothing is lost (Stop kills it first)
		}
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

// Pid is the gateway process's host pid (0 before it started).
func (p *Process) Pid() int {
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Exited reports whether the gateway process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
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
