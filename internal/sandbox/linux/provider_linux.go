package linux

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/sandbox/linux/cgroup"
	"github.com/cordon-project/cordon/internal/store"
)

// ProviderName and ProviderVersion identify this provider in evidence.
const (
	ProviderName    = "linux-native"
	ProviderVersion = "1"
)

// Defaults for limits the user did not set.
const (
	DefaultMemory = 4 << 30
	DefaultPids   = 4096
	DefaultTmp    = 1 << 30
	DefaultNoFile = 65536
	DefaultFSize  = 16 << 30
)

// Options configure the provider.
type Options struct {
	StateDir string
	Store    *store.Store
	Logger   *slog.Logger
	// CordonSHA256 is the digest of the running binary, for evidence.
	CordonSHA256 string
	// TestSkip is passed to the init; only test builds honour it.
	TestSkip []string
	// Daemon makes every sandbox of this provider outlive the process that
	// spawned it (see daemon_linux.go): no parent-death signal, an
	// optional main program whose exit does not end the sandbox, and an
	// exec channel at <StateDir>/run/<id>.sock that any later process of
	// the host's root can use (Attach). Records are of kind "daemon",
	// which `cordon run` and `cordon gc` never reclaim.
	Daemon bool
}

// Provider is the native Linux provider.
type Provider struct {
	opts   Options
	layout cgroup.Layout
}

var _ sandbox.Provider = (*Provider)(nil)

// New returns the provider. It detects the cgroup layout once.
func New(opts Options) (*Provider, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	l, err := cgroup.Detect()
	if err != nil {
		return nil, failure.Fail(failure.KindUnsupported, "detect cgroups", err)
	}
	return &Provider{opts: opts, layout: l}, nil
}

// Layout is the detected cgroup layout.
func (p *Provider) Layout() cgroup.Layout { return p.layout }

// Probe reports what this host supports. It creates nothing.
func (p *Provider) Probe(ctx context.Context) (sandbox.Capability, error) {
	c := sandbox.Capability{Schema: sandbox.CapabilitySchema, Provider: ProviderName, Version: ProviderVersion, Features: map[string]string{}}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		c.Features["kernel"] = unix.ByteSliceToString(u.Release[:])
	}
	c.Features["arch"] = runtime.GOARCH
	if os.Geteuid() != 0 {
		c.Missing = append(c.Missing, "root (cordon builds sandboxes as root; run it with sudo)")
	}
	if b, err := os.ReadFile("/proc/sys/user/max_user_namespaces"); err != nil || strings.TrimSpace(string(b)) == "0" {
		c.Missing = append(c.Missing, "user namespaces (/proc/sys/user/max_user_namespaces is 0 or unreadable)")
	} else {
		c.Features["user_namespaces"] = strings.TrimSpace(string(b))
	}
	for _, m := range p.layout.Missing() {
		c.Missing = append(c.Missing, fmt.Sprintf("cgroup controller %s", m))
	}
	for ctl, m := range p.layout.Mounts {
		c.Features["cgroup_"+string(ctl)] = fmt.Sprintf("v%d %s", m.Version, m.Path)
	}
	if p.layout.Unified != "" {
		c.Features["cgroup_unified"] = p.layout.Unified
	}
	abi, err := llsys.LandlockGetABIVersion()
	if err != nil || abi < 1 {
		c.Missing = append(c.Missing, "Landlock (not enabled in this kernel)")
	}
	c.Features["landlock_abi"] = fmt.Sprint(abi)
	if err := unix.Prctl(unix.PR_GET_SECCOMP, 0, 0, 0, 0); err != nil {
		c.Missing = append(c.Missing, "seccomp")
	} else {
		c.Features["seccomp"] = "filter"
	}
	if _, err := seccompFor(p.opts.StateDir, p.opts.CordonSHA256); err != nil {
		c.Missing = append(c.Missing, "seccomp filter for "+runtime.GOARCH+": "+err.Error())
	}
	c.MaxLevel = sandbox.DedicatedContainer
	if len(c.Missing) > 0 {
		// Without any one of these the six boundaries cannot all be built.
		c.MaxLevel = sandbox.Shared
	}
	return c, nil
}

// newID returns a fresh sandbox id: 16 lowercase hex characters.
func newID() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b[:])
}

