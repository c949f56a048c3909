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
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/store"
)

// Argv0 makes the cordon binary act as the gateway process.
const Argv0 = "cordon-gateway"

// DefaultUID is the gateway's uid when no per-sandbox one is given:
// nobody. A per-sandbox uid (the top of the sandbox's leased range, which
// no sandbox process runs as) keeps gateways of different sandboxes from
// signalling each other.
const DefaultUID = 65534

// Fixed descriptors in the gateway process.
const (
	configFD    = 3 // pipe: one JSON ChildConfig, then EOF
	ledgerFD    = 4 // SOCK_SEQPACKET to the ledger server
	firstListen = 5 // the listeners, in ChildConfig.Listeners order
)

// Route is a model route as the gateway process receives it.
type Route struct {
	Name       string   `json:"name"`
	API        string   `json:"api"`
	Upstream   string   `json:"upstream"`
	Credential string   `json:"credential"`
	Models     []string `json:"models"`
}

// ModelLimits bound model requests and responses.
type ModelLimits struct {
	MaxRequestBytes      int64    `json:"max_request_bytes"`
	MaxResponseBytes     int64    `json:"max_response_bytes"`
	MaxAttachments       int      `json:"max_attachments"`
	MaxAttachmentBytes   int64    `json:"max_attachment_bytes"`
	AllowedMIME          []string `json:"allowed_mime"`
	MaxConcurrentStreams int64    `json:"max_concurrent_streams"`
}

// EgressRule is one allowed host with its ports.
type EgressRule struct {
	Host  string `json:"host"`
	Ports []int  `json:"ports"`
}

// Egress is the egress broker's configuration.
type Egress struct {
	Allow             []EgressRule        `json:"allow"`
	UnsafeAllowRanges []string            `json:"unsafe_allow_ranges"`
	Resolve           map[string][]string `json:"resolve"`
}

// ChildConfig is everything the gateway process needs, sent on a pipe
// (never argv or the environment: it carries the custodied secrets).
type ChildConfig struct {
	Identity  crossing.Identity `json:"identity"`
	Routes    []Route           `json:"routes"`
	Limits    ModelLimits       `json:"limits"`
	Egress    Egress            `json:"egress"`
	Secrets   map[string][]byte `json:"secrets"`
	Listeners []string          `json:"listeners"` // "model", "egress"
}

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
}

// Process is a running gateway.
type Process struct {
	cmd    *exec.Cmd
	ledger net.Conn
	done   chan struct{}
	store  *store.Store
	id     crossing.Identity
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
	ports := map[string]int{"model": ModelPort, "egress": EgressPort}
	o.Config.Listeners = []string{"model", "egress"}
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
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	parentEnd := os.NewFile(uintptr(pair[0]), "ledger")
	childEnd := os.NewFile(uintptr(pair[1]), "ledger-child")
	defer childEnd.Close()
	ledgerConn, err := net.FileConn(parentEnd)
	parentEnd.Close()
	if err != nil {
		return nil, err
	}
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		ledgerConn.Close()
		return nil, err
	}
	defer cfgR.Close()
	stderr := o.Stderr
	if stderr == nil {
		stderr = os.Stderr
	}
	p := &Process{ledger: ledgerConn, done: make(chan struct{}), store: o.Store, id: o.Config.Identity}
	p.cmd = &exec.Cmd{
		Path: "/proc/self/exe", Args: []string{Argv0}, Env: []string{},
		Stderr: stderr, ExtraFiles: append([]*os.File{cfgR, childEnd}, lfiles...),
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
		ledgerConn.Close()
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
	srv := &LedgerServer{Store: o.Store, ID: o.Config.Identity, Budget: o.Budget, Logger: o.Logger, Ready: ready}
	go srv.Serve(ledgerConn)
	// The program starts only once its way out is up: a gateway that failed
	// to start refuses the run rather than leaving it without a broker.
	select {
	case <-ready:
		return p, nil
	case <-p.done:
		p.Stop()
		return nil, errors.New("the gateway process exited before serving (see its error above)")
	case <-time.After(10 * time.Second):
		p.Stop()
		return nil, errors.New("the gateway process did not become ready within 10s")
	}
}

// Stop ends the gateway process (its listeners close with it) and drops
// any budget it still held.
func (p *Process) Stop() error {
	if p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(2 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	p.ledger.Close()
	var err error
	if p.store != nil {
		err = p.store.DropReservations(context.Background(), p.id.SandboxID)
	}
	return err
}
