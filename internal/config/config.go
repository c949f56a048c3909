package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/cordon-project/cordon/internal/custody"
	"github.com/cordon-project/cordon/internal/safefile"

	"gopkg.in/yaml.v3"

	"github.com/cordon-project/cordon/internal/crossing"
)

// Version is the only schema version this package reads.
const Version = "cordon/v1"

// MaxFileBytes bounds a configuration file.
const MaxFileBytes = 1 << 20

// The model APIs a model upstream may speak.
const (
	APIAnthropic = "anthropic"
	APIOpenAI    = "openai"
	APIGemini    = "gemini"
)

// Defaults for the limits block; each applies when its key is absent.
const (
	DefaultMaxRequestBytes    = 32 << 20
	DefaultMaxResponseBytes   = 64 << 20
	DefaultMaxAttachments     = 20
	DefaultMaxAttachmentBytes = 10 << 20
)

// DefaultAttachmentMIME is the default for limits.allowed_attachment_mime.
var DefaultAttachmentMIME = []string{"image/png", "image/jpeg", "image/gif", "image/webp", "application/pdf"}

// Config is a validated configuration. Only Parse and Load make one; do
// not build or modify one by hand, the brokers rely on its invariants.
type Config struct {
	// Version is the schema version; always "cordon/v1". Key: version.
	Version string
	// Workload is the declared workload: the scope of budgets, policy and
	// state, shared by all of its sandboxes. 1–64 of [A-Za-z0-9._-], not
	// "." or "..". Key: workload.
	Workload string
	// Tenant owns the workload; same syntax as Workload. Key: tenant.
	Tenant string
	// Purpose says what the workload is for (policy input); same syntax as
	// Workload. Key: purpose.
	Purpose string
	// Egress is what the egress broker may connect to. Key: egress.
	Egress Egress
	// Models are the model upstreams the model broker may call, in file
	// order. Key: models.
	Models []Model
	// Budgets are the workload's budgets. Key: budgets.
	Budgets Budgets
	// Limits bound each model request. Key: limits.
	Limits Limits
	// Secrets maps a secret's name to where the custodian reads its value.
	// Key: secrets.
	Secrets map[string]Secret
	// Tools are the upstream MCP tool servers the tool broker offers, in
	// file order. Key: tools.
	Tools []Tool
	// Approvals configure how calls wait for approval. Key: approvals.
	Approvals Approvals
	// State bounds the workload's managed state (the state broker). Key:
	// state.
	State State
	// Crossings bound the host work and store growth of one sandbox's
	// crossings (crossings.go). Key: crossings.
	Crossings Crossings
	// Ingress are the declared inbound routes into the sandbox, in file
	// order (ingress.go); none: nothing reaches in. Key: ingress.
	Ingress []IngressRoute
	// Policy lists the Cedar policy files every crossing must also
	// satisfy, in order (package policy loads and validates them). Each is
	// an existing regular file, listed once; relative paths in the file
	// are resolved against the directory of the configuration file, and
	// Policy holds the resolved, clean paths. Empty: the built-in
	// permit-all policy, and the allow-lists decide alone. Key: policy.
	Policy []string
	// Telemetry is where the session's trace is exported (telemetry.go).
	// Key: telemetry.
	Telemetry Telemetry

	// Source is the name the configuration was parsed from.
	Source string
	// Digest is "sha256:" and the hex SHA-256 of the file's bytes.
	Digest string
}

// Egress is the egress allow-list. Everything not allowed is denied.
type Egress struct {
	// Allow lists the destinations the agent may reach through the egress
	// broker. Key: allow.
	Allow []EgressRule
	// UnsafeAllowRanges are address ranges the broker may connect to even
	// though they are loopback, private, link-local or otherwise special,
	// which are denied by default. Canonical CIDRs (no host bits set).
	// Weakens isolation: each one is reported by Warnings. Key:
	// unsafe_allow_ranges.
	UnsafeAllowRanges []netip.Prefix
	// Resolve maps a host name to the address the broker connects to instead
	// of asking DNS, like curl --resolve. The address still passes the range
	// checks. Key: resolve.
	Resolve map[string]netip.Addr
}

