package hostmgr

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cordon-project/cordon/internal/hostmgr/proto"
	"github.com/cordon-project/cordon/internal/store"
)

// Drift: each sandbox records the runtime, policy and rootfs identities
// it was admitted with (Admitted). The daemon compares them with the
// current ones at start and every DriftEvery; any difference puts the
// sandbox in DRAIN: what runs keeps running, start and exec are refused
// until `readmit` records the current identities.
//
// The identities:
//   - runtime: SHA-256 of the cordon binary (the running daemon's, and the
//     file it was started from: replacing the binary on disk is drift);
//   - policy: the digest of the sandbox's Cedar policy set together with
//     the host policy directory;
//   - rootfs: for the default base, SHA-256 of a cheap manifest — the
//     package database (/var/lib/dpkg/status) and the list of bind
//     targets — not of the files themselves (an in-place change of a file
//     that dpkg does not record is not seen).

// readPolicyDir reads the host policy directory: every *.cedar file, by
// name.
func readPolicyDir(dir string) ([]PolicySource, error) {
	if dir == "" {
		return nil, nil
	}
	names, err := filepath.Glob(filepath.Join(dir, "*.cedar"))
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	var out []PolicySource
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			return nil, err
		}
		out = append(out, PolicySource{Name: filepath.Base(n), Data: b})
	}
	return out, nil
}

// policySetDigest digests policy sources (for a sandbox without a
// gateway: the host's only).
func policySetDigest(sandbox, host []PolicySource) string {
	h := sha256.New()
	for _, s := range append(append([]PolicySource{}, sandbox...), host...) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s.Name)))
		h.Write(n[:])
		h.Write([]byte(s.Name))
		binary.BigEndian.PutUint64(n[:], uint64(len(s.Data)))
		h.Write(n[:])
		h.Write(s.Data)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// hostIDs are the host-wide inputs of the identities, read once per
// drift scan (not once per sandbox): the package database can be megabytes.
type hostIDs struct {
	runtime  string // the running binary's digest, or the file's if it was replaced
	manifest string // digest of the base manifest files
	policy   string // digest of the host policy directory
}

func (d *Daemon) readHostIDs() hostIDs {
	h := hostIDs{runtime: d.o.RuntimeDigest, policy: policySetDigest(nil, d.hostPolicies())}
	if d.o.Executable != "" {
		if disk, err := fileDigest(d.o.Executable); err == nil && disk != d.o.RuntimeDigest {
			h.runtime = disk // the binary was replaced: the next start runs another cordon
		}
	}
	m := sha256.New()
	for _, f := range d.o.BaseManifest {
		fmt.Fprintf(m, "file %s\n", f)
		if fh, err := os.Open(f); err == nil {
			_, _ = io.Copy(m, fh)
			fh.Close()
		} else {
			fmt.Fprintf(m, "missing\n")
		}
	}
	h.manifest = "sha256:" + hex.EncodeToString(m.Sum(nil))
	return h
}

// refreshHost reads the host identities and keeps them for hostNow.
func (d *Daemon) refreshHost() hostIDs {
	h := d.readHostIDs()
	d.mu.Lock()
	d.host = h
	d.mu.Unlock()
	return h
}

// hostNow returns the host identities of the last refresh (start, then
// every drift scan).
func (d *Daemon) hostNow() hostIDs {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.host
}