// Provision validates the spec, commits the write-ahead record (which
// leases the UID/GID range), then creates the host resources: cgroups and
// the detached mount trees of the binds.
func (p *Provider) Provision(ctx context.Context, spec sandbox.Spec) (_ sandbox.Sandbox, err error) {
	if err := p.checkSpec(spec); err != nil {
		return nil, err
	}
	if spec.ID == "" {
		spec.ID = newID()
	}
	spec.Limits = withDefaults(spec.Limits)
	lim := cgroup.Limits{MemoryBytes: spec.Limits.MemoryBytes, Pids: spec.Limits.Pids, CPUs: spec.Limits.CPUs,
		TCPBytes: tcpLimit(spec.Limits.MemoryBytes, readHostTCPMem)}
	if err := lim.Validate(); err != nil {
		return nil, failure.Fail(failure.KindUsage, "limits", err)
	}
	if m := p.layout.Missing(); len(m) > 0 {
		return nil, failure.Failf(failure.KindUnsupported, "provision", "cgroup controllers missing on this host: %v", m)
	}
	sb := &linuxSandbox{p: p, spec: spec, events: make(chan event, 8), done: make(chan struct{}), mainDone: make(chan struct{}), tcpBytes: lim.TCPBytes}
	defer func() {
		if err != nil {
			sb.Deprovision(context.WithoutCancel(ctx))
		}
	}()
	// Open and check every bind before anything is created.
	if err := sb.openBinds(); err != nil {
		return nil, err
	}
	owner, err := store.Self()
	if err != nil {
		return nil, failure.Fail(failure.KindStore, "owner", err)
	}
	var lockErr error
	claim := func(l store.Lease) bool {
		lk, ok, err := tryLockLease(l)
		if err != nil {
			lockErr = err
			return false
		}
		if ok {
			sb.lock = lk
		}
		return ok
	}
	if err := checkGatewayID(spec.ID); err != nil {
		return nil, err
	}
	kind, resources, err := p.recordPlan(spec)
	if err != nil {
		return nil, err
	}
	rec, err := p.opts.Store.BeginClaim(ctx, store.Record{
		ID: spec.ID, Kind: kind, Workload: spec.Workload, Owner: owner,
		Resources: resources,
	}, claim)
	if lockErr != nil && sb.lock == nil {
		return nil, failure.Fail(failure.KindProvision, "lease lock", lockErr)
	}
	if err != nil {
		if errors.Is(err, store.ErrPoolExhausted) {
			return nil, failure.Fail(failure.KindLeaseExhausted, "lease", err)
		}
		return nil, failure.Fail(failure.KindStore, "write-ahead record", err)
	}
	sb.rec = rec
	sb.recorded = true
	if spec.Image != nil {
		if err := checkImageIDs(spec.Image, rec.Lease.Size); err != nil {
			return nil, err
		}
	}
	if p.opts.Daemon {
		if err := p.takeHandle(sb); err != nil {
			return nil, err
		}
	}
	sb.cg, err = cgroup.Create(p.layout, spec.ID, lim)
	if err != nil {
		return nil, failure.Fail(failure.KindProvision, "cgroups", err)
	}
	if sb.skip("kmem-tcp") {
		// Positive control (test builds): socket buffers still charged,
		// no longer bounded.
		for _, d := range sb.cg.Dirs() {
			_ = os.WriteFile(filepath.Join(d, "memory.kmem.tcp.limit_in_bytes"), []byte("-1"), 0)
		}
	}
	if sb.gwcg, err = cgroup.Create(p.layout, GatewayGroup(spec.ID), gatewayLimits(spec.Limits)); err != nil {
		return nil, failure.Fail(failure.KindProvision, "gateway cgroups", err)
	}
	if err := sb.prepareTrees(); err != nil {
		return nil, err
	}
	return sb, nil
}

// recordPlan is the kind of spec's write-ahead record and the host
// resources it names before any exists: the sandbox's cgroups, its
// gateway's (gatewaycg_linux.go) and, where the init serves execs, the
// exec socket.
func (p *Provider) recordPlan(spec sandbox.Spec) (string, []string, error) {
	kind, resources := store.KindRun, append(cgroup.PlannedDirs(p.layout, spec.ID), cgroup.PlannedDirs(p.layout, GatewayGroup(spec.ID))...)
	if p.opts.Daemon || spec.Execs {
		if !validID(spec.ID) {
			// The id names the exec socket too: never a path.
			return "", nil, failure.Failf(failure.KindUsage, "provision", "invalid sandbox id %q", spec.ID)
		}
		resources = append(resources, p.runSockPath(spec.ID))
	}
	if p.opts.Daemon {
		kind = store.KindDaemon
	}
	return kind, resources, nil
}

// checkSpec refuses what Provision can refuse before it builds anything.
func (p *Provider) checkSpec(spec sandbox.Spec) error {
	if (len(spec.Argv) == 0 && !p.opts.Daemon) || (len(spec.Argv) > 0 && spec.Argv[0] == "") {
		// A daemon-mode sandbox may be idle: no main program, only execs.
		return failure.Failf(failure.KindUsage, "provision", "no program given")
	}
	if err := p.checkExecsConsole(spec); err != nil {
		return err
	}
	if err := p.checkEngineNet(spec); err != nil {
		return err
	}
	if spec.Image != nil {
		if err := validateImage(spec); err != nil {
			return err
		}
	}
	if spec.Level == sandbox.DedicatedVM {
		return failure.Failf(failure.KindPolicyRejected, "provision", "no provider on this host can evidence DEDICATED_VM (%s gives DEDICATED_CONTAINER at most)", ProviderName)
	}
	return nil
}

