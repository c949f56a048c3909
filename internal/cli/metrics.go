package cli

import (
	"log/slog"

	"github.com/cordon-project/cordon/internal/metrics"
	"github.com/cordon-project/cordon/internal/store"
)

// startMetrics starts the daemon's metrics endpoint when
// --metrics-address is set: the registry observes every receipt the store
// commits and the daemon's lifecycle (the returned hook, for
// hostmgr.Options.Lifecycle), and serves in this process's network
// namespace — the host's, never a sandbox's. stop closes it. With no
// address it returns a nil hook and does nothing.
//
// `cordon run` has no such flag: a run lives for one program, often
// shorter than a scrape interval, and its receipts are in the store for
// the daemon (or `cordon receipts`) to read.
func (g *globals) startMetrics(st *store.Store, log *slog.Logger) (lifecycle func(string, error), stop func(), err error) {
	if g.daemonMetrics == "" {
		return nil, func() {}, nil
	}
	addr, err := metrics.ParseAddress(g.daemonMetrics)
	if err != nil {
		return nil, nil, err
	}
	m := metrics.New(metrics.Options{Records: st, StateDir: g.stateDir})
	srv, err := metrics.Listen(addr, m, log)
	if err != nil {
		return nil, nil, err
	}
	st.ObserveReceipts(m.ObserveReceipt)
	go func() {
		if err := srv.Serve(); err != nil {
			log.Error("metrics endpoint stopped", "err", err)
		}
	}()
	return m.Lifecycle, func() {
		st.ObserveReceipts(nil)
		_ = srv.Close()
	}, nil
}
