package hostmgr

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"syscall"
	"time"

	"github.com/cordon-project/cordon/internal/evidence"
	"github.com/cordon-project/cordon/internal/hostmgr/proto"
	"github.com/cordon-project/cordon/internal/store"
)

// Report is what reconciliation found.
type Report struct {
	Adopted      []string `json:"adopted"`
	Removed      []string `json:"removed"`      // records of sandboxes that never finished creating or starting
	Stopped      []string `json:"stopped"`      // sandboxes found dead, or caught stopping: now stopped
	Unattributed []string `json:"unattributed"` // host residue with no record
}

// reconcile brings the records and the host into agreement at daemon
// start. Every daemon record is in one of the states below when the daemon
// died; the table says what each becomes (docs: cordon sandbox).
//
//	creating, created → removed (host resources released; descriptors did not survive)
//	starting          → removed (the init, if any, killed)
//	running           → adopted when its init is alive and provably the same; else stopped
//	stopping          → stopped (the kill finished)
//	stopped           → stopped (host resources released if any remain)
//	removing          → record deleted
//
// Host records of daemon sandboxes without a daemon record are released;
// cgroups without any record are reported.
func (d *Daemon) reconcile(ctx context.Context) Report {
	var rep Report
	recs, err := d.o.Store.DaemonSandboxes(ctx)
	if err != nil {
		d.log.Error("reconcile: read records", "err", err)
		return rep
	}
	// The host records as the daemon found them: adopting a sandbox below
	// restarts its gateway, whose tool servers are new sandboxes with
	// host records of their own that must not count as residue.
	hosts, hostsErr := d.o.Store.List(ctx)
	known := map[string]bool{}
	for _, r := range recs {
		known[r.ID] = true
		b := &box{rec: r, profile: SafeGuided}
		_ = json.Unmarshal(r.Spec, &b.spec)
		switch r.State {
		case store.DCreating, store.DCreated, store.DStarting:
			d.cleanup(ctx, b, "")
			removeLog(d.o.StateDir, r.ID)
			_ = d.o.Store.DeleteDaemonSandbox(ctx, r.Name)
			d.log.Warn("reconcile: removed a sandbox the daemon was creating or starting when it stopped (create it again)", "name", r.Name, "state", r.State)
			rep.Removed = append(rep.Removed, r.Name)
		case store.DRunning:
			if err := d.adopt(ctx, b); err != nil {
				d.log.Warn("reconcile: sandbox not adoptable; stopped", "name", r.Name, "err", err)
				d.cleanup(ctx, b, "found dead or unprovable at daemon start: "+err.Error())
				_ = d.setState(ctx, b, store.DStopped, store.DaemonUpdate{Profile: store.Ptr(string(SafeGuided))})
				rep.Stopped = append(rep.Stopped, r.Name)
				d.mu.Lock()
				d.boxes[r.Name] = b
				d.mu.Unlock()
				continue
			}
			rep.Adopted = append(rep.Adopted, r.Name)
		case store.DStopping, store.DStopped:
			d.cleanup(ctx, b, "")
			if r.State == store.DStopping {
				_ = d.setState(ctx, b, store.DStopped, store.DaemonUpdate{Profile: store.Ptr(string(SafeGuided))})
				rep.Stopped = append(rep.Stopped, r.Name)
			}
			d.mu.Lock()
			d.boxes[r.Name] = b
			d.mu.Unlock()
		case store.DRemoving:
			d.cleanup(ctx, b, "")
			removeLog(d.o.StateDir, r.ID)
			_ = d.o.Store.DeleteDaemonSandbox(ctx, r.Name)
			rep.Removed = append(rep.Removed, r.Name)
		}
	}
	// Host records of daemon sandboxes with no daemon record: a crash
	// between the two writes, or the tool servers of a gateway of the
	// daemon before (its successor started new ones). Release them.
	if hostsErr == nil {
		for _, h := range hosts {
			if h.Kind != store.KindDaemon || known[h.ID] {
				continue
			}
			b := &box{rec: store.DaemonSandbox{ID: h.ID, Name: "(no record) " + h.ID}}
			d.cleanup(ctx, b, "")
			rep.Removed = append(rep.Removed, h.ID)
		}
	}
	var all []string
	if hosts, err := d.o.Store.List(ctx); err == nil {
		for _, h := range hosts {
			all = append(all, h.ID)
		}
	}
	names, _ := d.o.Provider.Residue(all)
	for _, n := range names {
		rep.Unattributed = append(rep.Unattributed, "cgroup "+n)
	}
	return rep
}