func withDefaults(l sandbox.Limits) sandbox.Limits {
	if l.MemoryBytes == 0 {
		l.MemoryBytes = DefaultMemory
	}
	if l.Pids == 0 {
		l.Pids = DefaultPids
	}
	if l.CPUs == 0 {
		l.CPUs = float64(runtime.NumCPU())
	}
	if l.TmpBytes == 0 {
		l.TmpBytes = DefaultTmp
	}
	return l
}

// openBinds validates and opens the workspace, the declared binds and the
// rootfs, by fd, without following symlinks.
func (sb *linuxSandbox) openBinds() error {
	spec := sb.spec
	state := filepath.Clean(sb.p.opts.StateDir)
	targets := refusedTargets
	if spec.Image != nil {
		targets = imageRefusedTargets
	}
	if spec.WorkspaceFile != nil {
		if spec.Workspace != "" {
			return failure.Failf(failure.KindUsage, "workspace", "a workspace path and a workspace descriptor were both given")
		}
		h, err := openWorkspaceFile(spec.WorkspaceFile, state, spec.UnsafeRootWorkspace)
		if err != nil {
			return err
		}
		sb.binds = append(sb.binds, h)
	}
	if spec.Workspace != "" {
		if !filepath.IsAbs(spec.Workspace) {
			return failure.Failf(failure.KindUsage, "workspace", "%s: the workspace path must be absolute", spec.Workspace)
		}
		h, err := openBind(sandbox.Bind{Source: spec.Workspace, Target: "/workspace", Writable: true}, state, spec.UnsafeRootWorkspace, targets)
		if err != nil {
			return err
		}
		sb.binds = append(sb.binds, h)
		if h.st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return failure.Failf(failure.KindUsage, "workspace", "%s is not a directory", spec.Workspace)
		}
	}
	for _, b := range spec.Binds {
		if b.ImageIDs && spec.Image == nil {
			return failure.Failf(failure.KindUsage, "bind", "%s: image ids (an engine's volume) need image mode", b.Source)
		}
		if slices.ContainsFunc(sb.binds, func(h *hostPath) bool { return h.target == filepath.Clean(b.Target) }) {
			return failure.Failf(failure.KindUsage, "bind", "target %s is bound twice", b.Target)
		}
		h, err := openBind(b, state, spec.UnsafeRootWorkspace, targets)
		if err != nil {
			return err
		}
		sb.binds = append(sb.binds, h)
	}
	if spec.Rootfs != "" || spec.RootfsFile != nil {
		if spec.Rootfs != "" && spec.RootfsFile != nil {
			return failure.Failf(failure.KindUsage, "rootfs", "a rootfs path and a rootfs descriptor were both given")
		}
		if spec.RootfsFile == nil && !filepath.IsAbs(spec.Rootfs) {
			return failure.Failf(failure.KindUsage, "rootfs", "%s: the rootfs path must be absolute", spec.Rootfs)
		}
		r, fd := filepath.Clean(spec.Rootfs), -1
		if spec.RootfsFile != nil {
			var err error
			if fd, r, err = dupFile(spec.RootfsFile); err != nil {
				return failure.Fail(failure.KindUsage, "rootfs", err)
			}
		}
		if r == "/" || under(state, r) {
			if fd >= 0 {
				unix.Close(fd)
			}
			return failure.Failf(failure.KindPolicyRejected, "rootfs", "%s may not be a sandbox root", r)
		}
		if fd < 0 {
			var err error
			if fd, err = openNoFollow(r); err != nil {
				return failure.Fail(failure.KindUsage, "rootfs", err)
			}
		}
		sb.rootfs = &hostPath{fd: fd, path: r, target: "/", writable: spec.Image != nil && spec.Image.Writable}
		if err := unix.Fstat(fd, &sb.rootfs.st); err != nil || sb.rootfs.st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return failure.Failf(failure.KindUsage, "rootfs", "%s is not a directory", r)
		}
		upper := ""
		if spec.Image != nil {
			// An engine's overlay is read from the mount table once,
			// here: its upper layer for the socket scan, its layers for
			// rootTreeFD.
			var err error
			if sb.rootOverlay, err = readEngineOverlay(sb.rootfs); err != nil {
				return err
			}
			if sb.rootOverlay != nil {
				upper = sb.rootOverlay.Upper
			}
		}
		return checkRootfsTree(sb.rootfs, spec.Image != nil, upper)
	}
	return nil
}

