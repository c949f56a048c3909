package hostmgr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/cordon-project/cordon/internal/hostmgr/proto"
	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/store"
	"github.com/cordon-project/cordon/internal/trapscan"
)

// Spec is what a sandbox is created with; it holds no host path.
type Spec struct {
	Argv   []string       `json:"argv,omitempty"` // the main program; none: an idle sandbox
	Env    []string       `json:"env,omitempty"`
	Level  string         `json:"level,omitempty"` // default DEDICATED_CONTAINER
	Limits sandbox.Limits `json:"limits"`
	// InSitu is the in-situ set attempted at start (sandbox.InSituDefault
	// when empty, or sandbox.InSituFull; docs/session-receipts.md).
	InSitu string `json:"insitu,omitempty"`
	// Workspace says the caller passed its workspace directory as the
	// request's first descriptor; it is bound read-write at /workspace.
	Workspace bool `json:"workspace,omitempty"`
	// Binds are directories or files of the caller's own, each sent as
	// one descriptor (after the workspace's), in this order: --ro/--rw.
	Binds []BindSpec `json:"binds,omitempty"`
	// Rootfs says the caller sent a root directory of its own as the
	// request's last descriptor: the sandbox's read-only root.
	Rootfs              bool `json:"rootfs,omitempty"`
	UnsafeRootWorkspace bool `json:"unsafe_root_workspace,omitempty"` // root callers only
	// Volumes are daemon-managed named directories to bind.
	Volumes []VolumeMount `json:"volumes,omitempty"`
	// Gateway is the sandbox's way out; none: no way out at all.
	Gateway *GatewaySpec `json:"gateway,omitempty"`
	// GatewayEnv points every program at the gateway; set by the daemon
	// at create (last: it wins over Env).
	GatewayEnv []string `json:"gateway_env,omitempty"`
	// ToolServers is how many tool servers the gateway starts, each a
	// sandbox of its own; set by the daemon at create (the quota counts
	// them).
	ToolServers int `json:"tool_servers,omitempty"`
}

// BindSpec is where one bind descriptor of a create request is bound.
type BindSpec struct {
	Target   string `json:"target"`
	Writable bool   `json:"writable,omitempty"`
}

// GatewaySpec is a gateway configuration as the client sends it: the
// cordon/v1 YAML, its policy files' contents, and the secret values the
// client resolved as the caller. The daemon reads no path it names.
type GatewaySpec struct {
	Source   string            `json:"source"`
	Config   []byte            `json:"config"`
	Policies []PolicySource    `json:"policies,omitempty"`
	Secrets  map[string][]byte `json:"secrets,omitempty"`
}

// PolicySource is one Cedar policy file: its base name and bytes.
type PolicySource struct {
	Name string `json:"name"`
	Data []byte `json:"data"`
}

// CreateArgs are the arguments of create.
type CreateArgs struct {
	Name    string `json:"name"`
	Spec    Spec   `json:"spec"`
	Profile string `json:"profile,omitempty"`
	Accept  string `json:"accept,omitempty"` // the risk-acceptance phrase for FULL_CONTROL_LAB
}

// NameArgs name one sandbox.
type NameArgs struct {
	Name string `json:"name"`
}

// Admitted are the identities a sandbox was admitted with; a change of
// any puts it in DRAIN.
type Admitted struct {
	Runtime string `json:"runtime"` // cordon binary digest
	Policy  string `json:"policy"`  // policy set digest (the sandbox's and the host's)
	Rootfs  string `json:"rootfs"`  // base manifest digest and bind targets
}

