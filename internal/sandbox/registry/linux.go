package registry

import (
	"context"

	"github.com/cordon-project/cordon/internal/sandbox/linux"
)

func init() {
	Register(linux.ProviderName, func(o Options) (Provider, error) {
		p, err := linux.New(linux.Options{StateDir: o.StateDir, Store: o.Store, Logger: o.Logger,
			CordonSHA256: o.CordonSHA256, TestSkip: o.TestSkip, Daemon: o.Daemon})
		if err != nil {
			return nil, err
		}
		return &native{Provider: p, o: o}, nil
	})
}

// native is the Linux provider with its residue reclamation.
type native struct {
	*linux.Provider
	o Options
}

func (n *native) Reclaim(ctx context.Context) (ReclaimReport, error) {
	// The provider's Reclaim: the package's, and the exec sockets of the
	// records it reclaimed (standalone sandboxes with Spec.Execs).
	r, err := n.Provider.Reclaim(ctx)
	return ReclaimReport(r), err
}
