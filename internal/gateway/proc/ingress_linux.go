package proc

import (
	"context"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/cordon-project/cordon/internal/broker/ingress"
	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/gateway/dial"
	"github.com/cordon-project/cordon/internal/gateway/wire"
)

// ingressMain is the ingress broker process after its channels are up:
// the seccomp filter goes on before it accepts a connection, then it
// serves every route's host listener (descriptors ListenFD on, one per
// route) until it is told to stop.
func ingressMain(cfg Config, channel *wire.Client, dc *dial.Client, log *slog.Logger, fail func(string, error) int) int {
	hardenNet := hardenNet
	if skipNetFilter(cfg.Broker, cfg.Test) { // test builds only: a positive control
		hardenNet = func() error { return nil }
	}
	if err := hardenNet(); err != nil {
		return fail("harden", err)
	}
	compromise(cfg.Broker, cfg.Test, dc, log) // test builds only
	var lns []net.Listener
	for i, name := range cfg.Listeners {
		ln, err := FileListener(os.NewFile(uintptr(ListenFD+i), "ingress-"+name))
		if err != nil {
			return fail("listener", err)
		}
		lns = append(lns, ln)
	}
	b, err := ingress.New(ingress.Options{Routes: cfg.Ingress.Routes, Listeners: lns, Identity: cfg.Identity,
		Authority: crossing.Remote{C: channel}, Dial: dc.DialContext, Logger: log})
	if err != nil {
		return fail("broker", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan struct{})
	go func() {
		defer close(served)
		b.Serve(ctx)
	}()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	if err := channel.Ready(); err != nil {
		return fail("report ready", err)
	}
	<-sigs
	cancel()
	<-served
	return 0
}
