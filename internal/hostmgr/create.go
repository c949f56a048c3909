package hostmgr

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/evidence"
	"github.com/cordon-project/cordon/internal/hostmgr/proto"
	"github.com/cordon-project/cordon/internal/launch"
	"github.com/cordon-project/cordon/internal/policy"
	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/store"
)

// The descriptors of a create request, in this order: the workspace
// (spec.workspace), one per bind (spec.binds), the rootfs (spec.rootfs).
// A request carries at most proto.MaxFiles of them.

func (d *Daemon) opCreate(ctx context.Context, c *call) (any, error) {
	var a CreateArgs
	if err := c.args(&a); err != nil {
		return nil, err
	}
	if err := proto.ValidName(a.Name); err != nil {
		return nil, err
	}
	prof, err := parseProfile(a.Profile, a.Accept, a.Name)
	if err != nil {
		return nil, err
	}
	s := a.Spec
	spec, err := c.createSpec(ctx, &s)
	if err != nil {
		return nil, err
	}
	policyDigest := policySetDigest(nil, d.hostPolicies())
	// Set here, never taken from the client: a sandbox without a gateway
	// has no gateway variables and no tool servers.
	s.GatewayEnv, s.ToolServers = nil, 0
	if s.Gateway != nil {
		if err := d.checkIdentity(c.peer.UID, s.Gateway.Config); err != nil {
			return nil, err
		}
		plan, err := d.plan(s.Gateway, s.Gateway.Secrets, false, c.peer.UID)
		if err != nil {
			return nil, proto.Errorf(proto.KindBadRequest, "gateway: %v", err)
		}
		// As cordon run: no secret of the configuration may reach the
		// program through a bind, the workspace, the rootfs or --env.
		if err := plan.CheckLeaks(spec); err != nil {
			return nil, err
		}
		s.GatewayEnv, policyDigest = launch.GatewayEnv(), plan.PolicyDigest()
		s.ToolServers = plan.ToolServers()
	}
	spec.ID, spec.Workload = d.o.Provider.NewID(), workloadOf(s)
	spec.Env = append(spec.Env, s.GatewayEnv...)
	res, err := d.create(ctx, c, a.Name, prof, s, spec, policyDigest)
	d.lifecycle("create", err)
	return res, err
}

// createSpec checks what the caller sent and builds the sandbox spec:
// the workspace, binds and rootfs arrive as descriptors the caller
// opened (the daemon opens no path a caller names), each owned by the
// caller unless the caller is root; then the one spec validation.
func (c *call) createSpec(ctx context.Context, s *Spec) (sandbox.Spec, error) {
	if s.UnsafeRootWorkspace && c.peer.UID != 0 {
		return sandbox.Spec{}, proto.Errorf(proto.KindUnauthorized, "unsafe_root_workspace needs root")
	}
	files := c.files
	want := len(s.Binds)
	if s.Workspace {
		want++
	}
	if s.Rootfs {
		want++
	}
	if len(files) != want {
		return sandbox.Spec{}, proto.Errorf(proto.KindBadRequest, "descriptors: send the workspace (spec.workspace), then one per bind (spec.binds), then the rootfs (spec.rootfs): %d expected, %d sent", want, len(files))
	}
	level := sandbox.DedicatedContainer
	if s.Level != "" {
		var err error
		if level, err = sandbox.ParseLevel(s.Level); err != nil {
			return sandbox.Spec{}, proto.Errorf(proto.KindBadRequest, "level: %v", err)
		}
	}
	switch s.InSitu {
	case "", sandbox.InSituDefault, sandbox.InSituFull:
	default:
		return sandbox.Spec{}, proto.Errorf(proto.KindBadRequest, "insitu %q: want %s or %s", s.InSitu, sandbox.InSituDefault, sandbox.InSituFull)
	}
	spec := sandbox.Spec{Argv: s.Argv, Env: append([]string{}, s.Env...), UnsafeRootWorkspace: s.UnsafeRootWorkspace, Limits: s.Limits, Level: level,
		InSitu: s.InSitu}
	if s.Workspace {
		if err := checkOwned(files[0], c.peer, "workspace", true); err != nil {
			return sandbox.Spec{}, err
		}
		spec.WorkspaceFile, files = files[0], files[1:]
	}
	for i, bs := range s.Binds {
		if err := checkOwned(files[i], c.peer, "bind "+clip(bs.Target), false); err != nil {
			return sandbox.Spec{}, err
		}
		spec.Binds = append(spec.Binds, sandbox.Bind{Target: bs.Target, Writable: bs.Writable, File: files[i]})
	}
	if s.Rootfs {
		if err := checkOwned(files[len(s.Binds)], c.peer, "rootfs", true); err != nil {
			return sandbox.Spec{}, err
		}
		spec.RootfsFile = files[len(s.Binds)]
	}
	vols, err := c.volumeBinds(ctx, s.Volumes)
	if err != nil {
		return sandbox.Spec{}, err
	}
	spec.Binds = append(spec.Binds, vols...)
	if err := launch.Validate(&spec); err != nil {
		return sandbox.Spec{}, err
	}
	return spec, nil
}

