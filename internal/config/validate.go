package config

import (
	"errors"
	"fmt"
	"io/fs"
	"mime"
	"net/netip"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/cordon-project/cordon/internal/units"
)

// The raw schema, as decoded with KnownFields(true). Keys are the yaml
// tags; the doc comments live on the validated types in config.go.
type rawConfig struct {
	Version   string               `yaml:"version"`
	Workload  string               `yaml:"workload"`
	Tenant    string               `yaml:"tenant"`
	Purpose   string               `yaml:"purpose"`
	Egress    rawEgress            `yaml:"egress"`
	Models    []rawModel           `yaml:"models"`
	Budgets   rawBudgets           `yaml:"budgets"`
	Limits    rawLimits            `yaml:"limits"`
	Secrets   map[string]rawSecret `yaml:"secrets"`
	Tools     []rawTool            `yaml:"tools"`
	Approvals rawApprovals         `yaml:"approvals"`
	State     rawState             `yaml:"state"`
	Policy    []string             `yaml:"policy"`
	Crossings rawCrossings         `yaml:"crossings"`
	Ingress   []rawIngress         `yaml:"ingress"`
	Telemetry rawTelemetry         `yaml:"telemetry"`
}

type rawEgress struct {
	Allow             []rawRule         `yaml:"allow"`
	UnsafeAllowRanges []string          `yaml:"unsafe_allow_ranges"`
	Resolve           map[string]string `yaml:"resolve"`
}

type rawRule struct {
	Host  string     `yaml:"host"`
	Ports []intValue `yaml:"ports"`
}

type rawModel struct {
	Name       string   `yaml:"name"`
	API        string   `yaml:"api"`
	Upstream   string   `yaml:"upstream"`
	Credential string   `yaml:"credential"`
	Models     []string `yaml:"models"`
}

type rawBudgets struct {
	Window            string    `yaml:"window"`
	Requests          intValue  `yaml:"requests"`
	InputTokens       intValue  `yaml:"input_tokens"`
	OutputTokens      intValue  `yaml:"output_tokens"`
	EgressBytes       sizeValue `yaml:"egress_bytes"`
	Connections       intValue  `yaml:"connections"`
	ConcurrentStreams intValue  `yaml:"concurrent_streams"`
	ToolCalls         intValue  `yaml:"tool_calls"`
	// The ingress budgets (ingress.go).
	IngressConnections intValue  `yaml:"ingress_connections"`
	IngressBytes       sizeValue `yaml:"ingress_bytes"`
}

type rawLimits struct {
	MaxRequestBytes        sizeValue `yaml:"max_request_bytes"`
	MaxResponseBytes       sizeValue `yaml:"max_response_bytes"`
	MaxAttachments         intValue  `yaml:"max_attachments"`
	MaxAttachmentBytes     sizeValue `yaml:"max_attachment_bytes"`
	AllowedAttachmentMIME  *[]string `yaml:"allowed_attachment_mime"`
	MaxToolArgumentBytes   sizeValue `yaml:"max_tool_argument_bytes"`
	MaxToolResultBytes     sizeValue `yaml:"max_tool_result_bytes"`
	MaxMCPMessageBytes     sizeValue `yaml:"max_mcp_message_bytes"`
	DefaultMaxOutputTokens intValue  `yaml:"default_max_output_tokens"`
}

type rawSecret struct {
	Env  string `yaml:"env"`
	File string `yaml:"file"`
}

// intValue is a YAML integer. Floats, strings and booleans are refused
// rather than converted (yaml.v3 would truncate 1.5 to 1).
type intValue struct {
	n   int64
	set bool
}

func (v *intValue) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		return typeError(n, "want an integer, not "+describeNode(n))
	}
	if err := n.Decode(&v.n); err != nil {
		return typeError(n, fmt.Sprintf("integer %s is out of range", n.Value))
	}
	v.set = true
	return nil
}

// describeNode names a node's value for an error.
func describeNode(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	v := n.Value
	if len(v) > 40 {
		v = v[:40] + "..."
	}
	return strconv.Quote(v)
}