// checkRootfsTree holds a rootfs to the rules of a bind, since it is one
// (the widest): not under a source that exposes the host itself (/proc,
// /sys, /dev, /run...), and no Unix socket anywhere in it, which would be
// a path from the sandbox to a host service outside its network
// namespace.
//
// In image mode a root under /run or /var/run is accepted when it is the
// root of a mount of its own (rootfsUnderRun: an engine's overlay); upper
// is the engine overlay's upper layer ("" for none), whose own sockets do
// not refuse the root (upperSockets).
func checkRootfsTree(h *hostPath, image bool, upper string) error {
	engineMount := false
	if image {
		var err error
		if engineMount, err = rootfsUnderRun(h); err != nil {
			return failure.Fail(failure.KindPolicyRejected, "rootfs", err)
		}
	}
	for _, r := range refusedSources {
		if engineMount && (r == "/run" || r == "/var/run") {
			continue
		}
		if r != "/" && under(h.path, r) {
			return failure.Failf(failure.KindPolicyRejected, "rootfs", "%s may not be a sandbox root (it is under %s)", h.path, r)
		}
	}
	var skip func(string) bool
	if upper != "" {
		u := openUpperSockets(upper)
		defer u.close()
		skip = u.own
	}
	sock, err := findSocketSkip(h.fd, 200000, skip)
	if err != nil {
		return failure.Fail(failure.KindPolicyRejected, "rootfs", err)
	}
	if sock != "" {
		return socketRefusal("rootfs", h.path, sock)
	}
	return nil
}

// prepareTrees turns the opened binds into detached mount trees.
func (sb *linuxSandbox) prepareTrees() error {
	uid, gid := uint32(sandboxUID), uint32(sandboxGID)
	if img := sb.spec.Image; img != nil {
		uid, gid = img.UID, img.GID
	}
	sb.idm = &idmapper{hostUID: sb.rec.Lease.UID + uid, hostGID: sb.rec.Lease.GID + gid}
	for _, h := range sb.binds {
		// Idmap a user's files to the program; a writable bind always maps
		// (it was refused above unless its owner and group are a user's, or
		// --unsafe-root-workspace). A read-only bind of a root or system
		// owned tree keeps its permissions: the program is "other" there.
		idmap := h.writable || (h.st.Uid >= minUserUID && h.st.Gid >= minUserUID)
		var fd int
		var err error
		if h.imageIDs {
			// An engine's volume: the image's ids, as the root's.
			l := sb.rec.Lease
			ns, nerr := imageUserns(sb.idm, l.UID, l.GID, l.Size)
			if nerr != nil {
				return failure.Fail(failure.KindProvision, "bind idmap", nerr)
			}
			fd, err = detachedTreeNS(h, ns)
		} else {
			fd, err = detachedTree(h, sb.idm, idmap)
		}
		if err != nil {
			return failure.Fail(failure.KindProvision, "bind "+h.path, err)
		}
		if err := sb.testClearNodev(fd, "bind-nodev"); err != nil {
			unix.Close(fd)
			return failure.Fail(failure.KindProvision, "bind "+h.path, err)
		}
		sb.trees = append(sb.trees, tree{fd: fd, target: h.target, writable: h.writable})
	}
	if sb.rootfs != nil {
		ns := -1
		if sb.spec.Image != nil {
			// The image's ids are the sandbox's, read-only or writable.
			l := sb.rec.Lease
			var err error
			if ns, err = imageUserns(sb.idm, l.UID, l.GID, l.Size); err != nil {
				return failure.Fail(failure.KindProvision, "rootfs idmap", err)
			}
		}
		fd, err := sb.rootTreeFD(ns)
		if err != nil && slices.Contains([]failure.Kind{failure.KindUnsupported, failure.KindPolicyRejected}, failure.KindOf(err)) {
			// Say so as it is (a filesystem that cannot be idmapped, an
			// engine overlay cordon cannot read back): not a
			// provisioning fault.
			return err
		}
		if err != nil {
			return failure.Fail(failure.KindProvision, "rootfs", err)
		}
		if err := sb.testClearNodev(fd, "root-nodev"); err != nil {
			unix.Close(fd)
			return failure.Fail(failure.KindProvision, "rootfs", err)
		}
		sb.rootTree = fd
	}
	return nil
}

// testClearNodev (test builds only, layer named): clears nosuid and nodev
// on a prepared tree, the positive control of the evidence's root and
// mounts_nodev facts and of a device node's denial.
func (sb *linuxSandbox) testClearNodev(tree int, layer string) error {
	if !sb.skip(layer) {
		return nil
	}
	attr := unix.MountAttr{Attr_clr: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	return unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &attr)
}
