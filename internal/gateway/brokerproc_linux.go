package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/cordon-project/cordon/internal/broker/egress"
	"github.com/cordon-project/cordon/internal/broker/ingress"
	"github.com/cordon-project/cordon/internal/broker/model"
	"github.com/cordon-project/cordon/internal/broker/state"
	"github.com/cordon-project/cordon/internal/broker/tool"
	"github.com/cordon-project/cordon/internal/gateway/dial"
	"github.com/cordon-project/cordon/internal/gateway/proc"
	"golang.org/x/sys/unix"
)

// brokerSpec is one broker process to start: its listener, its own
// configuration (with only the secrets its broker names) and what the
// checked dialer may reach for it.
type brokerSpec struct {
	broker string // model.Name, egress.Name, tool.Name, state.Name
	port   int
	lfile  *os.File // its listener, opened in the sandbox's netns
	// lfiles are the ingress broker's listeners instead (one per route,
	// opened on the host: ingress_linux.go); port is then 0.
	lfiles []*os.File
	// socket, when set, makes the sockets its dialer connects (the
	// ingress broker's: inside the sandbox's netns); else the socket source.
	socket func(ctx context.Context, v6 bool) (int, error)
	cfg    proc.Config
	policy dial.Policy
	pipes  []ToolPipe // the tool broker's stdio servers
}

// brokerSpecs splits the gateway's configuration into one per broker
// process (contract section 5: a broker's credentials exist only in the
// process that needs them).
func brokerSpecs(o StartOptions) ([]brokerSpec, error) {
	c := o.Config
	base := func(broker, listener string) proc.Config {
		return proc.Config{Identity: c.Identity, Version: c.Version, Broker: broker, Channels: []string{broker}, Listeners: []string{listener}}
	}
	var modelDests, modelSecrets []string
	for _, r := range c.Model.Routes {
		hp, err := hostPort(r.Upstream)
		if err != nil {
			return nil, fmt.Errorf("model route %s: %w", r.Name, err)
		}
		modelDests, modelSecrets = append(modelDests, hp), append(modelSecrets, r.Credential)
	}
	var toolDests, toolSecrets []string
	for _, s := range c.Tool.Servers {
		if s.URL == "" {
			continue
		}
		hp, err := hostPort(s.URL)
		if err != nil {
			return nil, fmt.Errorf("tool server %s: %w", s.Name, err)
		}
		toolDests = append(toolDests, hp)
		if s.Credential != "" {
			toolSecrets = append(toolSecrets, s.Credential)
		}
	}
	dests, err := egress.NewDestinations(c.Egress.Allow, c.Egress.UnsafeAllowRanges, c.Egress.Resolve, nil)
	if err != nil {
		return nil, err
	}
	modelPolicy, toolPolicy := dial.NewFixed(model.Name, modelDests, nil), dial.NewFixed(tool.Name, toolDests, nil)
	if o.CheckDeclaredAddrs {
		// The egress checks with nothing re-allowed: the declared model
		// and tool destinations may not be the host's own services.
		strict, err := egress.NewDestinations(nil, nil, nil, nil)
		if err != nil {
			return nil, err
		}
		modelPolicy.CheckAddrs(strict.Addr)
		toolPolicy.CheckAddrs(strict.Addr)
	}
	// Secrets no broker uses as a credential (a stdio tool server's
	// secret_env, one declared and unused) are nobody's way to an
	// upstream. A stdio server's secret_env values go to the tool broker
	// alone (it relays that server's output and redacts them); secrets
	// declared and used by nothing go to both redacting brokers.
	used := map[string]bool{}
	for _, n := range append(append([]string{}, modelSecrets...), toolSecrets...) {
		used[n] = true
	}
	for _, s := range c.Tool.Servers {
		for _, n := range s.SecretEnv {
			toolSecrets, used[n] = append(toolSecrets, n), true
		}
	}
	var others []string
	for n := range c.Secrets {
		if !used[n] {
			others = append(others, n)
		}
	}
	modelSecrets, toolSecrets = append(modelSecrets, others...), append(toolSecrets, others...)
	mc := base(model.Name, "model")
	mc.Model, mc.Secrets = c.Model, pick(c.Secrets, modelSecrets)
	ec := base(egress.Name, "egress")
	// The process resolves nothing itself: the privileged side's dialer
	// holds the static answers (and checks them).
	ec.Egress = c.Egress
	ec.Egress.Resolve = nil
	tc := base(tool.Name, "tools")
	tc.Tool, tc.Secrets = c.Tool, pick(c.Secrets, toolSecrets)
	sc := base(state.Name, "state")
	specs := []brokerSpec{
		{broker: model.Name, port: ModelPort, cfg: mc, policy: modelPolicy},
		{broker: egress.Name, port: EgressPort, cfg: ec, policy: dial.NewEgress(dests)},
		{broker: tool.Name, port: ToolsPort, cfg: tc, policy: toolPolicy, pipes: o.ToolPipes},
		{broker: state.Name, port: StatePort, cfg: sc, policy: dial.None{Broker: state.Name}},
	}
	if rs := c.Ingress.Routes; len(rs) > 0 {
		// Only when routes are declared: no process, no listener, nothing
		// reaches in otherwise. No secret: it relays bytes only.
		ic := base(ingress.Name, "")
		ic.Ingress, ic.Listeners = c.Ingress, nil
		for _, r := range rs {
			ic.Listeners = append(ic.Listeners, r.Name)
		}
		specs = append(specs, brokerSpec{broker: ingress.Name, cfg: ic, policy: newIngressDial(rs, newIngressGate(rs))})
	}
	return specs, nil
}