// sizeValue is a byte count in package units' grammar: 1048576, 512M,
// 2.5G, 64KiB, 1GiB. The node's text is what is parsed, whatever YAML
// resolves it to (4096 is an !!int, 1.5 a !!float), so a size means in a
// file exactly what it means on the command line.
type sizeValue struct {
	n   int64
	set bool
}

func (v *sizeValue) UnmarshalYAML(n *yaml.Node) error {
	if tag := n.ShortTag(); n.Kind != yaml.ScalarNode || (tag != "!!int" && tag != "!!float" && tag != "!!str") {
		return typeError(n, "want a size such as 1GiB, 512M or 1048576, not "+describeNode(n))
	}
	s, err := units.Parse(n.Value)
	if err != nil {
		return typeError(n, err.Error())
	}
	v.n, v.set = s, true
	return nil
}

func typeError(n *yaml.Node, msg string) error {
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %s", n.Line, msg)}}
}

var (
	nameRE       = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)
	secretNameRE = regexp.MustCompile(`^[a-z0-9-]{1,64}$`)
	envNameRE    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	labelRE      = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
)

// build validates raw field by field, recording every problem in ix, and
// returns the Config (meaningful only when ix has no errors).
func build(raw *rawConfig, ix *index) *Config {
	c := &Config{
		Version:  raw.Version,
		Workload: raw.Workload,
		Tenant:   raw.Tenant,
		Purpose:  raw.Purpose,
		Secrets:  map[string]Secret{},
	}
	if raw.Version != Version {
		ix.errf("version", "is %q; want %q", raw.Version, Version)
	}
	for _, f := range []struct{ key, v string }{{"workload", raw.Workload}, {"tenant", raw.Tenant}, {"purpose", raw.Purpose}} {
		checkName(ix, f.key, f.v)
	}
	buildSecrets(c, raw, ix)
	buildEgress(c, &raw.Egress, ix)
	buildModels(c, raw, ix)
	buildBudgets(c, &raw.Budgets, ix)
	buildLimits(c, &raw.Limits, ix)
	buildTools(c, raw, ix)
	buildState(c, &raw.State, ix)
	buildCrossings(c, &raw.Crossings, ix)
	buildIngress(c, raw.Ingress, ix)
	buildPolicy(c, raw.Policy, ix)
	buildTelemetry(c, &raw.Telemetry, ix)
	return c
}

// buildSecrets checks each declared secret names exactly one source on the
// trusted side (an environment variable or a file) without ever quoting it.
func buildSecrets(c *Config, raw *rawConfig, ix *index) {
	for _, name := range sortedKeys(raw.Secrets) {
		s, p := raw.Secrets[name], join("secrets", name)
		if !secretNameRE.MatchString(name) {
			ix.errf(p, "secret name %q: want 1–64 of a-z, 0-9 and -", name)
		}
		switch {
		case (s.Env == "") == (s.File == ""):
			ix.errf(p, "want exactly one of env or file")
		// The values are not quoted: a user who pasted the secret itself
		// here must not find it in the error log.
		case s.Env != "" && !envNameRE.MatchString(s.Env):
			ix.errf(p+".env", "want the name of an environment variable of the trusted side (letters, digits, _), not its value")
		case s.File != "" && (!filepath.IsAbs(s.File) || filepath.Clean(s.File) != s.File):
			ix.errf(p+".file", "want an absolute, clean path to a file holding the secret")
		}
		c.Secrets[name] = Secret{Env: s.Env, File: s.File}
	}
}