// create records the sandbox, then provisions it through the lifecycle
// (package launch); on failure nothing of it is left.
func (d *Daemon) create(ctx context.Context, c *call, name string, prof Profile, s Spec, spec sandbox.Spec, policyDigest string) (any, error) {
	stored := s
	stored.Gateway = nil
	if s.Gateway != nil {
		g := *s.Gateway
		g.Secrets = nil // kept apart, 0600 root (see saveSecrets)
		stored.Gateway = &g
	}
	specJSON, _ := json.Marshal(stored)
	rec := store.DaemonSandbox{Name: name, ID: spec.ID, OwnerUID: c.peer.UID, Profile: string(SafeGuided), Spec: specJSON}
	// The record first: nothing on the host exists without one. The
	// quota is checked in the same step (concurrent creates would each
	// see room otherwise); each tool server is a sandbox of its own, on
	// its own lease, and counts with the sandbox.
	d.quotaMu.Lock()
	if err := d.checkQuota(ctx, c.peer.UID, 1+s.ToolServers); err != nil {
		d.quotaMu.Unlock()
		return nil, err
	}
	err := d.o.Store.CreateDaemonSandbox(ctx, rec)
	d.quotaMu.Unlock()
	if err != nil {
		return nil, err
	}
	// The record as stored (its created and updated times are the
	// store's): ls reports those, as a restarted daemon would.
	if got, gerr := d.o.Store.DaemonSandbox(ctx, name); gerr == nil {
		rec = got
	}
	d.crash("create.after_record")
	b := &box{rec: rec, spec: s, profile: prof}
	b.rec.State = store.DCreating
	b.mu.Lock()
	defer b.mu.Unlock()
	d.mu.Lock()
	d.boxes[name] = b
	d.mu.Unlock()
	fail := func(err error) (any, error) {
		d.cleanup(context.WithoutCancel(ctx), b, "create failed: "+err.Error())
		// Without its record nothing would ever remove the log.
		removeLog(d.o.StateDir, spec.ID)
		_ = d.o.Store.DeleteDaemonSandbox(context.WithoutCancel(ctx), name)
		d.forget(name)
		return nil, err
	}
	if s.Gateway != nil {
		if err := saveSecrets(d.o.StateDir, spec.ID, s.Gateway.Secrets); err != nil {
			return fail(err)
		}
	}
	logf, err := openLog(d.o.StateDir, spec.ID)
	if err != nil {
		return fail(err)
	}
	b.log = logf // the init gets it at start; closed here after that
	spec.Stdout, spec.Stderr = logf, logf
	// The gateway is started at start (its plan is re-read then, with
	// the secrets): provision without one.
	l, err := launch.Provision(ctx, d.launchHost, spec, nil)
	if err != nil {
		return fail(err)
	}
	b.sb = l.Sandbox()
	d.crash("create.after_provision")
	adm := Admitted{Runtime: d.o.RuntimeDigest, Policy: policyDigest, Rootfs: rootfsDigest(d.hostNow().manifest, s)}
	admJSON, _ := json.Marshal(adm)
	if err := d.setState(ctx, b, store.DCreated, store.DaemonUpdate{Admitted: admJSON, Profile: store.Ptr(string(prof))}); err != nil {
		return fail(err)
	}
	b.rec.Admitted = admJSON
	d.log.Info("created", "name", name, "id", spec.ID, "owner", c.peer.UID, "profile", prof)
	return d.info(b), nil
}

