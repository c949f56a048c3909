package linux

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/failure"
	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/sandbox/linux/cgroup"
	"github.com/cordon-project/cordon/internal/store"
)

// NewID returns a fresh sandbox id (the daemon writes its record with it
// before provisioning).
func NewID() string { return newID() }

// NewID is NewID (sandbox.Resident).
func (p *Provider) NewID() string { return newID() }

// Reattach is Attach from the sandbox's host record in p's store
// (sandbox.Resident).
func (p *Provider) Reattach(ctx context.Context, id string, initPid int, initStart uint64) (sandbox.Sandbox, error) {
	rec, err := p.opts.Store.Get(ctx, id)
	if err != nil {
		return nil, failure.Fail(failure.KindStart, "attach", fmt.Errorf("sandbox %s: %w", id, err))
	}
	return p.Attach(ctx, rec, initPid, initStart)
}

// Release is ReleaseRecord in p's store (sandbox.Resident).
func (p *Provider) Release(ctx context.Context, id string) error {
	return ReleaseRecord(ctx, p.opts.Store, p, id)
}

// Residue names the cordon cgroups that belong to none of ids (neither a
// sandbox's nor its gateway's) (sandbox.Resident).
func (p *Provider) Residue(ids []string) ([]string, error) {
	known := map[string]bool{}
	for _, id := range ids {
		known[id], known[GatewayGroup(id)] = true, true
	}
	names, err := cgroup.Residue(p.layout)
	var out []string
	for _, n := range names {
		if !known[n] {
			out = append(out, n)
		}
	}
	return out, err
}

// ReleaseRecord releases the host resources of sandbox id from its
// record alone, when no live handle exists (a daemon that restarted):
// every process in its cgroups is killed, the cgroups removed, its run
// socket deleted and its write-ahead record deleted (releasing the
// lease). A missing record is not an error. Idempotent.
//
// It refuses (ErrLeaseHeld) while another process has a handle on the
// sandbox (run/<id>.lock: a daemon that spawned or attached it).
func ReleaseRecord(ctx context.Context, st *store.Store, p *Provider, id string) error {
	h, free, err := p.tryHandle(id)
	if err != nil {
		return failure.Fail(failure.KindProvision, "release", err)
	}
	if !free {
		return failure.Fail(failure.KindProvision, "release", fmt.Errorf("%w: sandbox %s: another process has a handle on it", ErrLeaseHeld, id))
	}
	defer p.releaseHandle(id, h)
	var errs []error
	g := cgroup.Open(p.Layout(), id)
	if err := g.Kill(); err != nil {
		errs = append(errs, fmt.Errorf("kill: %w", err))
	}
	if err := g.Remove(); err != nil {
		errs = append(errs, fmt.Errorf("remove cgroups: %w", err))
	}
	if err := cgroup.Open(p.Layout(), GatewayGroup(id)).Remove(); err != nil {
		errs = append(errs, fmt.Errorf("remove gateway cgroups: %w", err))
	}
	os.Remove(filepath.Join(p.opts.StateDir, "run", id+".sock"))
	if len(errs) == 0 {
		if err := st.Finish(ctx, id); err != nil && !errors.Is(err, store.ErrNotFound) {
			errs = append(errs, fmt.Errorf("release lease: %w", err))
		}
	}
	return errors.Join(errs...)
}

// openWorkspaceFile validates a workspace directory the caller opened and
// holds it for binding, exactly as a --workspace path would be checked
// (writable-bind owner rules, no Unix socket anywhere in it), but by the
// descriptor: no path is resolved.
func openWorkspaceFile(f *os.File, stateDir string, unsafeRoot bool) (*hostPath, error) {
	fd, err := unix.Openat(int(f.Fd()), ".", unix.O_PATH|unix.O_CLOEXEC|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, failure.Failf(failure.KindUsage, "workspace", "the workspace descriptor is not a directory: %v", err)
	}
	path, _ := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	h := &hostPath{fd: fd, path: path, writable: true, target: "/workspace"}
	if err := unix.Fstat(fd, &h.st); err != nil {
		h.close()
		return nil, failure.Fail(failure.KindUsage, "workspace", err)
	}
	for _, r := range refusedSources {
		if path == r || (r != "/" && under(path, r)) {
			h.close()
			return nil, failure.Failf(failure.KindPolicyRejected, "workspace", "%s may not be bound into a sandbox", path)
		}
	}
	if under(path, stateDir) || under(stateDir, path) {
		h.close()
		return nil, failure.Failf(failure.KindPolicyRejected, "workspace", "%s holds or is inside cordon's state directory", path)
	}
	if (h.st.Uid < minUserUID || h.st.Gid < minUserUID) && !unsafeRoot {
		h.close()
		return nil, failure.Failf(failure.KindPolicyRejected, "workspace", "%s is owned by %d:%d (root or a system account or group); a writable workspace needs a user's uid and gid >= %d", path, h.st.Uid, h.st.Gid, minUserUID)
	}
	if sock, err := findSocketFD(h.fd, 200000); err != nil {
		h.close()
		return nil, failure.Fail(failure.KindPolicyRejected, "workspace", err)
	} else if sock != "" {
		h.close()
		return nil, socketRefusal("workspace", path, sock)
	}
	return h, nil
}