func decodeEvidence(b []byte) *evidence.Record {
	var rec evidence.Record
	if json.Unmarshal(b, &rec) != nil || rec.Boundaries == nil {
		return nil
	}
	return &rec
}

// adopt takes over a running sandbox from the record: its init must be
// alive with the recorded start time and in the sandbox's cgroups; its
// gateway is reopened, its profile reset to SAFE_GUIDED, its drift
// checked.
func (d *Daemon) adopt(ctx context.Context, b *box) error {
	sb, err := d.o.Provider.Reattach(ctx, b.rec.ID, b.rec.InitPid, b.rec.InitStart)
	if err != nil {
		return err
	}
	b.sb = sb
	b.profile = SafeGuided
	if err := d.o.Store.UpdateDaemonSandbox(ctx, b.rec.Name, store.DaemonUpdate{Profile: store.Ptr(string(SafeGuided))}); err != nil {
		return err
	}
	if b.spec.Gateway != nil {
		if err := d.reopenGateway(ctx, b); err != nil {
			return err
		}
	}
	var was Admitted
	_ = json.Unmarshal(b.rec.Admitted, &was)
	if why := drifted(was, d.current(b, d.hostNow())); why != "" {
		if err := d.o.Store.UpdateDaemonSandbox(ctx, b.rec.Name, store.DaemonUpdate{Drain: &why}); err == nil {
			b.rec.Drain = why
		}
	}
	d.mu.Lock()
	d.boxes[b.rec.Name] = b
	d.mu.Unlock()
	if len(b.spec.Argv) > 0 && b.rec.MainExit == "" {
		go d.indexLog(b, b.rec.ID)
	}
	d.log.Info("adopted", "name", b.rec.Name, "id", b.rec.ID, "owner", b.rec.OwnerUID, "init", b.rec.InitPid, "drain", b.rec.Drain)
	return nil
}

func (d *Daemon) opProfile(ctx context.Context, c *call) (any, error) {
	var a ProfileArgs
	if err := c.args(&a); err != nil {
		return nil, err
	}
	b, err := c.authorize(ctx, a.Name)
	if err != nil {
		return nil, err
	}
	p, err := parseProfile(a.Profile, a.Accept, a.Name)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rec.State != store.DRunning && b.rec.State != store.DCreated {
		return nil, proto.Errorf(proto.KindConflict, "sandbox %s is %s", a.Name, b.rec.State)
	}
	b.profile = p
	ev, level := b.rec.Evidence, b.rec.Level
	if p == FullControlLab && len(ev) > 0 {
		if rec := decodeEvidence(ev); rec != nil {
			markBypassed(rec)
			ev, _ = json.Marshal(rec)
			level = rec.LevelAdmitted.String()
		}
	}
	// Back to SAFE_GUIDED, the record keeps what the lab period showed:
	// the boundaries stay UNVERIFIED until the sandbox is started anew.
	if err := d.o.Store.UpdateDaemonSandbox(ctx, b.rec.Name, store.DaemonUpdate{Profile: store.Ptr(string(p)), Evidence: ev, Level: &level}); err != nil {
		return nil, err
	}
	b.rec.Evidence, b.rec.Level = ev, level
	if b.gw != nil {
		if err := d.startGateway(ctx, b); err != nil {
			return nil, err
		}
	}
	return d.info(b), nil
}

// gatewayPortWait bounds how long adoption waits for the previous
// daemon's gateway processes to let go of the sandbox's listener ports.
const gatewayPortWait = 10 * time.Second

// reopenGateway starts an adopted sandbox's gateway again. The previous
// daemon's gateway processes die with it (parent-death signal), but not
// at once: a restart right after a stop or a crash can find a port in the
// sandbox's network namespace still bound. That one error is retried for
// a bounded time; any other fails at once.
func (d *Daemon) reopenGateway(ctx context.Context, b *box) error {
	deadline := time.Now().Add(gatewayPortWait)
	for {
		err := d.startGateway(ctx, b)
		if err == nil || !addrInUse(err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// addrInUse reports a listener port still bound (errno EADDRINUSE,
// possibly flattened to text by a failure kind on the way).
func addrInUse(err error) bool {
	return errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), syscall.EADDRINUSE.Error())
}
