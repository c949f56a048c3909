package telemetry

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/cordon-project/cordon/internal/failure"
)

// Settings say where traces go. The zero value exports nothing (ids are
// still made and written into receipts).
type Settings struct {
	// Endpoint is the full URL the OTLP/HTTP exporter posts traces to
	// (http://host:4318/v1/traces); empty: export is off.
	Endpoint string
	// Headers are sent with every export (an collector's auth token).
	// Never logged, never exported, never given to a sandbox.
	Headers map[string]string
	// ServiceName is the resource's service.name; default "cordon".
	ServiceName string
}

// Enabled reports whether traces are exported.
func (s Settings) Enabled() bool { return s.Endpoint != "" }

// DefaultServiceName is service.name when neither the config nor
// OTEL_SERVICE_NAME names one.
const DefaultServiceName = "cordon"

// defaultEndpoint is where OTEL_TRACES_EXPORTER=otlp alone sends traces
// (the OpenTelemetry default for OTLP/HTTP).
const defaultEndpoint = "http://localhost:4318/v1/traces"

// Env are the variables Resolve reads, all of cordon's own (root-side)
// environment. None of them reaches a sandbox: the sandbox's environment
// is built from scratch (internal/gateway env.go, internal/launch).
var Env = []string{
	"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER",
	"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
	"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
	"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
	"OTEL_SERVICE_NAME",
}

// Resolve combines the config file's settings (file; its Endpoint is a
// base URL, to which /v1/traces is added when it has no path) with the
// standard variables getenv reads:
//
//   - OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none turn export
//     off, whatever the file says (the operator's switch);
//   - the endpoint is the file's, else OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
//     as is, else OTEL_EXPORTER_OTLP_ENDPOINT plus /v1/traces, else
//     (OTEL_TRACES_EXPORTER=otlp only) http://localhost:4318/v1/traces;
//     nothing set: off;
//   - headers are OTEL_EXPORTER_OTLP_HEADERS, then
//     OTEL_EXPORTER_OTLP_TRACES_HEADERS, then the file's, later ones
//     winning;
//   - the service name is the file's, else OTEL_SERVICE_NAME, else
//     "cordon".
//
// Only OTLP over http/protobuf is spoken: any other exporter or protocol
// is a configuration error, never a silent drop.
func Resolve(file Settings, getenv func(string) string) (Settings, error) {
	out := Settings{ServiceName: file.ServiceName}
	if out.ServiceName == "" {
		out.ServiceName = getenv("OTEL_SERVICE_NAME")
	}
	if out.ServiceName == "" {
		out.ServiceName = DefaultServiceName
	}
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return out, nil
	}
	exporter := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))
	switch exporter {
	case "none":
		return out, nil
	case "", "otlp":
	default:
		return out, failure.Failf(failure.KindUsage, "telemetry", "OTEL_TRACES_EXPORTER=%q: cordon exports traces only over otlp (or none)", clip(exporter, 40))
	}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
		if p := strings.TrimSpace(getenv(v)); p != "" && p != "http/protobuf" {
			return out, failure.Failf(failure.KindUsage, "telemetry", "%s=%q: cordon exports traces only over http/protobuf", v, clip(p, 40))
		}
	}
	var err error
	switch {
	case file.Endpoint != "":
		out.Endpoint, err = baseEndpoint(file.Endpoint)
	case getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "":
		out.Endpoint, err = checkEndpoint(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
	case getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "":
		out.Endpoint, err = baseEndpoint(getenv("OTEL_EXPORTER_OTLP_ENDPOINT"))
	case exporter == "otlp":
		out.Endpoint = defaultEndpoint
	}
	if err != nil {
		return Settings{}, err
	}
	if out.Endpoint == "" {
		return out, nil
	}
	out.Headers = map[string]string{}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"} {
		if err := parseHeaders(getenv(v), out.Headers); err != nil {
			return Settings{}, failure.Failf(failure.KindUsage, "telemetry", "%s: %v", v, err)
		}
	}
	for k, v := range file.Headers {
		if !headerName.MatchString(k) || !headerValue(v) {
			return Settings{}, failure.Failf(failure.KindUsage, "telemetry", "telemetry.traces.headers: %q is not an HTTP header name and printable value", clip(k, 40))
		}
		out.Headers[k] = v
	}
	return out, nil
}

// headerName is an HTTP header name (a token): net/http refuses to send
// any other, and every export would fail.
var headerName = regexp.MustCompile(`^[A-Za-z0-9!#$%&'*+.^_|~-]{1,128}$`)

// headerValue reports whether net/http sends v as a header value: no
// control character but a tab.
func headerValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// checkEndpoint accepts an http or https URL with a host and no
// credentials, query or fragment. Errors never quote the URL (it may
// carry a token by mistake).
func checkEndpoint(raw string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", failure.Failf(failure.KindUsage, "telemetry", "the trace endpoint is not an http(s)://host[:port][/path] URL without credentials, query or fragment")
	}
	return u.String(), nil
}

// baseEndpoint is checkEndpoint of a base URL: /v1/traces is added when
// it has no path of its own.
func baseEndpoint(raw string) (string, error) {
	s, err := checkEndpoint(raw)
	if err != nil {
		return "", err
	}
	u, _ := url.Parse(s)
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
	}
	return u.String(), nil
}

// parseHeaders reads the OTEL_EXPORTER_OTLP_HEADERS form: key=value pairs
// separated by commas, values URL-encoded. Errors never quote a value.
func parseHeaders(s string, into map[string]string) error {
	for i, kv := range strings.Split(s, ",") {
		if strings.TrimSpace(kv) == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok || !headerName.MatchString(k) {
			return fmt.Errorf("entry %d is not key=value with an HTTP header name", i+1)
		}
		dv, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil || !headerValue(dv) {
			return fmt.Errorf("the value of %s is not URL-encoded text", clip(k, 40))
		}
		into[k] = dv
	}
	return nil
}

// clip bounds s for an error or an attribute, valid UTF-8 cut on a rune
// boundary: OTLP's protobuf refuses to marshal invalid UTF-8, and one
// such string would drop the whole export batch.
func clip(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
