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
	"net/url"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/landlock-lsm/go-landlock/landlock"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/broker/egress"
	"github.com/cordon-project/cordon/internal/broker/model"
	"github.com/cordon-project/cordon/internal/broker/state"
	"github.com/cordon-project/cordon/internal/broker/tool"
	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/gateway/wire"
)

// secrets is the gateway's copy of the custodied values.
type secrets map[string][]byte

func (s secrets) Secret(name string) ([]byte, error) {
	v, ok := s[name]
	if !ok {
		return nil, fmt.Errorf("secret %q is not custodied", name)
	}
	return v, nil
}

func (s secrets) Values() [][]byte {
	out := make([][]byte, 0, len(s))
	for _, v := range s {
		out = append(out, v)
	}
	return out
}

// ChildMain is the gateway process. It runs as nobody; before it reads a
// byte of agent traffic it sets no_new_privs, becomes non-dumpable and
// confines itself to a read-only Landlock domain.
func ChildMain() int {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("component", "gateway")
	fail := func(step string, err error) int {
		log.Error("gateway failed", "step", step, "err", err)
		return 1
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fail("no_new_privs", err)
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fail("dumpable", err)
	}
	b, err := io.ReadAll(io.LimitReader(os.NewFile(ConfigFD, "config"), 16<<20))
	if err != nil {
		return fail("read config", err)
	}
	var cfg Config
	if err := json.Unmarshal(b, &cfg); err != nil {
		return fail("parse config", err)
	}
	// Read-only everywhere: the gateway writes nothing to any filesystem.
	if err := landlock.V5.BestEffort().RestrictPaths(landlock.RODirs("/")); err != nil {
		return fail("landlock", err)
	}
	channels := map[string]*wire.Client{}
	for i, broker := range cfg.Channels {
		conn, err := net.FileConn(os.NewFile(uintptr(FirstChannelFD+i), "authority-"+broker))
		if err != nil {
			return fail("authority channel "+broker, err)
		}
		channels[broker] = wire.NewClient(conn, broker)
	}
	for _, broker := range []string{model.Name, egress.Name, tool.Name, state.Name} {
		if channels[broker] == nil {
			return fail("authority channel "+broker, errors.New("missing"))
		}
	}
	firstListen := FirstChannelFD + len(cfg.Channels)
	callers := map[string]crossing.Caller{}
	for b, c := range channels {
		callers[b] = c
	}
	handlers, err := BuildHandlers(cfg, callers, log)
	if err != nil {
		return fail("brokers", err)
	}
	tctx, tcancel := context.WithTimeout(context.Background(), ReadyTimeout-time.Second)
	tb, err := buildTools(tctx, cfg, tool.Remote{C: channels[tool.Name]}, log, firstListen+len(cfg.Listeners))
	tcancel()
	if err != nil {
		return fail("tool broker", err)
	}
	handlers["tools"] = tb
	if handlers["state"], err = state.New(state.Options{Authority: state.Remote{C: channels[state.Name]}, Logger: log}); err != nil {
		return fail("state broker", err)
	}
	var servers []*http.Server
	var wg sync.WaitGroup
	for i, name := range cfg.Listeners {
		ln, err := FileListener(os.NewFile(uintptr(firstListen+i), name))
		if err != nil {
			return fail("listener "+name, err)
		}
		lim := newConnLimit(ln, maxConnsPerListener)
		id := cfg.Identity
		srv := &http.Server{
			Handler:           handlers[name],
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
		}
		servers = append(servers, srv)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = srv.Serve(lim)
		}()
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	if err := channels[model.Name].Ready(); err != nil {
		return fail("report ready", err)
	}
	<-sigs
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for _, s := range servers {
		_ = s.Shutdown(ctx)
	}
	return 0
}

// BuildHandlers builds the model and egress brokers, each speaking to the
// root side over its own authority channel in channels.
func BuildHandlers(cfg Config, channels map[string]crossing.Caller, log *slog.Logger) (map[string]http.Handler, error) {
	var mb http.Handler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "cordon: this workload has no model routes", http.StatusForbidden)
	})
	if len(cfg.Model.Routes) > 0 {
		routes, err := cfg.Model.ResolveRoutes()
		if err != nil {
			return nil, err
		}
		mb, err = model.New(model.Options{Routes: routes, Limits: cfg.Model.Limits, Authority: crossing.Remote{C: channels[model.Name]},
			Secrets: secrets(cfg.Secrets), Logger: log})
		if err != nil {
			return nil, err
		}
	}
	eo := cfg.Egress.Options()
	eo.Authority, eo.Logger = crossing.Remote{C: channels[egress.Name]}, log
	eb, err := egress.New(eo)
	if err != nil {
		return nil, err
	}
	return map[string]http.Handler{"model": mb, "egress": eb}, nil
}