// buildModels checks the model upstreams: unique names, a known API, an
// upstream URL, a declared credential and valid model globs.
func buildModels(c *Config, raw *rawConfig, ix *index) {
	seen := map[string]bool{}
	for i, m := range raw.Models {
		p := fmt.Sprintf("models[%d]", i)
		if checkName(ix, p+".name", m.Name) {
			if seen[m.Name] {
				ix.errf(p+".name", "model upstream %q is declared twice", m.Name)
			}
			seen[m.Name] = true
		}
		if m.API != APIAnthropic && m.API != APIOpenAI && m.API != APIGemini {
			ix.errf(p+".api", "is %q; want %q, %q or %q", m.API, APIAnthropic, APIOpenAI, APIGemini)
		}
		u, err := checkUpstream(m.Upstream)
		if err != nil {
			ix.errf(p+".upstream", "%v", err)
		}
		switch {
		case m.Credential == "":
			ix.errf(p+".credential", "required: the name of the secret the broker sends upstream")
		case !ix.secretDeclared(raw, m.Credential):
			// Not quoted, in case the value was pasted instead of a name.
			ix.errf(p+".credential", "names no secret declared under secrets (declared: %s)", strings.Join(sortedKeys(raw.Secrets), ", "))
		}
		if len(m.Models) == 0 {
			ix.errf(p+".models", "required: at least one allowed model id or glob, e.g. \"claude-*\"")
		}
		for j, g := range m.Models {
			if _, err := path.Match(g, ""); g == "" || err != nil {
				ix.errf(fmt.Sprintf("%s.models[%d]", p, j), "%q is not a valid glob (path.Match syntax)", g)
			}
		}
		c.Models = append(c.Models, Model{Name: m.Name, API: m.API, Upstream: m.Upstream, UpstreamURL: u, Credential: m.Credential, Models: slices.Clone(m.Models)})
	}
}

// buildBudgets checks the budget window and that no budget is negative
// (0 is unlimited).
func buildBudgets(c *Config, b *rawBudgets, ix *index) {
	if b.Window != "" {
		w, err := parseWindow(b.Window)
		if err != nil {
			ix.errf("budgets.window", "%v", err)
		}
		c.Budgets.Window = w
	}
	for _, f := range []struct {
		key string
		v   int64
		dst *int64
	}{
		{"requests", b.Requests.n, &c.Budgets.Requests},
		{"input_tokens", b.InputTokens.n, &c.Budgets.InputTokens},
		{"output_tokens", b.OutputTokens.n, &c.Budgets.OutputTokens},
		{"egress_bytes", b.EgressBytes.n, &c.Budgets.EgressBytes},
		{"connections", b.Connections.n, &c.Budgets.Connections},
		{"concurrent_streams", b.ConcurrentStreams.n, &c.Budgets.ConcurrentStreams},
		{"ingress_connections", b.IngressConnections.n, &c.Budgets.IngressConnections},
		{"ingress_bytes", b.IngressBytes.n, &c.Budgets.IngressBytes},
	} {
		if f.v < 0 {
			ix.errf("budgets."+f.key, "is %d; want 0 (unlimited) or more", f.v)
		}
		*f.dst = f.v
	}
}

// buildLimits sets the model broker's size and attachment limits: the
// defaults, overridden by positive sizes and well-formed media types.
func buildLimits(c *Config, l *rawLimits, ix *index) {
	c.Limits = Limits{
		MaxRequestBytes:       DefaultMaxRequestBytes,
		MaxResponseBytes:      DefaultMaxResponseBytes,
		MaxAttachments:        DefaultMaxAttachments,
		MaxAttachmentBytes:    DefaultMaxAttachmentBytes,
		AllowedAttachmentMIME: slices.Clone(DefaultAttachmentMIME),
	}
	for _, f := range []struct {
		key string
		v   sizeValue
		dst *int64
	}{
		{"max_request_bytes", l.MaxRequestBytes, &c.Limits.MaxRequestBytes},
		{"max_response_bytes", l.MaxResponseBytes, &c.Limits.MaxResponseBytes},
		{"max_attachment_bytes", l.MaxAttachmentBytes, &c.Limits.MaxAttachmentBytes},
	} {
		if !f.v.set {
			continue
		}
		if f.v.n <= 0 {
			ix.errf("limits."+f.key, "is %d; want a positive size", f.v.n)
		}
		*f.dst = f.v.n
	}
	if l.MaxAttachments.set {
		if l.MaxAttachments.n < 0 || l.MaxAttachments.n > 1<<20 {
			ix.errf("limits.max_attachments", "is %d; want 0 (none allowed) to %d", l.MaxAttachments.n, 1<<20)
		}
		c.Limits.MaxAttachments = int(l.MaxAttachments.n)
	}
	if l.DefaultMaxOutputTokens.set {
		if n := l.DefaultMaxOutputTokens.n; n < 1 || n > MaxOutputTokensLimit {
			ix.errf("limits.default_max_output_tokens", "is %d; want 1 to %d", n, MaxOutputTokensLimit)
		}
		c.Limits.DefaultMaxOutputTokens = l.DefaultMaxOutputTokens.n
	}
	if l.AllowedAttachmentMIME != nil {
		c.Limits.AllowedAttachmentMIME = []string{}
		for i, t := range *l.AllowedAttachmentMIME {
			p := fmt.Sprintf("limits.allowed_attachment_mime[%d]", i)
			mt, params, err := mime.ParseMediaType(t)
			switch {
			case err != nil || len(params) > 0 || mt != t || strings.Count(t, "/") != 1 || strings.Contains(t, "*"):
				ix.errf(p, "%q: want a lower-case media type such as image/png, without parameters or wildcards", t)
			case slices.Contains(c.Limits.AllowedAttachmentMIME, t):
				ix.errf(p, "%q is listed twice", t)
			}
			c.Limits.AllowedAttachmentMIME = append(c.Limits.AllowedAttachmentMIME, t)
		}
	}
}