// EgressRule allows connections to Host on any of Ports.
type EgressRule struct {
	// Host is a lower-case DNS name ("api.github.com") or a wildcard
	// "*.suffix" matching any name strictly below suffix, which needs at
	// least two labels ("*.example.org" matches "a.example.org" and
	// "a.b.example.org", not "example.org"). No IP literals, no port, no
	// trailing dot. Key: host.
	Host string
	// Ports are the allowed TCP ports, 1–65535; at least one. Key: ports.
	Ports []int
}

// Match reports whether the rule allows host:port. host is compared
// case-insensitively and may carry one trailing dot.
func (r EgressRule) Match(host string, port int) bool {
	if !r.matchHost(host) {
		return false
	}
	for _, p := range r.Ports {
		if p == port {
			return true
		}
	}
	return false
}

func (r EgressRule) matchHost(host string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if suffix, ok := strings.CutPrefix(r.Host, "*"); ok {
		// suffix is ".example.org": host needs at least one more label.
		return len(host) > len(suffix) && strings.HasSuffix(host, suffix) && host[0] != '.'
	}
	return host == r.Host
}

// Model is one model upstream.
type Model struct {
	// Name identifies the upstream in receipts and logs; unique; same syntax
	// as Config.Workload. Key: name.
	Name string
	// API is the wire protocol: "anthropic", "openai" or "gemini" (the
	// Gemini API's generateContent, streamGenerateContent and
	// countTokens under /v1beta/models/). Key: api.
	API string
	// Upstream is the base URL requests are forwarded to: absolute http or
	// https, with a host, without user information, query or fragment.
	// Key: upstream.
	Upstream string
	// UpstreamURL is Upstream parsed.
	UpstreamURL *url.URL
	// Credential names the secret (a key of Config.Secrets) the broker
	// injects toward Upstream. Key: credential.
	Credential string
	// Models are the model ids the agent may ask for, as path.Match globs
	// ("claude-*"); others are refused. At least one. Key: models.
	Models []string
}

// Allows reports whether the model id matches one of m.Models.
func (m Model) Allows(id string) bool {
	for _, g := range m.Models {
		if ok, _ := path.Match(g, id); ok {
			return true
		}
	}
	return false
}

// Budgets are per workload, persisted and shared by all of its sandboxes.
// Zero means unlimited.
type Budgets struct {
	// Window, when set, makes the budgets apply per rolling window of this
	// length ("24h", "90m", "7d"); without it they cover the workload's
	// whole lifetime. Key: window.
	Window time.Duration
	// Requests is the number of model requests. Key: requests.
	Requests int64
	// InputTokens is the number of model input tokens. Key: input_tokens.
	InputTokens int64
	// OutputTokens is the number of model output tokens. Key: output_tokens.
	OutputTokens int64
	// EgressBytes is the number of bytes through the egress broker, both
	// directions; a size ("1GiB", "512M", 1048576; 1024-based). Key:
	// egress_bytes.
	EgressBytes int64
	// Connections is the number of egress connections. Key: connections.
	Connections int64
	// ConcurrentStreams is the number of model streams open at once. Key:
	// concurrent_streams.
	ConcurrentStreams int64
	// ToolCalls is the number of tool calls. Key: tool_calls.
	ToolCalls int64
	// IngressConnections is the number of connections admitted through
	// the inbound routes. Key: ingress_connections.
	IngressConnections int64
	// IngressBytes is the number of bytes relayed through the inbound
	// routes, both directions; a size. Key: ingress_bytes.
	IngressBytes int64
}

