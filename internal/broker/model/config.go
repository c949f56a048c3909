package model

import (
	"fmt"
	"net/url"
)

// Config is the model broker's configuration: internal/config builds it
// from the file (config.Config.ModelConfig) and the gateway process hands
// it to New as it came over the config pipe. New validates it again.
type Config struct {
	Routes []RouteConfig `json:"routes,omitempty"`
	Limits Limits        `json:"limits"`
}

// RouteConfig is one declared model destination as configured; Resolve
// parses it into a Route.
type RouteConfig struct {
	Name       string   `json:"name"`
	API        string   `json:"api"`        // "anthropic" | "openai" | "gemini"
	Upstream   string   `json:"upstream"`   // absolute http(s) URL of the provider's origin
	Credential string   `json:"credential"` // secret name for crossing.Secrets
	Models     []string `json:"models"`     // allowed model ids, as path.Match globs
}

// ResolveRoutes parses every route's upstream.
func (c Config) ResolveRoutes() ([]Route, error) {
	var out []Route
	for _, r := range c.Routes {
		u, err := url.Parse(r.Upstream)
		if err != nil {
			return nil, fmt.Errorf("route %s: %w", r.Name, err)
		}
		out = append(out, Route{Name: r.Name, API: r.API, Upstream: u, Credential: r.Credential, Models: r.Models})
	}
	return out, nil
}
