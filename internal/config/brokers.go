package config

import (
	"maps"
	"net/netip"
	"slices"

	"github.com/cordon-project/cordon/internal/broker/egress"
	"github.com/cordon-project/cordon/internal/broker/model"
	"github.com/cordon-project/cordon/internal/broker/tool"
)

// Each broker's configuration is its own type, in its folder
// (internal/broker/<name>); these build it from the file, once, and the
// gateway process gets it as built.

// ModelConfig is the model broker's configuration: the models routes and
// the limits that bound a model request.
func (c *Config) ModelConfig() model.Config {
	out := model.Config{Limits: model.Limits{
		MaxRequestBytes: c.Limits.MaxRequestBytes, MaxResponseBytes: c.Limits.MaxResponseBytes,
		MaxAttachments: c.Limits.MaxAttachments, MaxAttachmentBytes: c.Limits.MaxAttachmentBytes,
		AllowedMIME:            c.Limits.AllowedAttachmentMIME,
		MaxConcurrentStreams:   streamsLimit(c.Budgets.ConcurrentStreams),
		DefaultMaxOutputTokens: c.Limits.DefaultMaxOutputTokens,
	}}
	for _, m := range c.Models {
		out.Routes = append(out.Routes, model.RouteConfig{Name: m.Name, API: m.API, Upstream: m.Upstream, Credential: m.Credential, Models: m.Models})
	}
	return out
}

// streamsLimit is the model broker's per-process stream bound: the
// budget's concurrent streams, or effectively unbounded (the store still
// counts them).
func streamsLimit(n int64) int64 {
	if n > 0 {
		return n
	}
	return 1 << 20
}

// EgressConfig is the egress broker's configuration: the egress block.
func (c *Config) EgressConfig() egress.Config { return c.Egress.BrokerConfig() }

// BrokerConfig is e as the egress broker's configuration (a tool server's
// own egress block too).
func (e Egress) BrokerConfig() egress.Config {
	out := egress.Config{Resolve: map[string][]netip.Addr{}}
	for _, r := range e.Allow {
		out.Allow = append(out.Allow, egress.Rule{Host: r.Host, Ports: r.Ports})
	}
	out.UnsafeAllowRanges = append(out.UnsafeAllowRanges, e.UnsafeAllowRanges...)
	for h, a := range e.Resolve {
		out.Resolve[h] = []netip.Addr{a}
	}
	return out
}

// ToolConfig is the tool broker's configuration: the tool servers as the
// gateway process reaches them, and the MCP limits.
func (c *Config) ToolConfig() tool.Config {
	out := tool.Config{
		Limits: tool.Limits{MaxFrameBytes: int(c.Limits.MaxMCPMessageBytes), MaxArgumentBytes: int(c.Limits.MaxToolArgumentBytes),
			MaxResultBytes: int(c.Limits.MaxToolResultBytes)},
		ApprovalWait: c.Approvals.Wait,
	}
	for _, t := range c.Tools {
		sc := tool.ServerConfig{Name: t.Name, Allow: t.Allow, Timeout: t.Timeout, Stdio: len(t.Command) > 0,
			URL: t.URL, Credential: t.Credential}
		for _, k := range slices.Sorted(maps.Keys(t.SecretEnv)) {
			sc.SecretEnv = append(sc.SecretEnv, t.SecretEnv[k])
		}
		out.Servers = append(out.Servers, sc)
	}
	return out
}