// Info is what ls and status report of one sandbox.
type Info struct {
	Name      string    `json:"name"`
	ID        string    `json:"id"`
	Owner     uint32    `json:"owner_uid"`
	State     string    `json:"state"`
	Profile   string    `json:"profile"`
	Drain     string    `json:"drain,omitempty"`
	Level     string    `json:"level,omitempty"`
	InitPid   int       `json:"init_pid,omitempty"`
	MainExit  string    `json:"main_exit,omitempty"`
	Note      string    `json:"note,omitempty"`
	Admitted  Admitted  `json:"admitted"`
	Created   time.Time `json:"created"`
	Bypassed  []string  `json:"bypassed,omitempty"`
	Argv      []string  `json:"argv,omitempty"`
	Workspace bool      `json:"workspace,omitempty"`
	// WorkspaceTraps: what the program left in its workspace that can
	// trap a host user, scanned when the sandbox stopped (kept in memory),
	// cut to maxReplyTraps; in the stop and status replies, not in ls.
	WorkspaceTraps []trapscan.Report `json:"workspace_traps,omitempty"`
}

// authorize finds the named sandbox and checks the caller may act on it.
func (c *call) authorize(ctx context.Context, name string) (*box, error) {
	if err := proto.ValidName(name); err != nil {
		return nil, err
	}
	b, err := c.d.load(ctx, name)
	if err != nil {
		return nil, err
	}
	if c.peer.UID != 0 && c.peer.UID != b.rec.OwnerUID {
		// Another user's sandbox: the same answer as an absent one.
		return nil, proto.Errorf(proto.KindNotFound, "no sandbox named %s", name)
	}
	return b, nil
}

// named decodes a request that names one sandbox and authorizes it.
func (c *call) named(ctx context.Context) (*box, NameArgs, error) {
	var a NameArgs
	if err := c.args(&a); err != nil {
		return nil, a, err
	}
	b, err := c.authorize(ctx, a.Name)
	return b, a, err
}

// load returns the in-memory box of name, reading its record if needed.
func (d *Daemon) load(ctx context.Context, name string) (*box, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if b, ok := d.boxes[name]; ok {
		return b, nil
	}
	rec, err := d.o.Store.DaemonSandbox(ctx, name)
	if err != nil {
		return nil, proto.Errorf(proto.KindNotFound, "no sandbox named %s", name)
	}
	b := &box{rec: rec, profile: SafeGuided}
	_ = json.Unmarshal(rec.Spec, &b.spec)
	d.boxes[name] = b
	return b, nil
}

func (d *Daemon) forget(name string) {
	d.mu.Lock()
	delete(d.boxes, name)
	d.mu.Unlock()
}

// setState persists a state change of b (its lock held).
func (d *Daemon) setState(ctx context.Context, b *box, state string, u store.DaemonUpdate) error {
	u.State = &state
	if err := d.o.Store.UpdateDaemonSandbox(context.WithoutCancel(ctx), b.rec.Name, u); err != nil {
		return err
	}
	b.rec.State = state
	return nil
}

// watchMain records how the main program ended; the sandbox stays up
// (execs still work) until it is stopped.
func (d *Daemon) watchMain(b *box, sb sandbox.Sandbox) {
	ex, err := sb.WaitMain(context.Background())
	if err != nil {
		return
	}
	s := fmt.Sprintf("exit %d", ex.Code)
	if ex.Signal != 0 {
		s = fmt.Sprintf("signal %d", ex.Signal)
	}
	_ = d.o.Store.UpdateDaemonSandbox(context.Background(), b.rec.Name, store.DaemonUpdate{MainExit: &s})
	b.mu.Lock()
	b.rec.MainExit = s
	b.mu.Unlock()
}

func (d *Daemon) opLs(ctx context.Context, c *call) (any, error) {
	recs, err := d.o.Store.DaemonSandboxes(ctx)
	if err != nil {
		return nil, err
	}
	out := []Info{}
	for _, r := range recs {
		if c.peer.UID != 0 && r.OwnerUID != c.peer.UID {
			continue
		}
		b, err := d.load(ctx, r.Name)
		if err != nil {
			continue
		}
		b.mu.Lock()
		i := d.info(b)
		i.WorkspaceTraps = nil // one list of many sandboxes: see status
		out = append(out, i)
		b.mu.Unlock()
	}
	return out, nil
}

