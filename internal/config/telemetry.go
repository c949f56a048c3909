package config

import (
	"net/url"
	"regexp"
	"sort"
)

// Telemetry is where the root side exports each session's trace
// (internal/telemetry, docs/tracing.md). Empty: the standard OTEL_*
// variables of cordon's own environment decide, and without them
// nothing is exported. A daemon ignores a client's section (its own
// environment decides for every sandbox it runs).
type Telemetry struct {
	// Traces configures OTLP/HTTP trace export. Key: traces.
	Traces Traces
}

// Traces is the OTLP/HTTP trace exporter's configuration.
type Traces struct {
	// Endpoint is the collector's OTLP/HTTP URL, http or https, without
	// credentials, query or fragment; /v1/traces is added when it has no
	// path. Key: endpoint.
	Endpoint string
	// Headers are sent with every export. They are in the file in the
	// clear: a token belongs in OTEL_EXPORTER_OTLP_HEADERS of cordon's
	// environment instead. Key: headers.
	Headers map[string]string
	// ServiceName is the resource's service.name. Key: service_name.
	ServiceName string
}

type rawTelemetry struct {
	Traces rawTraces `yaml:"traces"`
}

type rawTraces struct {
	Endpoint    string            `yaml:"endpoint"`
	Headers     map[string]string `yaml:"headers"`
	ServiceName string            `yaml:"service_name"`
}

var headerNameRE = regexp.MustCompile(`^[A-Za-z0-9!#$%&'*+.^_|~-]{1,128}$`)

func buildTelemetry(c *Config, raw *rawTelemetry, ix *index) {
	t := raw.Traces
	c.Telemetry.Traces = Traces{ServiceName: t.ServiceName}
	if t.Endpoint != "" {
		// Never quoted in the error: a URL may carry a token by mistake.
		u, err := url.Parse(t.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			ix.errf("telemetry.traces.endpoint", "want an http(s)://host[:port][/path] URL without credentials, query or fragment")
		}
		c.Telemetry.Traces.Endpoint = t.Endpoint
	}
	if len(t.ServiceName) > 128 {
		ix.errf("telemetry.traces.service_name", "is %d bytes; want at most 128", len(t.ServiceName))
	}
	names := make([]string, 0, len(t.Headers))
	for k := range t.Headers {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		v := t.Headers[k]
		switch {
		case !headerNameRE.MatchString(k):
			ix.errf("telemetry.traces.headers", "header name %q: want an HTTP header name", clipName(k))
		case len(v) > 4096 || !printable(v):
			ix.errf(join("telemetry.traces.headers", k), "want printable text of at most 4096 bytes")
		}
		if c.Telemetry.Traces.Headers == nil {
			c.Telemetry.Traces.Headers = map[string]string{}
		}
		c.Telemetry.Traces.Headers[k] = v
	}
}

func printable(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

func clipName(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
