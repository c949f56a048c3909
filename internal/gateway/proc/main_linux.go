package proc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/cordon-project/cordon/internal/broker/egress"
	"github.com/cordon-project/cordon/internal/broker/ingress"
	"github.com/cordon-project/cordon/internal/broker/model"
	"github.com/cordon-project/cordon/internal/broker/state"
	"github.com/cordon-project/cordon/internal/broker/tool"
	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/gateway/dial"
	"github.com/cordon-project/cordon/internal/gateway/wire"
)

// ChildMain is one broker process; os.Args[1] names its broker. It runs
// as the sandbox's gateway uid, with no capabilities, in an empty network
// namespace. Before it reads its configuration it sets no_new_privs and
// becomes non-dumpable; before it reads a byte of agent or upstream
// traffic it confines itself to a read-only Landlock domain and installs
// the broker seccomp filter (no socket of any family: its only way to a
// network destination is the privileged side's checked dialer).
func ChildMain() int {
	broker := ""
	if len(os.Args) > 1 {
		broker = os.Args[1]
	}
	if broker == SocketSource {
		return sourceMain()
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("component", "gateway", "broker", broker)
	fail := func(step string, err error) int {
		log.Error("gateway failed", "step", step, "err", err)
		return 1
	}
	if err := hardenEarly(); err != nil {
		return fail("harden", err)
	}
	b, err := io.ReadAll(io.LimitReader(os.NewFile(ConfigFD, "config"), 16<<20))
	if err != nil {
		return fail("read config", err)
	}
	var cfg Config
	if err := json.Unmarshal(b, &cfg); err != nil {
		return fail("parse config", err)
	}
	listeners := 1
	if broker == ingress.Name {
		listeners = len(cfg.Ingress.Routes) // one per route, at least one
	}
	if cfg.Broker != broker || len(cfg.Channels) != 1 || cfg.Channels[0] != broker || len(cfg.Listeners) != listeners || listeners == 0 {
		return fail("config", fmt.Errorf("configuration for broker %q, channels %v, listeners %v", cfg.Broker, cfg.Channels, cfg.Listeners))
	}
	// Read-only everywhere: the process writes nothing to any filesystem.
	if err := hardenFS(); err != nil {
		return fail("harden", err)
	}
	conn, err := net.FileConn(os.NewFile(FirstChannelFD, "authority-"+broker))
	if err != nil {
		return fail("authority channel", err)
	}
	channel := wire.NewClient(conn, broker)
	dconn, err := net.FileConn(os.NewFile(DialFD, "dialer"))
	if err != nil {
		return fail("dialer channel", err)
	}
	uc, ok := dconn.(*net.UnixConn)
	if !ok {
		return fail("dialer channel", errors.New("not a Unix socket"))
	}
	dc := dial.NewClient(broker, uc)
	if broker == ingress.Name {
		return ingressMain(cfg, channel, dc, log, fail)
	}
	handler, err := buildBroker(cfg, channel, dc, log)
	if err != nil {
		return fail("broker", err)
	}
	compromise(broker, cfg.Test, dc, log)
	ln, err := FileListener(os.NewFile(ListenFD, cfg.Listeners[0]))
	if err != nil {
		return fail("listener", err)
	}
	srv, lim := newServer(handler, ln, cfg.Identity, log)
	go func() { _ = srv.Serve(lim) }()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	if err := channel.Ready(); err != nil {
		return fail("report ready", err)
	}
	<-sigs
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = srv.Shutdown(ctx)
	return 0
}

// buildBroker builds the process's one broker. The seccomp filter is on
// before any broker reads an upstream byte; the egress broker is built
// just before it, because it reads this (empty) namespace's interface
// addresses once, at construction, over a netlink socket.
func buildBroker(cfg Config, channel *wire.Client, dc *dial.Client, log *slog.Logger) (http.Handler, error) {
	hardenNet := hardenNet
	if skipNetFilter(cfg.Broker, cfg.Test) { // test builds only: a positive control
		hardenNet = func() error { return nil }
	}
	switch cfg.Broker {
	case egress.Name:
		eo := cfg.Egress.Options()
		// The privileged side resolves and checks (again) every name and
		// address; the static answers live there.
		eo.Authority, eo.Logger = crossing.Remote{C: channel}, log
		eo.Resolve, eo.Resolver, eo.Dialer = nil, dc, dc.DialContext
		eb, err := egress.New(eo)
		if err != nil {
			return nil, err
		}
		return eb, hardenNet()
	case model.Name:
		if err := hardenNet(); err != nil {
			return nil, err
		}
		return modelHandler(cfg, crossing.Remote{C: channel}, model.NewTransport(dc.DialContext), log)
	case tool.Name:
		if err := hardenNet(); err != nil {
			return nil, err
		}
		tctx, tcancel := context.WithTimeout(context.Background(), ReadyTimeout-time.Second)
		defer tcancel()
		return buildTools(tctx, cfg, tool.Remote{C: channel}, toolTransport(dc.DialContext), log, ListenFD+1)
	case state.Name:
		if err := hardenNet(); err != nil {
			return nil, err
		}
		return state.New(state.Options{Authority: state.Remote{C: channel}, Logger: log})
	}
	return nil, fmt.Errorf("no such broker %q", cfg.Broker)
}

// toolTransport is the remote tool servers' transport: every connection
// comes from the checked dialer.
func toolTransport(dial func(ctx context.Context, network, addr string) (net.Conn, error)) http.RoundTripper {
	return &http.Transport{DialContext: dial, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 16,
		IdleConnTimeout: 90 * time.Second, TLSHandshakeTimeout: 10 * time.Second, ExpectContinueTimeout: time.Second}
}

// newServer is the process's HTTP server on its one listener.
func newServer(h http.Handler, ln net.Listener, id crossing.Identity, log *slog.Logger) (*http.Server, *connLimit) {
	lim := newConnLimit(ln, maxConnsPerListener)
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 30 * time.Second,
		// No ReadTimeout: in Go's server a read deadline that expires
		// while a handler streams cancels the request, which would cut
		// model streams longer than the timeout. A slow body is bounded
		// by the connection limit and the sandbox's memory cgroup.
		IdleTimeout:    5 * time.Minute,
		MaxHeaderBytes: 64 << 10,
		// The listener is the identity: one gateway per sandbox.
		ConnContext: func(ctx context.Context, _ net.Conn) context.Context { return crossing.WithIdentity(ctx, id) },
		ErrorLog:    slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		ConnState:   lim.connState,
	}, lim
}