func (d *Daemon) opStatus(ctx context.Context, c *call) (any, error) {
	b, _, err := c.named(ctx)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	i := d.info(b)
	rc, err := d.receipt(ctx, b)
	if err != nil {
		return nil, err
	}
	return struct {
		Info
		Limits        sandbox.Limits  `json:"limits"`
		GatewayRoutes []string        `json:"gateway_routes,omitempty"`
		Evidence      json.RawMessage `json:"evidence,omitempty"`
		Receipt       *ReceiptInfo    `json:"receipt,omitempty"`
	}{i, b.spec.Limits, gatewayRoutes(b.spec.GatewayEnv), b.rec.Evidence, rc}, nil
}

// gatewayRoutes are the entries of a sandbox's gateway environment that
// point its programs at the gateway (K=http://…), for status: the
// placeholder keys beside them are left out.
func gatewayRoutes(env []string) []string {
	var out []string
	for _, e := range env {
		if _, v, ok := strings.Cut(e, "="); ok && strings.HasPrefix(v, "http://") {
			out = append(out, e)
		}
	}
	return out
}

// maxReplyTraps bounds, as JSON, the workspace traps one reply carries:
// with the rest of an Info well under proto.MaxFrame (256 KiB).
const maxReplyTraps = 64 << 10

// info reports b (its lock held, or b not shared yet).
func (d *Daemon) info(b *box) Info {
	var adm Admitted
	_ = json.Unmarshal(b.rec.Admitted, &adm)
	i := Info{Name: b.rec.Name, ID: b.rec.ID, Owner: b.rec.OwnerUID, State: b.rec.State, Profile: string(b.profile), Drain: b.rec.Drain,
		Level: b.rec.Level, InitPid: b.rec.InitPid, MainExit: b.rec.MainExit, Note: b.rec.Note, Admitted: adm, Created: b.rec.Created,
		Argv: b.spec.Argv, Workspace: b.spec.Workspace, WorkspaceTraps: b.traps}
	if b.profile == FullControlLab {
		i.Bypassed = LabBypasses
	}
	return i
}

// LogsArgs read a sandbox's log (its main program's stdout and stderr)
// from Offset (negative: the end), at most Max bytes; Tail > 0 reads
// from where the last Tail lines begin instead (see tailOffset); a
// non-zero Since reads from where output written at or after it begins
// (see sinceOffset), or from the later of the two with Tail.
type LogsArgs struct {
	Name   string    `json:"name"`
	Offset int64     `json:"offset"`
	Max    int       `json:"max,omitempty"`
	Tail   int       `json:"tail,omitempty"`
	Since  time.Time `json:"since,omitzero"`
}

// LogsChunk is a piece of the log.
type LogsChunk struct {
	Data []byte `json:"data"`
	Next int64  `json:"next"`
	Size int64  `json:"size"`
	// Done: the log will not grow (the main program has exited, or the
	// sandbox is stopped) and this chunk reaches its end.
	Done bool `json:"done"`
}

