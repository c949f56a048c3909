package hostmgr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/hostmgr/proto"
	"github.com/cordon-project/cordon/internal/launch"
	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/store"
	"github.com/cordon-project/cordon/internal/telemetry"
	"github.com/cordon-project/cordon/internal/trapscan"
)

// DefaultSocket is where the daemon listens.
const DefaultSocket = "/run/cordon/cordon.sock"

// Options configure a Daemon.
type Options struct {
	// Telemetry exports the sandboxes' traces (internal/telemetry); nil:
	// receipts carry trace ids, nothing is exported.
	Telemetry *telemetry.Provider
	StateDir  string
	Socket    string // default DefaultSocket
	// Group, when >= 0, is the gid whose members may connect (socket mode
	// 0660); otherwise only root (0600).
	Group int
	Store *store.Store
	// Provider builds the daemon's sandboxes; it is resident (the native
	// Linux provider in daemon mode, or a test's fake).
	Provider sandbox.Resident
	// Version is cordon's version, told to gateway processes.
	Version string
	Logger  *slog.Logger
	// RuntimeDigest is the running cordon binary's digest; Executable the
	// path it was started from (its on-disk digest is watched for drift).
	RuntimeDigest string
	Executable    string
	// PolicyDir holds host-wide Cedar policies added to every sandbox's
	// set ("" none); BaseManifest the files whose digest identifies the
	// default base rootfs (default: the package database).
	PolicyDir    string
	BaseManifest []string
	// VolumeDir holds named volumes (default DefaultVolumeDir); never
	// under StateDir.
	VolumeDir string
	// Tenants grants non-root users tenants beyond their own "u<uid>".
	Tenants map[uint32][]string
	// MaxPerUser bounds a non-root user's sandboxes (default 64).
	MaxPerUser int
	// DriftEvery is how often drift is checked (default 10s).
	DriftEvery time.Duration
	// CrashAt, in test builds, names a point where the daemon SIGKILLs
	// itself (crash-recovery tests); empty otherwise.
	CrashAt string
	// Lifecycle, when set, is told each create, start and stop the
	// daemon carries out and its error (nil: done) — the metrics' hook.
	Lifecycle func(op string, err error)
	// Notifier tells a service manager the daemon is ready (nil: none).
	Notifier *Notifier
	// BuildVersion is cordon's version as the health operation reports it.
	BuildVersion string
}

// Gateway is a running gateway.
type Gateway interface {
	Stop() error
	// Kill ends it at once (emergency stop).
	Kill()
}

// Daemon is the host manager.
type Daemon struct {
	o   Options
	log *slog.Logger
	// launchHost is what the lifecycle (package launch) runs on.
	launchHost *launch.Host

	mu    sync.Mutex
	boxes map[string]*box // by name
	// quotaMu makes a create's quota check and its record one step.
	quotaMu sync.Mutex
	// hostPolicy is the host policy directory's content and digest as
	// last read.
	hostPolicy []PolicySource
	// refusedPolicy is the error of the last host policy set refused by a
	// drift scan (logged once per content).
	refusedPolicy string
	// refusedReload is the error of the last host policy set a SIGHUP
	// reload refused (health); cleared, like refusedPolicy, when a set
	// loads.
	refusedReload string
	// host are the host identities as last read (drift).
	host hostIDs
	// started is when New returned; lastDrift when a drift scan last
	// finished (health).
	started   time.Time
	lastDrift atomic.Int64 // unix nanoseconds; 0: none yet
	// ready is closed once the daemon serves (Ready).
	ready chan struct{}
}

// box is one sandbox the daemon holds in memory.
type box struct {
	mu   sync.Mutex // serializes lifecycle operations on this sandbox
	rec  store.DaemonSandbox
	spec Spec
	sb   sandbox.Sandbox
	gw   Gateway
	// log is the main program's output file, held from create to start.
	log     *os.File
	profile Profile
	// policyDigest is the sandbox's policy digest as computed when the host
	// policy digest was policyHost (drift).
	policyDigest, policyHost string
	// execs are the exec'd processes being watched (signal), by pid.
	execMu sync.Mutex
	execs  map[int]sandbox.Process
	// traps is the workspace trap scan taken when the sandbox stopped.
	traps []trapscan.Report
}

