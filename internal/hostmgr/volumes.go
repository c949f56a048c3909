package hostmgr

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"

	"github.com/cordon-project/cordon/internal/hostmgr/proto"
	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/store"
)

// Volumes are named directories the daemon creates and manages under
// Options.VolumeDir: a sandbox names them (never a host path) and gets
// them bound; what it writes there outlives it. A volume belongs to the
// user who created it; its directory is owned by that user when they are
// a regular user (uid >= 1000), else by VolumeUID, so it is always an
// unprivileged owner that the sandbox's idmapped bind maps to its uid.

// DefaultVolumeDir holds the daemon's volumes (outside the state dir:
// nothing under it is ever bound into a sandbox).
const DefaultVolumeDir = "/var/lib/cordon-volumes"

// VolumeUID owns the directories of volumes created by root.
const VolumeUID = 65533

// VolumeMount names a volume to bind into a sandbox.
type VolumeMount struct {
	Name     string `json:"name"`
	Target   string `json:"target"` // absolute path in the sandbox
	ReadOnly bool   `json:"read_only,omitempty"`
}

func (d *Daemon) volumePath(name string) string { return filepath.Join(d.o.VolumeDir, name) }

func (d *Daemon) opVolumeCreate(ctx context.Context, c *call) (any, error) {
	var a NameArgs
	if err := c.args(&a); err != nil {
		return nil, err
	}
	if err := proto.ValidName(a.Name); err != nil {
		return nil, err
	}
	owner := c.peer.UID
	if err := d.o.Store.CreateVolume(ctx, store.Volume{Name: a.Name, OwnerUID: owner}); err != nil {
		if errors.Is(err, store.ErrVolumeExists) {
			return nil, proto.Errorf(proto.KindExists, "%v", err)
		}
		return nil, err
	}
	uid := int(owner)
	if uid < 1000 {
		uid = VolumeUID
	}
	if err := os.MkdirAll(d.o.VolumeDir, 0o711); err != nil {
		_ = d.o.Store.DeleteVolume(ctx, a.Name)
		return nil, err
	}
	p := d.volumePath(a.Name)
	// A directory without a record is the residue of a crash between the
	// two: its contents belonged to an earlier volume, never to this one.
	if err := os.RemoveAll(p); err != nil {
		_ = d.o.Store.DeleteVolume(ctx, a.Name)
		return nil, err
	}
	if err := os.Mkdir(p, 0o700); err != nil {
		_ = d.o.Store.DeleteVolume(ctx, a.Name)
		return nil, err
	}
	if err := os.Lchown(p, uid, uid); err != nil {
		return nil, err
	}
	return d.o.Store.Volume(ctx, a.Name)
}

func (d *Daemon) opVolumeLs(ctx context.Context, c *call) (any, error) {
	vs, err := d.o.Store.Volumes(ctx)
	if err != nil {
		return nil, err
	}
	out := []store.Volume{}
	for _, v := range vs {
		if c.peer.UID == 0 || v.OwnerUID == c.peer.UID {
			out = append(out, v)
		}
	}
	return out, nil
}

// volume finds a volume the caller may use (another user's answers as
// absent).
func (c *call) volume(ctx context.Context, name string) (store.Volume, error) {
	if err := proto.ValidName(name); err != nil {
		return store.Volume{}, err
	}
	v, err := c.d.o.Store.Volume(ctx, name)
	if err != nil || (c.peer.UID != 0 && v.OwnerUID != c.peer.UID) {
		return store.Volume{}, proto.Errorf(proto.KindNotFound, "no volume named %s", name)
	}
	return v, nil
}

func (d *Daemon) opVolumeRm(ctx context.Context, c *call) (any, error) {
	var a NameArgs
	if err := c.args(&a); err != nil {
		return nil, err
	}
	v, err := c.volume(ctx, a.Name)
	if err != nil {
		var pe *proto.Error
		if errors.As(err, &pe) && pe.Kind == proto.KindNotFound {
			return struct {
				Removed bool `json:"removed"`
			}{false}, nil // idempotent
		}
		return nil, err
	}
	recs, err := d.o.Store.DaemonSandboxes(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		b, err := d.load(ctx, r.Name)
		if err != nil {
			continue
		}
		b.mu.Lock()
		used := b.rec.State != store.DStopped && slices.ContainsFunc(b.spec.Volumes, func(m VolumeMount) bool { return m.Name == v.Name })
		b.mu.Unlock()
		if used {
			return nil, proto.Errorf(proto.KindConflict, "volume %s is used by sandbox %s; stop it first", v.Name, r.Name)
		}
	}
	if err := os.RemoveAll(d.volumePath(v.Name)); err != nil {
		return nil, err
	}
	if err := d.o.Store.DeleteVolume(ctx, v.Name); err != nil {
		return nil, err
	}
	return struct {
		Removed bool `json:"removed"`
	}{true}, nil
}

// MaxVolumeMounts bounds the volume mounts of one sandbox: each is a bind
// the daemon opens as root, walks for Unix sockets and clones as a mount
// tree, and a request frame has room for thousands of them.
const MaxVolumeMounts = 32

// volumeBinds turns a spec's volume mounts into binds of the daemon's own
// directories, checking the caller may use each.
func (c *call) volumeBinds(ctx context.Context, ms []VolumeMount) ([]sandbox.Bind, error) {
	if len(ms) > MaxVolumeMounts {
		return nil, proto.Errorf(proto.KindBadRequest, "%d volume mounts: a sandbox takes at most %d", len(ms), MaxVolumeMounts)
	}
	var out []sandbox.Bind
	for _, m := range ms {
		if _, err := c.volume(ctx, m.Name); err != nil {
			return nil, err
		}
		if !filepath.IsAbs(m.Target) || filepath.Clean(m.Target) != m.Target {
			return nil, proto.Errorf(proto.KindBadRequest, "volume %s: target %q must be an absolute, clean path", m.Name, m.Target)
		}
		out = append(out, sandbox.Bind{Source: c.d.volumePath(m.Name), Target: m.Target, Writable: !m.ReadOnly})
	}
	return out, nil
}