// hostPort is an http(s) URL's host:port, the scheme's port when none.
func hostPort(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	port := u.Port()
	if port == "" {
		switch u.Scheme {
		case "http":
			port = "80"
		case "https":
			port = "443"
		default:
			return "", fmt.Errorf("%q: not an http(s) URL", raw)
		}
	}
	return net.JoinHostPort(u.Hostname(), port), nil
}

// pick is the subset of secrets named.
func pick(all map[string][]byte, names []string) map[string][]byte {
	out := map[string][]byte{}
	for _, n := range names {
		if v, ok := all[n]; ok {
			out[n] = v
		}
	}
	return out
}

// brokerProc is one running broker process and the root side's ends of
// its channels.
type brokerProc struct {
	name    string
	cmd     *exec.Cmd
	done    chan struct{}
	channel net.Conn // authority channel
	dialer  net.Conn // checked-dialer channel
	cfgW    *os.File
}

// spawnBroker starts one broker process: the cordon binary re-executed
// as Argv0 with the broker's name, as the gateway uid, in a fresh and
// empty network namespace (CLONE_NEWNET: nothing to route to, not even
// the host's loopback), in its own session, killed when cordon dies. It
// gets its config pipe, its authority channel, its dialer channel, its
// listener and (tool broker only) the stdio tool servers' pipes; the
// root side serves its dialer channel with its policy.
func spawnBroker(ctx context.Context, o StartOptions, s *brokerSpec, src *socketSource) (*brokerProc, error) {
	conns, childEnds, err := channelPairs(2)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, f := range childEnds {
			f.Close()
		}
	}()
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		conns[0].Close()
		conns[1].Close()
		return nil, err
	}
	defer cfgR.Close()
	bp := &brokerProc{name: s.broker, done: make(chan struct{}), channel: conns[0], dialer: conns[1], cfgW: cfgW}
	extra := []*os.File{cfgR, childEnds[0], childEnds[1]}
	if s.lfile != nil {
		extra = append(extra, s.lfile)
	}
	extra = append(extra, s.lfiles...)
	for _, tp := range s.pipes {
		extra = append(extra, tp.In, tp.Out)
	}
	if err := bp.start(o, extra, true); err != nil {
		bp.close()
		return nil, err
	}
	socket := src.socket
	if s.socket != nil {
		socket = s.socket
	}
	srv := &dial.Server{Broker: s.broker, Policy: s.policy, Logger: o.Logger, Socket: socket}
	go srv.Serve(ctx, bp.dialer.(*net.UnixConn))
	return bp, nil
}

// start starts the process: the cordon binary re-executed as Argv0 with
// its name, as the gateway uid, in its own session, killed when cordon
// dies, with extra as descriptors 3 on; newNet clones it into a fresh
// network namespace.
func (b *brokerProc) start(o StartOptions, extra []*os.File, newNet bool) error {
	stderr := o.Stderr
	if stderr == nil {
		stderr = os.Stderr
	}
	attr := &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: o.UID, Gid: o.GID, Groups: []uint32{}},
		Pdeathsig:  syscall.SIGKILL,
		Setsid:     true,
	}
	if newNet {
		attr.Cloneflags = syscall.CLONE_NEWNET
	}
	b.cmd = &exec.Cmd{Path: "/proc/self/exe", Args: []string{Argv0, b.name}, Env: []string{}, Stderr: stderr, ExtraFiles: extra, SysProcAttr: attr}
	started := make(chan error, 1)
	go func() {
		// The parent-death signal follows the thread that forked: keep it.
		runtime.LockOSThread()
		err := b.cmd.Start()
		started <- err
		if err == nil {
			_ = b.cmd.Wait()
		}
		close(b.done)
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("start the %s gateway process: %w", b.name, err)
	}
	return nil
}