// checkOwned checks a descriptor the caller sent: a directory (or, for a
// bind, a regular file too) that the caller owns, of a group the caller
// is in (root may send any), opened by the caller itself. The group
// matters as much as the owner: a bind maps both to the program
// (idmapped), so a directory of a group the caller is not in (inherited
// from a setgid parent) would hand the program that group's files.
func checkOwned(f *os.File, peer proto.Peer, what string, dirOnly bool) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return proto.Errorf(proto.KindBadRequest, "%s descriptor: %v", what, err)
	}
	switch mode := st.Mode & unix.S_IFMT; {
	case mode == unix.S_IFDIR:
	case mode == unix.S_IFREG && !dirOnly:
	default:
		return proto.Errorf(proto.KindBadRequest, "the %s descriptor is not a directory%s", what, map[bool]string{false: " or a regular file", true: ""}[dirOnly])
	}
	if peer.UID == 0 {
		return nil
	}
	if st.Uid != peer.UID {
		return proto.Errorf(proto.KindUnauthorized, "the %s is owned by uid %d, not by you (uid %d)", what, st.Uid, peer.UID)
	}
	if !peer.InGroup(st.Gid) {
		return proto.Errorf(proto.KindUnauthorized, "the %s belongs to group %d, which you (uid %d) are not in; the sandbox would get that group's files (chgrp it to a group of yours)", what, st.Gid, peer.UID)
	}
	return nil
}

func workloadOf(s Spec) string {
	if s.Gateway != nil {
		if id, err := identityOf(s.Gateway.Config); err == nil && id.Workload != "" {
			return id.Workload
		}
	}
	return "default"
}

func (d *Daemon) opStart(ctx context.Context, c *call) (any, error) {
	b, a, err := c.named(ctx)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.rec.State {
	case store.DRunning:
		return d.info(b), nil // idempotent
	case store.DCreated:
	default:
		return nil, proto.Errorf(proto.KindConflict, "sandbox %s is %s; only a created sandbox can start (stopped work never resumes: create a new one)", a.Name, b.rec.State)
	}
	if b.rec.Drain != "" {
		return nil, proto.Errorf(proto.KindDrain, "sandbox %s is draining: %s; re-admit it first (cordon sandbox readmit %s)", a.Name, b.rec.Drain, a.Name)
	}
	if b.sb == nil {
		return nil, proto.Errorf(proto.KindConflict, "sandbox %s lost its provisioned resources (daemon restart); remove it and create it again", a.Name)
	}
	if err := d.setState(ctx, b, store.DStarting, store.DaemonUpdate{}); err != nil {
		return nil, err
	}
	err = d.start(ctx, b)
	d.lifecycle("start", err)
	if err != nil {
		d.cleanup(context.WithoutCancel(ctx), b, "start failed: "+err.Error())
		_ = d.setState(ctx, b, store.DStopped, store.DaemonUpdate{Note: store.Ptr("start failed: " + err.Error())})
		return nil, err
	}
	if len(b.spec.Argv) > 0 {
		go d.watchMain(b, b.sb)
		go d.indexLog(b, b.rec.ID)
	}
	d.log.Info("started", "name", b.rec.Name, "id", b.rec.ID, "owner", b.rec.OwnerUID, "level", b.rec.Level, "profile", b.profile, "init", b.rec.InitPid)
	return d.info(b), nil
}

