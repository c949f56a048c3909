package proc

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cordon-project/cordon/internal/broker/egress"
	"github.com/cordon-project/cordon/internal/broker/model"
	"github.com/cordon-project/cordon/internal/broker/tool"
	"github.com/cordon-project/cordon/internal/crossing"
)

// secrets is a broker process's copy of the custodied values its broker
// names (and no other broker's).
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

// BuildHandlers builds the model and egress brokers of cfg in this
// process, each speaking to the root side over its own authority channel
// in channels and dialling upstreams itself (the root side's tests drive
// the brokers through it; broker processes use buildBroker).
func BuildHandlers(cfg Config, channels map[string]crossing.Caller, log *slog.Logger) (map[string]http.Handler, error) {
	mb, err := modelHandler(cfg, crossing.Remote{C: channels[model.Name]}, nil, log)
	if err != nil {
		return nil, err
	}
	eo := cfg.Egress.Options()
	eo.Authority, eo.Logger = crossing.Remote{C: channels[egress.Name]}, log
	eb, err := egress.New(eo)
	if err != nil {
		return nil, err
	}
	return map[string]http.Handler{"model": mb, "egress": eb}, nil
}

// modelHandler is the model broker of cfg's routes (a refusing handler
// when there are none); transport nil is the broker's own.
func modelHandler(cfg Config, authority crossing.Authority, transport http.RoundTripper, log *slog.Logger) (http.Handler, error) {
	if len(cfg.Model.Routes) == 0 {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "cordon: this workload has no model routes", http.StatusForbidden)
		}), nil
	}
	routes, err := cfg.Model.ResolveRoutes()
	if err != nil {
		return nil, err
	}
	return model.New(model.Options{Routes: routes, Limits: cfg.Model.Limits, Authority: authority,
		Secrets: secrets(cfg.Secrets), Logger: log, Transport: transport})
}

// buildTools connects to every upstream tool server — stdio servers over
// the pipes starting at descriptor fd, remote ones over streamable HTTP
// with their credential — and builds the tool broker.
func buildTools(ctx context.Context, cfg Config, authority tool.Authority, base http.RoundTripper, log *slog.Logger, fd int) (*tool.Broker, error) {
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
				Transport: &bearer{base: base, secrets: secrets(cfg.Secrets), name: ts.Credential, scheme: u.Scheme, host: u.Host},
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