// socketSource is the privileged side's end of the sandbox's socket
// source (proc.SocketSource): a process in the host's network namespace
// and the gateway's cgroups that creates the unconnected TCP sockets the
// checked dialer connects, so that their memory is the gateway group's.
type socketSource struct {
	mu   sync.Mutex
	conn *net.UnixConn
}

// spawnSource starts the socket source (no new network namespace: its
// sockets are the host's).
func spawnSource(o StartOptions) (*brokerProc, *socketSource, error) {
	conns, childEnds, err := channelPairs(1)
	if err != nil {
		return nil, nil, err
	}
	defer childEnds[0].Close()
	bp := &brokerProc{name: proc.SocketSource, done: make(chan struct{}), channel: conns[0]}
	if err := bp.start(o, []*os.File{childEnds[0]}, false); err != nil {
		bp.close()
		return nil, nil, err
	}
	return bp, &socketSource{conn: conns[0].(*net.UnixConn)}, nil
}

// socket asks the source for one unconnected TCP socket, which the
// caller then owns.
func (s *socketSource) socket(ctx context.Context, v6 bool) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	req := byte(proc.SourceTCP4)
	if v6 {
		req = proc.SourceTCP6
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(dial.DefaultTimeout)
	}
	s.conn.SetDeadline(deadline)
	if _, _, err := s.conn.WriteMsgUnix([]byte{req}, nil, nil); err != nil {
		return -1, fmt.Errorf("socket source: %w", err)
	}
	buf, oob := make([]byte, 1), make([]byte, unix.CmsgSpace(4*4))
	n, oobn, _, _, err := s.conn.ReadMsgUnix(buf, oob)
	if err != nil {
		return -1, fmt.Errorf("socket source: %w", err)
	}
	var fds []int
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for _, m := range msgs {
			if f, err := unix.ParseUnixRights(&m); err == nil {
				fds = append(fds, f...)
			}
		}
	}
	if n != 1 || buf[0] != 1 || len(fds) != 1 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return -1, errors.New("socket source: no socket")
	}
	// Only a TCP socket of the asked family, unconnected, is accepted.
	dom, err1 := unix.GetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_DOMAIN)
	typ, err2 := unix.GetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_TYPE)
	_, perr := unix.Getpeername(fds[0])
	want := unix.AF_INET
	if v6 {
		want = unix.AF_INET6
	}
	if err1 != nil || err2 != nil || dom != want || typ != unix.SOCK_STREAM || perr == nil {
		unix.Close(fds[0])
		return -1, errors.New("socket source: not an unconnected TCP socket")
	}
	return fds[0], nil
}

// configure writes the process's configuration and closes the pipe.
func (b *brokerProc) configure(s brokerSpec, pids map[string]int) error {
	cfg := s.cfg
	cfg.Test = compromiseFor(s.broker, pids)
	buf, err := json.Marshal(cfg)
	if err == nil {
		_, err = b.cfgW.Write(buf)
	}
	b.cfgW.Close()
	return err
}

func (b *brokerProc) pid() int {
	if b.cmd == nil || b.cmd.Process == nil {
		return 0
	}
	return b.cmd.Process.Pid
}

func (b *brokerProc) kill() {
	if b.cmd != nil && b.cmd.Process != nil {
		_ = b.cmd.Process.Kill()
	}
}

func (b *brokerProc) signal(sig os.Signal) {
	if b.cmd != nil && b.cmd.Process != nil {
		_ = b.cmd.Process.Signal(sig)
	}
}

func (b *brokerProc) exited() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

func (b *brokerProc) state() string {
	if b.cmd == nil || b.cmd.ProcessState == nil {
		return "unknown"
	}
	return b.cmd.ProcessState.String()
}

// close closes the root side's ends of the process's channels.
func (b *brokerProc) close() {
	if b.cfgW != nil {
		b.cfgW.Close()
	}
	if b.channel != nil {
		b.channel.Close()
	}
	if b.dialer != nil {
		b.dialer.Close()
	}
}
