package linux

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/sandbox/linux/cgroup"
	"github.com/cordon-project/cordon/internal/store"
)

// Limits returns the limits a spec gets once defaults are applied.
func (p *Provider) Limits(spec sandbox.Spec) sandbox.Limits { return withDefaults(spec.Limits) }

// Report says what a reclamation did.
type Report struct {
	Reclaimed      []string `json:"reclaimed"`      // records of dead standalone runs, cleaned up
	Live           []string `json:"live"`           // records whose owner still runs
	Unattributable []string `json:"unattributable"` // cordon cgroups with no record here: reported, never touched
}

// Reclaim removes the residue of standalone runs whose owner is provably
// gone (boot id, pid and start time no longer match): their processes,
// cgroups and lease. It never touches a record owned by a live process,
// a non-"run" record, or a cgroup it has no record for — that may belong
// to another state directory. Daemon-owned sandboxes ("daemon" records)
// outlive their owner by design: only the daemon reconciles them (Attach,
// ReleaseRecord), never `cordon run` or `cordon gc`.
func Reclaim(ctx context.Context, st *store.Store, l cgroup.Layout) (Report, error) {
	recs, err := st.List(ctx)
	if err != nil {
		return Report{}, err
	}
	var rep Report
	var errs []error
	known := map[string]bool{}
	for _, r := range recs {
		known[r.ID], known[GatewayGroup(r.ID)] = true, true
		if r.Kind != "run" || store.Alive(r.Owner) {
			rep.Live = append(rep.Live, r.ID)
			continue
		}
		g := cgroup.Open(l, r.ID)
		if err := g.Remove(); err != nil {
			errs = append(errs, fmt.Errorf("reclaim %s: %w", r.ID, err))
			continue
		}
		if err := cgroup.Open(l, GatewayGroup(r.ID)).Remove(); err != nil {
			errs = append(errs, fmt.Errorf("reclaim the gateway of %s: %w", r.ID, err))
			continue
		}
		// Its gateway died with it: nothing it asked for stays live.
		if err := st.ReleaseCrossings(ctx, r.ID); err != nil {
			errs = append(errs, fmt.Errorf("release crossings of %s: %w", r.ID, err))
			continue
		}
		if err := st.Finish(ctx, r.ID); err != nil {
			errs = append(errs, fmt.Errorf("release lease of %s: %w", r.ID, err))
			continue
		}
		rep.Reclaimed = append(rep.Reclaimed, r.ID)
	}
	names, err := cgroup.Residue(l)
	if err != nil {
		errs = append(errs, err)
	}
	for _, n := range names {
		if !known[n] && !slices.Contains(rep.Unattributable, n) {
			rep.Unattributable = append(rep.Unattributable, n)
		}
	}
	return rep, errors.Join(errs...)
}

// Reclaim is Reclaim for this provider's store, which also removes the
// exec socket file a reclaimed record may have left in the state dir's
// run directory (and nothing of any record it did not reclaim).
func (p *Provider) Reclaim(ctx context.Context) (Report, error) {
	rep, err := Reclaim(ctx, p.opts.Store, p.layout)
	for _, id := range rep.Reclaimed {
		if !validID(id) {
			continue // not a name: never a path
		}
		if rerr := os.Remove(p.runSockPath(id)); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = errors.Join(err, fmt.Errorf("remove exec socket of %s: %w", id, rerr))
		}
	}
	return rep, err
}