// rootfsDigest is the base manifest's digest with the sandbox's binds.
func rootfsDigest(manifest string, s Spec) string {
	binds := []string{"/usr", "/bin", "/lib", "/lib64", "/sbin", "/etc/ssl/certs"}
	if s.Workspace {
		binds = append(binds, "/workspace")
	}
	for _, v := range s.Volumes {
		binds = append(binds, "volume "+v.Name+":"+v.Target)
	}
	for _, b := range s.Binds {
		binds = append(binds, fmt.Sprintf("caller %s writable=%v", b.Target, b.Writable))
	}
	if s.Rootfs {
		// The caller's own root, by descriptor: the base manifest does not
		// describe it, and it is fixed for the sandbox's life.
		binds = append(binds, "caller rootfs")
	}
	sum := sha256.Sum256([]byte(manifest + "\nbinds " + strings.Join(binds, ",")))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// fileDigest is the SHA-256 of a file.
func fileDigest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// current returns a sandbox's identities as they are now (b's lock held).
// A gateway sandbox's policy digest is computed again only when the host
// policy changed: its own policy is fixed at create.
func (d *Daemon) current(b *box, h hostIDs) Admitted {
	cur := Admitted{Runtime: h.runtime, Rootfs: rootfsDigest(h.manifest, b.spec), Policy: h.policy}
	if b.spec.Gateway != nil {
		if b.policyHost != h.policy || b.policyDigest == "" {
			if plan, err := d.plan(b.spec.Gateway, nil, false, b.rec.OwnerUID); err == nil {
				b.policyDigest = plan.PolicyDigest()
			} else {
				b.policyDigest = "invalid: " + err.Error()
			}
			b.policyHost = h.policy
		}
		cur.Policy = b.policyDigest
	}
	return cur
}

// drifted names what differs, or "".
func drifted(was, now Admitted) string {
	var why []string
	if was.Runtime != now.Runtime {
		why = append(why, fmt.Sprintf("runtime %s → %s", short(was.Runtime), short(now.Runtime)))
	}
	if was.Policy != now.Policy {
		why = append(why, fmt.Sprintf("policy %s → %s", short(was.Policy), short(now.Policy)))
	}
	if was.Rootfs != now.Rootfs {
		why = append(why, fmt.Sprintf("rootfs %s → %s", short(was.Rootfs), short(now.Rootfs)))
	}
	return strings.Join(why, "; ")
}

func short(d string) string {
	d = strings.TrimPrefix(d, "sha256:")
	if len(d) > 12 {
		return d[:12]
	}
	return d
}

// checkDrift compares every live sandbox with the current identities.
func (d *Daemon) checkDrift(ctx context.Context) {
	defer func() { d.lastDrift.Store(time.Now().UnixNano()) }()
	d.refreshPolicy()
	recs, err := d.o.Store.DaemonSandboxes(ctx)
	if err != nil {
		return
	}
	host := d.refreshHost()
	for _, r := range recs {
		if r.State != store.DRunning && r.State != store.DCreated {
			continue
		}
		b, err := d.load(ctx, r.Name)
		if err != nil {
			continue
		}
		b.mu.Lock()
		var was Admitted
		_ = json.Unmarshal(b.rec.Admitted, &was)
		if why := drifted(was, d.current(b, host)); why != "" && b.rec.Drain == "" {
			if err := d.o.Store.UpdateDaemonSandbox(ctx, b.rec.Name, store.DaemonUpdate{Drain: &why}); err == nil {
				b.rec.Drain = why
				d.log.Warn("drift: sandbox draining", "name", b.rec.Name, "id", b.rec.ID, "owner", b.rec.OwnerUID, "why", why)
			}
		}
		b.mu.Unlock()
	}
}

func (d *Daemon) watchDrift(ctx context.Context) {
	t := time.NewTicker(d.o.DriftEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			d.checkDrift(ctx)
		}
	}
}

// opReadmit records the current identities and ends DRAIN.
func (d *Daemon) opReadmit(ctx context.Context, c *call) (any, error) {
	b, a, err := c.named(ctx)
	if err != nil {
		return nil, err
	}
	d.checkDrift(ctx) // read the host policy now
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rec.State != store.DRunning && b.rec.State != store.DCreated {
		return nil, proto.Errorf(proto.KindConflict, "sandbox %s is %s", a.Name, b.rec.State)
	}
	cur := d.current(b, d.hostNow())
	if strings.HasPrefix(cur.Policy, "invalid: ") {
		return nil, proto.Errorf(proto.KindBadRequest, "cannot re-admit: the policy is %s", cur.Policy)
	}
	j, _ := json.Marshal(cur)
	none := ""
	if err := d.o.Store.UpdateDaemonSandbox(ctx, b.rec.Name, store.DaemonUpdate{Admitted: j, Drain: &none}); err != nil {
		return nil, err
	}
	b.rec.Admitted, b.rec.Drain = j, ""
	// The gateway decides by the policy just admitted.
	if b.gw != nil && b.sb != nil && b.spec.Gateway != nil {
		if err := d.startGateway(ctx, b); err != nil {
			return nil, err
		}
	}
	d.log.Info("re-admitted", "name", a.Name, "id", b.rec.ID, "owner", b.rec.OwnerUID, "by", c.peer.UID)
	return d.info(b), nil
}
