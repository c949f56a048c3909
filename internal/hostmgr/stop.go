package hostmgr

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cordon-project/cordon/internal/hostmgr/proto"
	"github.com/cordon-project/cordon/internal/store"
	"github.com/cordon-project/cordon/internal/trapscan"
)

func (d *Daemon) opStop(ctx context.Context, c *call) (any, error) {
	b, _, err := c.named(ctx)
	if err != nil {
		return nil, err
	}
	if err := d.stop(ctx, b, false); err != nil {
		return nil, err
	}
	return d.info(b), nil
}

// StopAllResult reports an emergency stop.
type StopAllResult struct {
	Stopped  []string      `json:"stopped"`
	Failed   []string      `json:"failed,omitempty"`
	Duration time.Duration `json:"duration_ns"`
}

// opStopAll kills every sandbox at once: the emergency stop.
func (d *Daemon) opStopAll(ctx context.Context, c *call) (any, error) {
	start := time.Now()
	recs, err := d.o.Store.DaemonSandboxes(ctx)
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	var res StopAllResult
	var wg sync.WaitGroup
	for _, r := range recs {
		if r.State == store.DStopped {
			continue
		}
		b, err := d.load(ctx, r.Name)
		if err != nil {
			continue
		}
		wg.Go(func() {
			err := d.stop(ctx, b, true)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				res.Failed = append(res.Failed, r.Name+": "+err.Error())
			} else {
				res.Stopped = append(res.Stopped, r.Name)
			}
		})
	}
	wg.Wait()
	res.Duration = time.Since(start)
	d.log.Warn("emergency stop", "stopped", len(res.Stopped), "failed", len(res.Failed), "duration", res.Duration)
	return res, nil
}

// stop ends a sandbox for good: the stop state is persisted first, so a
// daemon restart never resumes it. Idempotent.
func (d *Daemon) stop(ctx context.Context, b *box, emergency bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.rec.State {
	case store.DStopped:
		return nil
	case store.DRemoving:
		return proto.Errorf(proto.KindConflict, "sandbox %s is being removed", b.rec.Name)
	}
	if err := d.setState(ctx, b, store.DStopping, store.DaemonUpdate{}); err != nil {
		return err
	}
	d.crash("stop.after_record")
	d.cleanup(context.WithoutCancel(ctx), b, "")
	d.crash("stop.after_kill")
	prof := string(SafeGuided)
	b.profile = SafeGuided
	err := d.setState(ctx, b, store.DStopped, store.DaemonUpdate{Profile: &prof})
	d.lifecycle("stop", err)
	if err != nil {
		return err
	}
	d.log.Info("stopped", "name", b.rec.Name, "id", b.rec.ID, "owner", b.rec.OwnerUID, "emergency", emergency)
	return nil
}

// cleanup releases everything a sandbox holds on the host: its processes
// (cgroup kill), its gateway (listeners close with it), its reservations,
// calls in flight and approvals, its cgroups, lease and host record, its
// run socket and gateway secrets. It works from the record alone when
// nothing is in memory (after a daemon restart). b's lock is held.
func (d *Daemon) cleanup(ctx context.Context, b *box, note string) {
	if b.gw != nil {
		b.gw.Kill()
		_ = b.gw.Stop()
		b.gw = nil
	}
	if b.sb != nil {
		// Once its processes are dead, and before its descriptors close,
		// report what the program left in its writable binds (workspace
		// and volumes) that can trap the host user (only a sandbox this
		// daemon built holds the bind descriptors; one adopted after a
		// restart does not).
		if err := b.sb.Stop(ctx); err != nil {
			b.traps = []trapscan.Report{{Root: "sandbox " + b.rec.Name, Traps: []trapscan.Trap{},
				Truncated: fmt.Sprintf("not scanned: the sandbox did not stop: %v", err)}}
		} else {
			// The names are the program's: keep what fits a reply.
			b.traps = trapscan.Fit(b.sb.ScanTraps(), maxReplyTraps)
			for _, r := range b.traps {
				if len(r.Traps) > 0 || r.Truncated != "" {
					d.log.Warn("workspace traps", "name", b.rec.Name, "id", b.rec.ID, "root", r.Root, "traps", len(r.Traps), "truncated", r.Truncated)
				}
			}
		}
		if err := b.sb.Deprovision(ctx); err != nil {
			d.log.Warn("deprovision", "name", b.rec.Name, "err", err)
		}
		b.sb = nil
	} else if err := d.o.Provider.Release(ctx, b.rec.ID); err != nil {
		d.log.Warn("release host resources", "name", b.rec.Name, "id", b.rec.ID, "err", err)
	}
	if err := d.o.Store.ReleaseCrossings(ctx, b.rec.ID); err != nil {
		d.log.Warn("release crossings", "name", b.rec.Name, "err", err)
	}
	if b.log != nil {
		b.log.Close()
		b.log = nil
	}
	os.Remove(filepath.Join(secretDir(d.o.StateDir), b.rec.ID+".json"))
	if note != "" {
		_ = d.o.Store.UpdateDaemonSandbox(ctx, b.rec.Name, store.DaemonUpdate{Note: &note})
		b.rec.Note = note
	}
}

func (d *Daemon) opRm(ctx context.Context, c *call) (any, error) {
	b, _, err := c.named(ctx)
	if err != nil {
		var pe *proto.Error
		if errors.As(err, &pe) && pe.Kind == proto.KindNotFound {
			return struct {
				Removed bool `json:"removed"`
			}{false}, nil // idempotent: nothing to remove
		}
		return nil, err
	}
	if err := d.stop(ctx, b, false); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := d.setState(ctx, b, store.DRemoving, store.DaemonUpdate{}); err != nil {
		return nil, err
	}
	d.crash("rm.after_record")
	removeLog(d.o.StateDir, b.rec.ID)
	if err := d.o.Store.DeleteDaemonSandbox(ctx, b.rec.Name); err != nil {
		return nil, err
	}
	d.forget(b.rec.Name)
	d.log.Info("removed", "name", b.rec.Name, "id", b.rec.ID, "owner", b.rec.OwnerUID)
	return struct {
		Removed bool `json:"removed"`
	}{true}, nil
}