// Limits returns the budgets as the authority's limits (zero is unlimited).
// ConcurrentStreams and Window are not amounts and are not included.
func (b Budgets) Limits() crossing.Amount {
	return crossing.Amount{
		Requests:     b.Requests,
		InputTokens:  b.InputTokens,
		OutputTokens: b.OutputTokens,
		EgressBytes:  b.EgressBytes,
		Connections:  b.Connections,

		IngressConnections: b.IngressConnections,
		IngressBytes:       b.IngressBytes,
	}
}

// Limits bound each model request. Every field has a default.
type Limits struct {
	// MaxRequestBytes bounds a request body from the agent; a size, > 0.
	// Default 32MiB. Key: max_request_bytes.
	MaxRequestBytes int64
	// MaxResponseBytes bounds a response body from the upstream; a size,
	// > 0. Default 64MiB. Key: max_response_bytes.
	MaxResponseBytes int64
	// MaxAttachments bounds the images and documents in one request; 0
	// refuses all. Default 20. Key: max_attachments.
	MaxAttachments int
	// MaxAttachmentBytes bounds one decoded attachment; a size, > 0.
	// Default 10MiB. Key: max_attachment_bytes.
	MaxAttachmentBytes int64
	// AllowedAttachmentMIME lists the media types an attachment may have:
	// lower-case "type/subtype", no parameters, no wildcards. An explicit
	// empty list refuses all. Default DefaultAttachmentMIME. Key:
	// allowed_attachment_mime.
	AllowedAttachmentMIME []string
	// MaxToolArgumentBytes bounds one tool call's arguments; default
	// 64KiB, at most 128KiB. Key: max_tool_argument_bytes.
	MaxToolArgumentBytes int64
	// MaxToolResultBytes bounds one tool result; default 128KiB, at most
	// 160KiB. Key: max_tool_result_bytes.
	MaxToolResultBytes int64
	// MaxMCPMessageBytes bounds one MCP message from the agent; default
	// 1MiB. Key: max_mcp_message_bytes.
	MaxMCPMessageBytes int64
	// DefaultMaxOutputTokens is the output cap the model broker sets (and
	// reserves) on a request that sets none, 1 to MaxOutputTokensLimit;
	// 0 (absent) is the broker's default, 4096. Key:
	// default_max_output_tokens.
	DefaultMaxOutputTokens int64
}

// MaxOutputTokensLimit bounds limits.default_max_output_tokens (the model
// broker accepts output caps up to it).
const MaxOutputTokensLimit = 10_000_000

// Secret says where the custodian reads one secret (custody.Source):
// exactly one of Env (key: env) and File (key: file) is set.
type Secret = custody.Source

// Load reads and parses the configuration file at path.
func Load(path string) (*Config, error) {
	b, err := readFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(b, path)
}

// CheckFile reads the configuration file at path and returns every
// problem in it, as Check does. The error is for a file that cannot be
// read.
func CheckFile(path string) ([]*Error, error) {
	b, err := readFile(path)
	if err != nil {
		return nil, err
	}
	return Check(b, path), nil
}

// ReadFile reads a configuration file as Load does (sandbox create sends
// the bytes to the daemon): see readFile.
func ReadFile(path string) ([]byte, error) { return readFile(path) }

// readFile reads a configuration file of at most MaxFileBytes+1 bytes
// with safefile.ReadBounded: opening never blocks (a FIFO nobody writes
// reads as empty instead of hanging `cordon config check`), and only a
// regular file or a pipe is read, never a device or a directory.
func readFile(path string) ([]byte, error) {
	b, err := safefile.ReadBounded(path, MaxFileBytes, true)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return b, nil
}

// ParseDetached parses a configuration that arrived as bytes from
// another process (the daemon's case): nothing on this host's filesystem
// is looked at — policy file names are kept as given (their contents
// travel separately), and no path is stat'ed.
func ParseDetached(b []byte, source string) (*Config, error) {
	return parse(b, source, true)
}