func (d *Daemon) opLogs(ctx context.Context, c *call) (any, error) {
	var a LogsArgs
	if err := c.args(&a); err != nil {
		return nil, err
	}
	b, err := c.authorize(ctx, a.Name)
	if err != nil {
		return nil, err
	}
	if a.Max <= 0 || a.Max > 128<<10 {
		a.Max = 128 << 10
	}
	b.mu.Lock()
	// The main program writes the log; once it has exited (the sandbox
	// stays up for execs, whose output is their caller's) the log is
	// complete: its writes reached the file before its exit was seen.
	id, done := b.rec.ID, b.rec.State == store.DStopped || b.rec.MainExit != ""
	b.mu.Unlock()
	f, err := os.OpenFile(logPath(d.o.StateDir, id), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, os.ErrNotExist) {
		return LogsChunk{Done: done}, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if a.Tail > 0 {
		if a.Offset, err = tailOffset(f, fi.Size(), a.Tail); err != nil {
			return nil, err
		}
	}
	if !a.Since.IsZero() {
		if a.Offset, err = d.sinceStart(id, a, fi.Size()); err != nil {
			return nil, err
		}
	}
	if a.Offset < 0 || a.Offset > fi.Size() {
		a.Offset = fi.Size()
	}
	buf := make([]byte, min(int64(a.Max), fi.Size()-a.Offset))
	n, _ := f.ReadAt(buf, a.Offset)
	return LogsChunk{Data: buf[:n], Next: a.Offset + int64(n), Size: fi.Size(), Done: done && a.Offset+int64(n) >= fi.Size()}, nil
}

func logPath(state, id string) string { return filepath.Join(logDir(state), id+".log") }

// openLog creates a sandbox's log file (0600); the init writes the main
// program's output to it directly, so it survives the daemon. RLIMIT_FSIZE
// of the sandbox bounds it.
func openLog(state, id string) (*os.File, error) {
	return os.OpenFile(logPath(state, id), os.O_WRONLY|os.O_CREATE|os.O_APPEND|syscall.O_NOFOLLOW, 0o600)
}

// saveSecrets keeps a gateway's custodied values (root-only) so that the
// gateway can be reopened after a daemon restart.
func saveSecrets(state, id string, s map[string][]byte) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	p := filepath.Join(secretDir(state), id+".json")
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func loadSecrets(state, id string) (map[string][]byte, error) {
	b, err := os.ReadFile(filepath.Join(secretDir(state), id+".json"))
	if errors.Is(err, os.ErrNotExist) {
		return map[string][]byte{}, nil
	}
	if err != nil {
		return nil, err
	}
	var s map[string][]byte
	return s, json.Unmarshal(b, &s)
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

func (d *Daemon) hostPolicies() []PolicySource {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.hostPolicy
}

// identityOf reads the workload and tenant a configuration claims
// (validated in full by Gateways.Prepare).
func identityOf(config []byte) (claimed, error) {
	var id claimed
	err := yaml.Unmarshal(config, &id)
	return id, err
}

type claimed struct {
	Workload string `yaml:"workload"`
	Tenant   string `yaml:"tenant"`
}

// checkIdentity: the identity a sandbox crosses the gateway with (tenant,
// workload) is what budgets, state and policy are keyed by, so a user may
// only claim their own. Root may claim any. Another user's workload must
// start with "u<uid>-" and its tenant must be "u<uid>" or one the daemon
// grants that uid (--tenant UID=NAME).
func (d *Daemon) checkIdentity(uid uint32, config []byte) error {
	if uid == 0 {
		return nil
	}
	v, err := identityOf(config)
	if err != nil {
		return proto.Errorf(proto.KindBadRequest, "configuration: %v", err)
	}
	own := fmt.Sprintf("u%d", uid)
	if !strings.HasPrefix(v.Workload, own+"-") {
		return proto.Errorf(proto.KindUnauthorized, "workload %q: your workloads must be named %s-… (budgets, state and policy are keyed by the workload)", clip(v.Workload), own)
	}
	if v.Tenant != own && !slices.Contains(d.o.Tenants[uid], v.Tenant) {
		return proto.Errorf(proto.KindUnauthorized, "tenant %q is not yours: use %s, or ask root to grant it (cordon daemon --tenant %d=%s)", clip(v.Tenant), own, uid, clip(v.Tenant))
	}
	return nil
}

// checkQuota bounds the sandboxes a non-root user holds (not stopped),
// their tool servers' sandboxes included: the lease pool is shared by the
// whole host. want is how many a create adds (the sandbox and its tool
// servers).
func (d *Daemon) checkQuota(ctx context.Context, uid uint32, want int) error {
	if uid == 0 {
		return nil
	}
	recs, err := d.o.Store.DaemonSandboxes(ctx)
	if err != nil {
		return err
	}
	n := 0
	for _, r := range recs {
		if r.OwnerUID == uid && r.State != store.DStopped {
			var s Spec
			_ = json.Unmarshal(r.Spec, &s) // written by this daemon; unreadable: the sandbox alone
			n += 1 + max(s.ToolServers, 0)
		}
	}
	if n+want > d.o.MaxPerUser {
		return proto.Errorf(proto.KindUnavailable, "you (uid %d) hold %d sandboxes (tool servers included) and this one needs %d; %d is the limit per user; stop or remove some", uid, n, want, d.o.MaxPerUser)
	}
	return nil
}