// buildTools connects to every upstream tool server — stdio servers over
// the pipes starting at descriptor fd, remote ones over streamable HTTP
// with their credential — and builds the tool broker.
func buildTools(ctx context.Context, cfg Config, authority tool.Authority, log *slog.Logger, fd int) (*tool.Broker, error) {
	client := mcp.NewClient(&mcp.Implementation{Name: "cordon-gateway", Version: cfg.Version}, nil)
	var ups []tool.Upstream
	for _, ts := range cfg.Tool.Servers {
		var t mcp.Transport
		switch {
		case ts.Stdio:
			in, out := os.NewFile(uintptr(fd), "tool-in-"+ts.Name), os.NewFile(uintptr(fd+1), "tool-out-"+ts.Name)
			fd += 2
			t = &mcp.IOTransport{Reader: out, Writer: in, MaxLineLength: 4 << 20}
		case ts.URL != "":
			u, err := url.Parse(ts.URL)
			if err != nil {
				return nil, fmt.Errorf("tool server %s: %w", ts.Name, err)
			}
			hc := &http.Client{
				Transport: &bearer{base: http.DefaultTransport, secrets: secrets(cfg.Secrets), name: ts.Credential, scheme: u.Scheme, host: u.Host},
				// No redirects: the declared URL is the only destination.
				CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
			}
			t = &mcp.StreamableClientTransport{Endpoint: ts.URL, HTTPClient: hc, DisableStandaloneSSE: true, MaxRetries: -1}
		default:
			return nil, fmt.Errorf("tool server %s: no transport", ts.Name)
		}
		cs, err := client.Connect(ctx, t, nil)
		if err != nil {
			return nil, fmt.Errorf("tool server %s: connect: %w", ts.Name, err)
		}
		ups = append(ups, tool.Upstream{Name: ts.Name, Session: cs, Allow: ts.Allow, Timeout: ts.Timeout})
	}
	return tool.New(ctx, tool.Options{
		Identity: cfg.Identity, Upstreams: ups, Authority: authority, Secrets: secrets(cfg.Secrets), Logger: log, Version: cfg.Version,
		Limits: cfg.Tool.Limits, ApprovalWait: cfg.Tool.ApprovalWait,
	})
}

// bearer sends a remote tool server its custodied credential. The agent
// never sees it: the gateway adds it to the gateway's own requests.
type bearer struct {
	base         http.RoundTripper
	secrets      secrets
	name         string
	scheme, host string // the declared URL's: the only destination
}

func (b *bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Scheme != b.scheme || r.URL.Host != b.host {
		return nil, fmt.Errorf("tool server request to %s://%s: not the declared server", r.URL.Scheme, r.URL.Host)
	}
	if b.name == "" {
		return b.base.RoundTrip(r)
	}
	v, err := b.secrets.Secret(b.name)
	if err != nil {
		return nil, err
	}
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(v))
	return b.base.RoundTrip(r)
}

// maxConnsPerListener bounds the agent's concurrent connections to one
// gateway listener; further connections wait in the kernel's backlog.
const maxConnsPerListener = 256

// connLimit admits at most n connections at once: Accept takes a slot,
// the server's ConnState hook gives it back when the connection is closed
// or hijacked (a CONNECT tunnel is then bounded by the egress budget). The
// connection itself is not wrapped, so the egress broker keeps splice.
type connLimit struct {
	net.Listener
	sem chan struct{}
}

func newConnLimit(l net.Listener, n int) *connLimit {
	return &connLimit{Listener: l, sem: make(chan struct{}, n)}
}

func (l *connLimit) Accept() (net.Conn, error) {
	l.sem <- struct{}{}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
	}
	return c, err
}

func (l *connLimit) connState(_ net.Conn, st http.ConnState) {
	if st == http.StateClosed || st == http.StateHijacked {
		<-l.sem
	}
}

// FileListener turns a listener file into a net.Listener.
func FileListener(f *os.File) (net.Listener, error) {
	defer f.Close()
	return net.FileListener(f)
}