// Parse parses and validates a configuration. source names it in errors.
// A returned error is an *Error or several joined with errors.Join, in
// line order — exactly the problems Check lists; errors.As finds the
// first.
func Parse(b []byte, source string) (*Config, error) {
	return parse(b, source, false)
}

// Check returns every problem in the configuration b, in line and column
// order, or none when Parse accepts it: Parse and Check are one checker.
// A YAML syntax error, more than one document or a root that is not a
// mapping stop the check (nothing after them can be read); otherwise
// schema errors (unknown and duplicate keys, wrong types) and the
// semantic checks are all reported, except semantic checks of a field the
// decoder already refused.
func Check(b []byte, source string) []*Error {
	_, errs := check(b, source, false)
	return errs
}

func parse(b []byte, source string, detached bool) (*Config, error) {
	c, errs := check(b, source, detached)
	if len(errs) > 0 {
		return nil, joinProblems(errs)
	}
	return c, nil
}

// check is the one checker: the Config, meaningful only without
// problems, and the problems.
func check(b []byte, source string, detached bool) (*Config, []*Error) {
	one := func(e *Error) (*Config, []*Error) { return nil, []*Error{e} }
	if len(b) > MaxFileBytes {
		return one(&Error{Source: source, Msg: fmt.Sprintf("larger than %d bytes", MaxFileBytes)})
	}
	// First pass: the node tree, for places and the checks the decoder
	// does not make (aliases, merge keys, several documents).
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return one(&Error{Source: source, Line: 1, Msg: "empty configuration; want at least version, workload, tenant and purpose"})
		}
		return one(syntaxError(source, err))
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case err == nil:
		return one(&Error{Source: source, Line: next.Line, Column: next.Column, Msg: "more than one YAML document; want exactly one"})
	case !errors.Is(err, io.EOF):
		return one(syntaxError(source, err))
	}
	if len(doc.Content) == 1 && doc.Content[0].ShortTag() == "!!null" {
		return one(&Error{Source: source, Line: 1, Msg: "empty configuration; want at least version, workload, tenant and purpose"})
	}
	ix, perr := newIndex(source, &doc)
	if perr != nil {
		return one(perr)
	}
	ix.detached = detached
	// Second pass: strict decoding into the raw schema. The decoder
	// carries on past type errors, unknown and duplicate keys, so the
	// semantic checks still run on the rest of the file.
	var raw rawConfig
	dec = yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&raw); err != nil && (!ix.decodeError(err) || ix.unplaced) {
		return nil, ix.problems()
	}
	c := build(&raw, ix)
	if errs := ix.problems(); len(errs) > 0 {
		return nil, errs
	}
	sum := sha256.Sum256(b)
	c.Source, c.Digest = source, "sha256:"+hex.EncodeToString(sum[:])
	return c, nil
}

// Warnings lists what in c weakens isolation, for the run to log at start:
// every unsafe_allow_ranges entry and every model upstream reached over
// plain http beyond loopback (its credential would cross in clear).
func (c *Config) Warnings() []string {
	var w []string
	for _, p := range c.Egress.UnsafeAllowRanges {
		w = append(w, fmt.Sprintf("egress.unsafe_allow_ranges: the egress broker may connect to %s, normally denied", p))
	}
	for _, m := range c.Models {
		if m.UpstreamURL.Scheme == "http" && !isLoopbackHost(m.UpstreamURL.Hostname()) {
			w = append(w, fmt.Sprintf("models %s: upstream %s is plain http; credential %s crosses the network unencrypted", m.Name, m.Upstream, m.Credential))
		}
	}
	return append(w, c.ingressWarnings()...)
}

func isLoopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(h)
	return err == nil && a.IsLoopback()
}

// Model returns the model upstream named name.
func (c *Config) Model(name string) (Model, bool) {
	for _, m := range c.Models {
		if m.Name == name {
			return m, true
		}
	}
	return Model{}, false
}