// start runs b through the lifecycle's start (package launch): build the
// boundary, admit from evidence by the one rule (FULL_CONTROL_LAB: marked
// bypassed and not enforced), start the gateway and its tool servers,
// run the main program. b's lock is held.
func (d *Daemon) start(ctx context.Context, b *box) error {
	want := sandbox.DedicatedContainer
	if b.spec.Level != "" {
		want, _ = sandbox.ParseLevel(b.spec.Level)
	}
	lab := b.profile == FullControlLab
	var mark func(*evidence.Record)
	if lab {
		mark = markBypassed
	}
	l := launch.Resume(d.launchHost, sandbox.Spec{Level: want}, nil, b.sb)
	err := l.Start(ctx, mark, !lab)
	if b.log != nil {
		b.log.Close() // the init holds its own copy
		b.log = nil
	}
	if pid, st := b.sb.InitPid(), b.sb.InitStartTime(); pid > 0 {
		if uerr := d.o.Store.UpdateDaemonSandbox(ctx, b.rec.Name, store.DaemonUpdate{InitPid: &pid, InitStart: &st}); uerr != nil && err == nil {
			err = uerr
		}
		b.rec.InitPid, b.rec.InitStart = pid, st
	}
	if err != nil {
		return err
	}
	d.crash("start.after_spawn")
	if err := d.signReceipt(ctx, b, l.Record); err != nil {
		return err
	}
	evJSON, _ := json.Marshal(l.Record)
	if b.spec.Gateway != nil {
		if err := d.startGateway(ctx, b); err != nil {
			return err
		}
	}
	d.crash("start.after_gateway")
	if err := l.Exec(ctx); err != nil {
		return err
	}
	if err := d.setState(ctx, b, store.DRunning, store.DaemonUpdate{Level: store.Ptr(l.Level.String()), Evidence: evJSON}); err != nil {
		return err
	}
	b.rec.Level, b.rec.Evidence = l.Level.String(), evJSON
	return nil
}

// plan is a sandbox's gateway plan from what its client sent (secrets
// nil: validation only), under the host policies.
// owner is the uid of the sandbox's owner: a configuration from anyone but
// root is held to launch.Detached.Unprivileged's rules.
func (d *Daemon) plan(g *GatewaySpec, secrets map[string][]byte, lab bool, owner uint32) (*launch.Plan, error) {
	return launch.DetachedPlan(launch.Detached{Source: g.Source, Config: g.Config, Policies: policySources(g.Policies), Secrets: secrets, Unprivileged: owner != 0},
		policySources(d.hostPolicies()), lab)
}

// startGateway (re)starts b's gateway, with its tool servers, from its
// plan and its current profile. b's lock is held.
func (d *Daemon) startGateway(ctx context.Context, b *box) error {
	if b.gw != nil {
		_ = b.gw.Stop()
		b.gw = nil
	}
	secrets, err := loadSecrets(d.o.StateDir, b.rec.ID)
	if err != nil {
		return err
	}
	plan, err := d.plan(b.spec.Gateway, secrets, b.profile == FullControlLab, b.rec.OwnerUID)
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	gw, err := launch.StartGateway(ctx, d.launchHost, b.sb, plan)
	if err != nil {
		return err
	}
	b.gw = gw
	return nil
}

// policySources are policy files as package policy reads them.
func policySources(ps []PolicySource) []policy.Source {
	out := make([]policy.Source, 0, len(ps))
	for _, p := range ps {
		out = append(out, policy.Source{Name: p.Name, Data: p.Data})
	}
	return out
}