// buildPolicy resolves the policy files against the configuration's
// directory and checks that each is a regular file. Their contents are
// package policy's to validate.
func buildPolicy(c *Config, files []string, ix *index) {
	dir := filepath.Dir(ix.source)
	seen := map[string]int{}
	for i, f := range files {
		p := fmt.Sprintf("policy[%d]", i)
		if f == "" || strings.ContainsRune(f, 0) {
			ix.errf(p, "want the path of a Cedar policy file, e.g. policy/default.cedar")
			continue
		}
		if ix.detached {
			c.Policy = append(c.Policy, filepath.Base(f))
			continue
		}
		resolved := f
		if !filepath.IsAbs(f) {
			resolved = filepath.Join(dir, f)
		}
		resolved = filepath.Clean(resolved)
		switch st, err := os.Stat(resolved); {
		case err != nil && errors.Is(err, fs.ErrNotExist):
			ix.errf(p, "%q: no such file (%s)", f, resolved)
		case err != nil:
			ix.errf(p, "%q: %v", f, err)
		case !st.Mode().IsRegular():
			ix.errf(p, "%q: not a regular file (%s)", f, resolved)
		}
		if j, dup := seen[resolved]; dup {
			ix.errf(p, "%q is the same file as policy[%d]", f, j)
		}
		seen[resolved] = i
		c.Policy = append(c.Policy, resolved)
	}
}

func buildEgress(c *Config, e *rawEgress, ix *index) {
	for i, r := range e.Allow {
		p := fmt.Sprintf("egress.allow[%d]", i)
		if err := checkHost(r.Host, true); err != nil {
			ix.errf(p+".host", "%v", err)
		}
		if len(r.Ports) == 0 {
			ix.errf(p+".ports", "required: at least one port, e.g. [443]")
		}
		rule := EgressRule{Host: r.Host}
		for j, port := range r.Ports {
			switch {
			case port.n < 1 || port.n > 65535:
				ix.errf(fmt.Sprintf("%s.ports[%d]", p, j), "%d is not a port; want 1–65535", port.n)
			case slices.Contains(rule.Ports, int(port.n)):
				ix.errf(fmt.Sprintf("%s.ports[%d]", p, j), "port %d is listed twice", port.n)
			}
			rule.Ports = append(rule.Ports, int(port.n))
		}
		c.Egress.Allow = append(c.Egress.Allow, rule)
	}
	for i, s := range e.UnsafeAllowRanges {
		p := fmt.Sprintf("egress.unsafe_allow_ranges[%d]", i)
		pfx, err := netip.ParsePrefix(s)
		switch {
		case err != nil:
			ix.errf(p, "%q is not a CIDR range such as 127.0.0.1/32 or fd00::/8", s)
		case pfx != pfx.Masked():
			ix.errf(p, "%q has host bits set; did you mean %s?", s, pfx.Masked())
		}
		c.Egress.UnsafeAllowRanges = append(c.Egress.UnsafeAllowRanges, pfx)
	}
	if e.Resolve != nil {
		c.Egress.Resolve = map[string]netip.Addr{}
	}
	for _, host := range sortedKeys(e.Resolve) {
		p := join("egress.resolve", host)
		if err := checkHost(host, false); err != nil {
			ix.errf(p, "%v", err)
		}
		a, err := netip.ParseAddr(e.Resolve[host])
		if err != nil || a.Zone() != "" {
			ix.errf(p, "%q is not an IP address", e.Resolve[host])
		}
		c.Egress.Resolve[host] = a.Unmap()
	}
}