// New checks the options and returns a daemon; Run serves.
func New(o Options) (*Daemon, error) {
	if o.Store == nil || o.Provider == nil {
		return nil, errors.New("hostmgr: store and provider are required")
	}
	if o.Socket == "" {
		o.Socket = DefaultSocket
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.DriftEvery <= 0 {
		o.DriftEvery = 10 * time.Second
	}
	if o.MaxPerUser <= 0 {
		o.MaxPerUser = 64
	}
	if o.VolumeDir == "" {
		o.VolumeDir = DefaultVolumeDir
	}
	if len(o.BaseManifest) == 0 {
		o.BaseManifest = []string{"/var/lib/dpkg/status"}
	}
	for _, d := range []string{logDir(o.StateDir), secretDir(o.StateDir)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	// Root reads back and appends to files in these by name (logs, time
	// indexes, gateway secrets): no one else may plant a link there.
	for _, d := range []string{o.StateDir, logDir(o.StateDir), secretDir(o.StateDir)} {
		stat := os.Lstat
		if d == o.StateDir {
			stat = os.Stat // the state directory itself may be a symlink
		}
		fi, err := stat(d)
		if err != nil {
			return nil, err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !fi.IsDir() || !ok || int(st.Uid) != os.Geteuid() || fi.Mode().Perm()&0o022 != 0 {
			return nil, fmt.Errorf("hostmgr: %s must be a directory owned by uid %d and writable by no one else (mode %v)", d, os.Geteuid(), fi.Mode())
		}
	}
	lh := &launch.Host{Provider: o.Provider, Store: o.Store, StateDir: o.StateDir, Logger: o.Logger, Version: o.Version, Telemetry: o.Telemetry,
		GatewayStderr: newBrokerLog(o.Logger)} // brokerlog.go: never the daemon's raw stderr
	return &Daemon{o: o, log: o.Logger.With("component", "daemon"), boxes: map[string]*box{}, launchHost: lh, started: time.Now(), ready: make(chan struct{})}, nil
}

func logDir(state string) string    { return filepath.Join(state, "logs") }
func secretDir(state string) string { return filepath.Join(state, "gateway-secrets") }

// Run reconciles, then serves until ctx ends. The sandboxes keep running
// when it returns (daemon-owned sandboxes have no parent-death signal).
func (d *Daemon) Run(ctx context.Context) error {
	hp, err := d.loadHostPolicy()
	if err != nil {
		return err
	}
	d.setHostPolicy(hp)
	d.refreshHost()
	rep := d.reconcile(ctx)
	d.log.Info("reconciled", "adopted", len(rep.Adopted), "removed", len(rep.Removed), "stopped", len(rep.Stopped), "unattributed", len(rep.Unattributed))
	for _, u := range rep.Unattributed {
		d.log.Warn("residue cordon cannot attribute to a record", "what", u)
	}
	if d.o.Group >= 0 {
		// Group members must reach the socket: its directory (e.g.
		// /run/cordon, otherwise 0700) becomes traversable, never listable
		// or writable.
		dir := filepath.Dir(d.o.Socket)
		if err := os.MkdirAll(dir, 0o711); err != nil {
			return err
		}
		if fi, err := os.Stat(dir); err == nil && fi.Mode().Perm()&0o011 != 0o011 {
			if err := os.Chmod(dir, fi.Mode().Perm()|0o011); err != nil {
				return err
			}
		}
	}
	l, err := proto.Listen(d.o.Socket, 0, d.o.Group) // 0600 root, 0660 root:group
	if err != nil {
		return err
	}
	defer l.Close()
	l.Logger = d.log
	go d.watchDrift(ctx)
	// Ready: the socket accepts (a connect succeeds from here on, served
	// once Serve runs) and reconciliation is done.
	d.log.Info("serving", "socket", d.o.Socket, "pid", os.Getpid(), "version", proto.Version, "policy_dir", d.o.PolicyDir)
	d.log.Info("ready", "adopted", len(rep.Adopted), "notify", d.o.Notifier != nil)
	d.o.Notifier.Ready(fmt.Sprintf("serving on %s; %d sandboxes adopted", d.o.Socket, len(rep.Adopted)))
	close(d.ready)
	return l.Serve(ctx, d.handle)
}

// lifecycle tells Options.Lifecycle an operation's outcome.
func (d *Daemon) lifecycle(op string, err error) {
	if d.o.Lifecycle != nil {
		d.o.Lifecycle(op, err)
	}
}

// Ready is closed once the daemon serves: its socket accepts and
// reconciliation is done (READY=1 was sent).
func (d *Daemon) Ready() <-chan struct{} { return d.ready }

// crash SIGKILLs the daemon at a named point (test builds only).
func (d *Daemon) crash(point string) {
	if d.o.CrashAt != "" && d.o.CrashAt == point {
		d.log.Warn("test hook: crashing", "point", point)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		time.Sleep(time.Hour)
	}
}

// handle authorises and dispatches one request.
func (d *Daemon) handle(ctx context.Context, peer proto.Peer, req proto.Request, files []*os.File, reply func(proto.Response) error) error {
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	d.log.Debug("request", "op", req.Op, "uid", peer.UID, "pid", peer.PID, "files", len(files))
	op, ok := ops[req.Op]
	if !ok {
		closeAll()
		return proto.Errorf(proto.KindBadRequest, "unknown operation %q (this daemon speaks %s)", req.Op, proto.Version)
	}
	if op.rootOnly && peer.UID != 0 {
		closeAll()
		return proto.Errorf(proto.KindUnauthorized, "%s needs root (you are uid %d)", req.Op, peer.UID)
	}
	if len(files) > op.files {
		closeAll()
		return proto.Errorf(proto.KindBadRequest, "%s takes at most %d descriptors, got %d", req.Op, op.files, len(files))
	}
	c := &call{d: d, peer: peer, req: req, files: files, reply: reply}
	result, err := op.fn(d, ctx, c)
	closeAll()
	if err != nil {
		return toProto(err)
	}
	b, err := json.Marshal(result)
	if err != nil {
		return proto.Errorf(proto.KindInternal, "encode result: %v", err)
	}
	return reply(proto.Response{Version: proto.Version, ID: req.ID, Final: true, Result: b})
}

// call is one request being served.
type call struct {
	d     *Daemon
	peer  proto.Peer
	req   proto.Request
	files []*os.File
	reply func(proto.Response) error
}

// args decodes the request's arguments strictly.
func (c *call) args(v any) error { return proto.DecodeArgs(c.req.Args, v) }

// progress sends a non-final response.
func (c *call) progress(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return c.reply(proto.Response{Version: proto.Version, ID: c.req.ID, Result: b})
}

type opDef struct {
	fn       func(*Daemon, context.Context, *call) (any, error)
	files    int  // descriptors the op accepts
	rootOnly bool // only uid 0
}

var ops map[string]opDef

func init() {
	ops = map[string]opDef{
		"create":   {fn: (*Daemon).opCreate, files: proto.MaxFiles}, // workspace, binds, rootfs
		"start":    {fn: (*Daemon).opStart},
		"exec":     {fn: (*Daemon).opExec, files: 3},
		"signal":   {fn: (*Daemon).opSignal},
		"stop":     {fn: (*Daemon).opStop},
		"stop_all": {fn: (*Daemon).opStopAll, rootOnly: true},
		"rm":       {fn: (*Daemon).opRm},
		"ls":       {fn: (*Daemon).opLs},
		"logs":     {fn: (*Daemon).opLogs},
		"readmit":  {fn: (*Daemon).opReadmit},
		"profile":  {fn: (*Daemon).opProfile},
		"status":   {fn: (*Daemon).opStatus},
		"health":   {fn: (*Daemon).opHealth},

		"volume_create": {fn: (*Daemon).opVolumeCreate},
		"volume_ls":     {fn: (*Daemon).opVolumeLs},
		"volume_rm":     {fn: (*Daemon).opVolumeRm},
	}
}

// toProto maps an error to the protocol's kinds.
func toProto(err error) *proto.Error {
	var pe *proto.Error
	if errors.As(err, &pe) {
		return pe
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		return proto.Errorf(proto.KindNotFound, "%v", err)
	case errors.Is(err, store.ErrDaemonSandboxExists):
		return proto.Errorf(proto.KindExists, "%v", err)
	}
	fk := failure.KindOf(err)
	wire := proto.KindInternal
	switch fk {
	case failure.KindUsage:
		wire = proto.KindBadRequest
	case failure.KindPolicyRejected:
		wire = proto.KindUnauthorized
	case failure.KindLeaseExhausted:
		wire = proto.KindUnavailable
	}
	pe = proto.Errorf(wire, "%v", err)
	pe.Failure = fk
	return pe
}