// checkName checks a workload, tenant, purpose or model name.
func checkName(ix *index, p, v string) bool {
	switch {
	case v == "":
		ix.errf(p, "required")
	case !nameRE.MatchString(v) || v == "." || v == "..":
		ix.errf(p, "%q: want 1–64 of A-Z, a-z, 0-9, '.', '_' and '-' (not . or ..)", v)
	default:
		return true
	}
	return false
}

// checkHost checks an egress host: a lower-case DNS name, or with wildcard
// "*." and a suffix of at least two labels.
func checkHost(h string, wildcard bool) error {
	name := h
	if wildcard {
		if s, ok := strings.CutPrefix(h, "*."); ok {
			name = s
			if !strings.Contains(s, ".") {
				return fmt.Errorf("%q: a wildcard needs a suffix of at least two labels, e.g. *.example.org", h)
			}
		}
	}
	if _, err := netip.ParseAddr(strings.Trim(name, "[]")); err == nil {
		return fmt.Errorf("%q is an IP address; name the host (use egress.resolve to pin its address)", h)
	}
	switch {
	case h == "":
		return fmt.Errorf("required")
	case strings.Contains(name, ":"):
		return fmt.Errorf("%q carries a port; list ports under ports", h)
	case strings.Contains(name, "*"):
		return fmt.Errorf("%q: a wildcard may only be a leading \"*.\"", h)
	case h != strings.ToLower(h):
		return fmt.Errorf("%q: write host names in lower case", h)
	case len(name) > 253:
		return fmt.Errorf("host name is longer than 253 characters")
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		if !labelRE.MatchString(l) {
			return fmt.Errorf("%q is not a DNS name (labels of a-z, 0-9 and inner '-', no trailing dot)", h)
		}
	}
	if tld := labels[len(labels)-1]; tld[0] < 'a' || tld[0] > 'z' {
		return fmt.Errorf("%q: the last label must start with a letter (numeric forms are IP addresses)", h)
	}
	return nil
}

// checkUpstream parses a model upstream base URL.
func checkUpstream(s string) (*url.URL, error) {
	if s == "" {
		return nil, fmt.Errorf("required: the upstream's base URL, e.g. https://api.anthropic.com")
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%q is not a URL", s)
	case u.Scheme != "https" && u.Scheme != "http":
		return nil, fmt.Errorf("%q: want an http or https URL", s)
	case u.Opaque != "" || u.Host == "" || u.Hostname() == "":
		return nil, fmt.Errorf("%q: want an absolute URL with a host", s)
	case u.User != nil:
		return nil, fmt.Errorf("upstream must not carry user information; name a credential instead")
	case strings.ContainsAny(s, "?#"):
		return nil, fmt.Errorf("%q: want no query or fragment", s)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("%q: port %s is not 1–65535", s, p)
		}
	}
	return u, nil
}

// parseWindow parses a Go duration, or a whole number of days ("7d").
func parseWindow(s string) (time.Duration, error) {
	var d time.Duration
	var err error
	if days, ok := strings.CutSuffix(s, "d"); ok {
		var n int64
		n, err = strconv.ParseInt(days, 10, 64)
		if err == nil && (n <= 0 || n > 100*365) {
			return 0, fmt.Errorf("%q: want 1d to 36500d", s)
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		d, err = time.ParseDuration(s)
	}
	switch {
	case err != nil:
		return 0, fmt.Errorf("%q: want a duration such as 24h, 90m or 7d", s)
	case d < time.Second:
		return 0, fmt.Errorf("%q: want at least 1s", s)
	}
	return d, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
