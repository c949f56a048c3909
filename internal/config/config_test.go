package config

import (
	"errors"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const head = "version: cordon/v1\nworkload: demo\ntenant: acme\npurpose: coding\n"

var cmpNet = []cmp.Option{
	cmp.Comparer(func(a, b netip.Prefix) bool { return a == b }),
	cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
	cmp.Comparer(func(a, b *url.URL) bool { return a.String() == b.String() }),
	cmp.FilterPath(func(p cmp.Path) bool { return p.String() == "Source" || p.String() == "Digest" }, cmp.Ignore()),
}

func defaultLimits() Limits {
	return Limits{
		MaxRequestBytes:       32 << 20,
		MaxResponseBytes:      64 << 20,
		MaxAttachments:        20,
		MaxAttachmentBytes:    10 << 20,
		AllowedAttachmentMIME: []string{"image/png", "image/jpeg", "image/gif", "image/webp", "application/pdf"},
		MaxToolArgumentBytes:  DefaultMaxToolArgBytes,
		MaxToolResultBytes:    DefaultMaxToolResultBytes,
		MaxMCPMessageBytes:    DefaultMaxMCPMessageBytes,
	}
}

func defaultApprovals() Approvals {
	return Approvals{Wait: DefaultApprovalWait, TTL: DefaultApprovalTTL}
}

func TestExamplesLoad(t *testing.T) {
	files, err := filepath.Glob("../../examples/*.yaml")
	if err != nil || len(files) < 4 {
		t.Fatalf("examples: %v, %v", files, err)
	}
	for _, f := range files {
		c, err := Load(f)
		if err != nil {
			t.Errorf("Load(%q) = %v, want nil", f, err)
			continue
		}
		if c.Source != f || !strings.HasPrefix(c.Digest, "sha256:") || len(c.Digest) != 7+64 {
			t.Errorf("Load(%q): Source %q, Digest %q", f, c.Source, c.Digest)
		}
	}
}

func TestParseContract(t *testing.T) {
	src := head + `egress:
  allow:
    - host: api.github.com            # exact, or "*.example.org"
      ports: [443]
    - host: "*.example.org"
      ports: [443, 8443]
  unsafe_allow_ranges: ["127.0.0.1/32", "fd00::/8"]
  resolve: {api.github.com: 127.0.0.1, up.test: "::ffff:10.0.0.1"}
models:
  - name: claude
    api: anthropic
    upstream: https://api.anthropic.com
    credential: anthropic-key
    models: ["claude-*"]
  - name: gpt
    api: openai
    upstream: http://127.0.0.1:8080/v1
    credential: openai-key
    models: ["gpt-5*", "o4-mini"]
budgets:
  window: 24h
  requests: 1000
  input_tokens: 5_000_000
  output_tokens: 500000
  egress_bytes: 1GiB
  connections: 0x10
  concurrent_streams: 4
limits:
  max_request_bytes: 512K
  max_response_bytes: 1048576
  max_attachments: 0
  allowed_attachment_mime: [image/png]
secrets:
  anthropic-key: {env: ANTHROPIC_API_KEY}
  openai-key:
    file: /etc/cordon/openai
`
	got, err := Parse([]byte(src), "c.yaml")
	if err != nil {
		t.Fatalf("Parse = %v", err)
	}
	want := &Config{
		Version: "cordon/v1", Workload: "demo", Tenant: "acme", Purpose: "coding",
		Egress: Egress{
			Allow:             []EgressRule{{Host: "api.github.com", Ports: []int{443}}, {Host: "*.example.org", Ports: []int{443, 8443}}},
			UnsafeAllowRanges: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("fd00::/8")},
			Resolve:           map[string]netip.Addr{"api.github.com": netip.MustParseAddr("127.0.0.1"), "up.test": netip.MustParseAddr("10.0.0.1")},
		},
		Models: []Model{
			{Name: "claude", API: "anthropic", Upstream: "https://api.anthropic.com", UpstreamURL: &url.URL{Scheme: "https", Host: "api.anthropic.com"}, Credential: "anthropic-key", Models: []string{"claude-*"}},
			{Name: "gpt", API: "openai", Upstream: "http://127.0.0.1:8080/v1", UpstreamURL: &url.URL{Scheme: "http", Host: "127.0.0.1:8080", Path: "/v1"}, Credential: "openai-key", Models: []string{"gpt-5*", "o4-mini"}},
		},
		Budgets: Budgets{Window: 24 * time.Hour, Requests: 1000, InputTokens: 5000000, OutputTokens: 500000, EgressBytes: 1 << 30, Connections: 16, ConcurrentStreams: 4},
		Limits: Limits{MaxRequestBytes: 512 << 10, MaxResponseBytes: 1 << 20, MaxAttachments: 0, MaxAttachmentBytes: 10 << 20, AllowedAttachmentMIME: []string{"image/png"},
			MaxToolArgumentBytes: DefaultMaxToolArgBytes, MaxToolResultBytes: DefaultMaxToolResultBytes, MaxMCPMessageBytes: DefaultMaxMCPMessageBytes},
		Secrets:   map[string]Secret{"anthropic-key": {Env: "ANTHROPIC_API_KEY"}, "openai-key": {File: "/etc/cordon/openai"}},
		Approvals: defaultApprovals(),
		State:     defaultState(),
		Crossings: defaultCrossings(),
	}
	if d := cmp.Diff(want, got, cmpNet...); d != "" {
		t.Errorf("Parse mismatch (-want +got):\n%s", d)
	}
	if got.Source != "c.yaml" {
		t.Errorf("Source = %q, want c.yaml", got.Source)
	}
}

func TestParseDefaults(t *testing.T) {
	c, err := Parse([]byte(head), "m.yaml")
	if err != nil {
		t.Fatalf("Parse = %v", err)
	}
	want := &Config{Version: Version, Workload: "demo", Tenant: "acme", Purpose: "coding", Limits: defaultLimits(), Secrets: map[string]Secret{}, Approvals: defaultApprovals(), State: defaultState(), Crossings: defaultCrossings()}
	if d := cmp.Diff(want, c, cmpNet...); d != "" {
		t.Errorf("Parse mismatch (-want +got):\n%s", d)
	}
	// An explicit empty list refuses every attachment type.
	c, err = Parse([]byte(head+"limits:\n  allowed_attachment_mime: []\n"), "m.yaml")
	if err != nil || c.Limits.AllowedAttachmentMIME == nil || len(c.Limits.AllowedAttachmentMIME) != 0 {
		t.Errorf("allowed_attachment_mime: [] = %#v, %v; want empty", c.Limits.AllowedAttachmentMIME, err)
	}
}

func TestParseGood(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		check      func(*Config) bool
	}{
		{"window days", "budgets:\n  window: 7d\n", func(c *Config) bool { return c.Budgets.Window == 7*24*time.Hour }},
		{"window minutes", "budgets:\n  window: 90m\n", func(c *Config) bool { return c.Budgets.Window == 90*time.Minute }},
		{"size M", "budgets:\n  egress_bytes: 512M\n", func(c *Config) bool { return c.Budgets.EgressBytes == 512<<20 }},
		{"size Gi", "budgets:\n  egress_bytes: 2Gi\n", func(c *Config) bool { return c.Budgets.EgressBytes == 2<<30 }},
		{"size MB", "budgets:\n  egress_bytes: 3MB\n", func(c *Config) bool { return c.Budgets.EgressBytes == 3<<20 }},
		{"size B", "budgets:\n  egress_bytes: 100B\n", func(c *Config) bool { return c.Budgets.EgressBytes == 100 }},
		{"size int", "budgets:\n  egress_bytes: 4096\n", func(c *Config) bool { return c.Budgets.EgressBytes == 4096 }},
		{"size fraction", "budgets:\n  egress_bytes: 1.5GiB\n", func(c *Config) bool { return c.Budgets.EgressBytes == 3<<29 }},
		{"size fraction G", "budgets:\n  egress_bytes: 2.5G\n", func(c *Config) bool { return c.Budgets.EgressBytes == 5<<29 }},
		{"zero is unlimited", "budgets:\n  requests: 0\n", func(c *Config) bool { return c.Budgets.Requests == 0 }},
		{"null budgets", "budgets:\n", func(c *Config) bool { return c.Budgets == Budgets{} }},
		{"names", "workload: a.B_c-9\n", func(c *Config) bool { return c.Workload == "a.B_c-9" }},
		{"numeric workload", "workload: 123\n", func(c *Config) bool { return c.Workload == "123" }},
		{"localhost host", "egress:\n  allow: [{host: localhost, ports: [8080]}]\n", func(c *Config) bool { return c.Egress.Allow[0].Host == "localhost" }},
		{"ipv6 range", "egress:\n  unsafe_allow_ranges: ['::1/128']\n", func(c *Config) bool { return c.Egress.UnsafeAllowRanges[0].String() == "::1/128" }},
		{"comments and anchors unused", "# hi\nsecrets:\n  k: &x {env: K}\n", func(c *Config) bool { return c.Secrets["k"].Env == "K" }},
	} {
		// Later keys may not repeat head's: replace workload when the case sets it.
		src := head + tc.yaml
		if strings.HasPrefix(tc.yaml, "workload:") {
			src = strings.Replace(head, "workload: demo\n", "", 1) + tc.yaml
		}
		c, err := Parse([]byte(src), "g.yaml")
		if err != nil {
			t.Errorf("%s: Parse = %v, want nil", tc.name, err)
			continue
		}
		if !tc.check(c) {
			t.Errorf("%s: Parse = %+v; check failed", tc.name, c)
		}
	}
}

func TestParseBad(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		line       int    // of the first error
		field      string // of the first error
		msg        string // in the first error's Msg
	}{
		{"empty", "", 1, "", "empty configuration"},
		{"only comments", "# nothing\n", 1, "", "empty configuration"},
		{"not a mapping", "- a\n", 1, "", "want a mapping"},
		{"syntax", head + "egress: [\n", 5, "", "did not find expected"},
		{"two documents", head + "---\nversion: cordon/v1\n", 5, "", "more than one YAML document"},
		{"bad version", strings.Replace(head, "cordon/v1", "cordon/v2", 1), 1, "version", `want "cordon/v1"`},
		{"missing version", strings.Replace(head, "version: cordon/v1\n", "", 1), 1, "version", `want "cordon/v1"`},
		{"missing tenant", strings.Replace(head, "tenant: acme\n", "", 1), 1, "tenant", "required"},
		{"bad workload", strings.Replace(head, "demo", "my workload", 1), 2, "workload", "want 1–64"},
		{"dotdot workload", strings.Replace(head, "demo", "..", 1), 2, "workload", "not . or .."},
		{"long purpose", strings.Replace(head, "coding", strings.Repeat("p", 65), 1), 4, "purpose", "want 1–64"},
		{"unknown top key", head + "egres:\n  allow: []\n", 5, "egres", `unknown field "egres"; want one of version,`},
		{"unknown nested key", head + "egress:\n  allow:\n    - host: a.example\n      port: 443\n", 8, "egress.allow[0].port", `unknown field "port"; want one of host, ports`},
		{"unknown secret key", head + "secrets:\n  k: {env: K, value: x}\n", 6, "secrets.k.value", `unknown field "value"`},
		{"duplicate key", head + "tenant: other\n", 5, "tenant", "duplicate key \"tenant\" (first at line 3)"},
		{"alias", head + "secrets:\n  a: &s {env: A}\n  b: *s\n", 7, "secrets.b", "aliases"},
		{"merge key", head + "budgets:\n  <<: {requests: 1}\n", 6, "budgets", "merge keys"},
		{"float port", head + "egress:\n  allow:\n    - host: a.example\n      ports: [443.0]\n", 8, "egress.allow[0].ports", `want an integer, not "443.0"`},
		{"string port", head + "egress:\n  allow:\n    - host: a.example\n      ports:\n        - \"443\"\n", 9, "egress.allow[0].ports[0]", "want an integer"},
		{"port range", head + "egress:\n  allow:\n    - host: a.example\n      ports:\n        - 443\n        - 70000\n", 10, "egress.allow[0].ports[1]", "not a port"},
		{"port zero", head + "egress:\n  allow:\n    - host: a.example\n      ports: [0]\n", 8, "egress.allow[0].ports[0]", "not a port"},
		{"duplicate port", head + "egress:\n  allow:\n    - host: a.example\n      ports: [443, 443]\n", 8, "egress.allow[0].ports[1]", "listed twice"},
		{"no ports", head + "egress:\n  allow:\n    - host: a.example\n", 7, "egress.allow[0].ports", "at least one port"},
		{"ip host", head + "egress:\n  allow:\n    - host: 10.0.0.1\n      ports: [443]\n", 7, "egress.allow[0].host", "is an IP address"},
		{"ipv6 host", head + "egress:\n  allow:\n    - host: '[::1]'\n      ports: [443]\n", 7, "egress.allow[0].host", "is an IP address"},
		{"numeric host", head + "egress:\n  allow:\n    - host: 127.1\n      ports: [443]\n", 7, "egress.allow[0].host", "must start with a letter"},
		{"host with port", head + "egress:\n  allow:\n    - host: a.example:443\n      ports: [443]\n", 7, "egress.allow[0].host", "carries a port"},
		{"upper-case host", head + "egress:\n  allow:\n    - host: API.github.com\n      ports: [443]\n", 7, "egress.allow[0].host", "lower case"},
		{"trailing dot", head + "egress:\n  allow:\n    - host: a.example.\n      ports: [443]\n", 7, "egress.allow[0].host", "not a DNS name"},
		{"wildcard tld", head + "egress:\n  allow:\n    - host: '*.org'\n      ports: [443]\n", 7, "egress.allow[0].host", "at least two labels"},
		{"bare star", head + "egress:\n  allow:\n    - host: '*'\n      ports: [443]\n", 7, "egress.allow[0].host", "wildcard"},
		{"inner wildcard", head + "egress:\n  allow:\n    - host: 'a.*.org'\n      ports: [443]\n", 7, "egress.allow[0].host", "wildcard"},
		{"empty host", head + "egress:\n  allow:\n    - ports: [443]\n", 7, "egress.allow[0].host", "required"},
		{"bad cidr", head + "egress:\n  unsafe_allow_ranges:\n    - 127.0.0.1\n", 7, "egress.unsafe_allow_ranges[0]", "not a CIDR"},
		{"host bits", head + "egress:\n  unsafe_allow_ranges: [10.1.0.0/8]\n", 6, "egress.unsafe_allow_ranges[0]", "did you mean 10.0.0.0/8"},
		{"resolve ip key", head + "egress:\n  resolve:\n    1.2.3.4: 1.2.3.4\n", 7, `egress.resolve["1.2.3.4"]`, "is an IP address"},
		{"resolve wildcard", head + "egress:\n  resolve:\n    '*.a.org': 1.2.3.4\n", 7, `egress.resolve["*.a.org"]`, "wildcard"},
		{"resolve bad addr", head + "egress:\n  resolve:\n    up.test: up.other\n", 7, `egress.resolve["up.test"]`, "not an IP address"},
		{"model api", head + "models:\n  - name: m\n    api: cohere\n    upstream: https://x.example\n    credential: k\n    models: [a]\nsecrets:\n  k: {env: K}\n", 7, "models[0].api", `want "anthropic", "openai" or "gemini"`},
		{"model dup", head + "models:\n  - {name: m, api: openai, upstream: https://x.example, credential: k, models: [a]}\n  - {name: m, api: openai, upstream: https://x.example, credential: k, models: [a]}\nsecrets:\n  k: {env: K}\n", 7, "models[1].name", "declared twice"},
		{"model no name", head + "models:\n  - {api: openai, upstream: https://x.example, credential: k, models: [a]}\nsecrets:\n  k: {env: K}\n", 6, "models[0].name", "required"},
		{"upstream scheme", head + "models:\n  - name: m\n    api: openai\n    upstream: ftp://x.example\n    credential: k\n    models: [a]\nsecrets:\n  k: {env: K}\n", 8, "models[0].upstream", "http or https"},
		{"upstream relative", head + "models:\n  - name: m\n    api: openai\n    upstream: /v1\n    credential: k\n    models: [a]\nsecrets:\n  k: {env: K}\n", 8, "models[0].upstream", "http or https"},
		{"upstream userinfo", head + "models:\n  - name: m\n    api: openai\n    upstream: https://u:p@x.example\n    credential: k\n    models: [a]\nsecrets:\n  k: {env: K}\n", 8, "models[0].upstream", "user information"},
		{"upstream query", head + "models:\n  - name: m\n    api: openai\n    upstream: https://x.example/?a=b\n    credential: k\n    models: [a]\nsecrets:\n  k: {env: K}\n", 8, "models[0].upstream", "no query or fragment"},
		{"upstream fragment", head + "models:\n  - name: m\n    api: openai\n    upstream: 'https://x.example/#'\n    credential: k\n    models: [a]\nsecrets:\n  k: {env: K}\n", 8, "models[0].upstream", "no query or fragment"},
		{"upstream no host", head + "models:\n  - name: m\n    api: openai\n    upstream: 'https:///v1'\n    credential: k\n    models: [a]\nsecrets:\n  k: {env: K}\n", 8, "models[0].upstream", "with a host"},
		{"upstream port", head + "models:\n  - name: m\n    api: openai\n    upstream: 'https://x.example:0'\n    credential: k\n    models: [a]\nsecrets:\n  k: {env: K}\n", 8, "models[0].upstream", "port 0"},
		{"credential undeclared", head + "models:\n  - name: m\n    api: openai\n    upstream: https://x.example\n    credential: nope\n    models: [a]\n", 9, "models[0].credential", "names no secret declared under secrets (declared: )"},
		{"credential is a value", head + "models:\n  - name: m\n    api: openai\n    upstream: https://x.example\n    credential: sk-live-123\n    models: [a]\nsecrets:\n  k: {env: K}\n", 9, "models[0].credential", "(declared: k)"},
		{"credential missing", head + "models:\n  - name: m\n    api: openai\n    upstream: https://x.example\n    models: [a]\n", 6, "models[0].credential", "required"},
		{"no model globs", head + "models:\n  - name: m\n    api: openai\n    upstream: https://x.example\n    credential: k\n    models: []\nsecrets:\n  k: {env: K}\n", 10, "models[0].models", "at least one"},
		{"bad glob", head + "models:\n  - name: m\n    api: openai\n    upstream: https://x.example\n    credential: k\n    models: [ok, 'claude-[']\nsecrets:\n  k: {env: K}\n", 10, "models[0].models[1]", "not a valid glob"},
		{"budget negative", head + "budgets:\n  requests: -1\n", 6, "budgets.requests", "want 0 (unlimited) or more"},
		{"budget float", head + "budgets:\n  input_tokens: 1.5\n", 6, "budgets.input_tokens", `want an integer, not "1.5"`},
		{"budget string", head + "budgets:\n  output_tokens: lots\n", 6, "budgets.output_tokens", "want an integer"},
		{"budget bool", head + "budgets:\n  connections: true\n", 6, "budgets.connections", "want an integer"},
		{"budget overflow", head + "budgets:\n  requests: 99999999999999999999\n", 6, "budgets.requests", "want an integer"},
		{"size unit", head + "budgets:\n  egress_bytes: 1PB\n", 6, "budgets.egress_bytes", `size "1PB": want a whole number of bytes, or a number with a 1024-based unit`},
		{"size byte fraction", head + "budgets:\n  egress_bytes: 1.5B\n", 6, "budgets.egress_bytes", "a fraction of a byte"},
		{"size float", head + "budgets:\n  egress_bytes: 1.5\n", 6, "budgets.egress_bytes", "a fraction of a byte"},
		{"size negative", head + "budgets:\n  egress_bytes: -1\n", 6, "budgets.egress_bytes", `size "-1": is negative`},
		{"size hex", head + "budgets:\n  egress_bytes: 0x10\n", 6, "budgets.egress_bytes", "want a whole number of bytes"},
		{"size list", head + "budgets:\n  egress_bytes: [1]\n", 6, "budgets.egress_bytes", "want a size such as 1GiB"},
		{"size huge", head + "budgets:\n  egress_bytes: 9999999T\n", 6, "budgets.egress_bytes", "too large"},
		{"window unit", head + "budgets:\n  window: 3600\n", 6, "budgets.window", "want a duration"},
		{"window tiny", head + "budgets:\n  window: 1ms\n", 6, "budgets.window", "at least 1s"},
		{"window zero days", head + "budgets:\n  window: 0d\n", 6, "budgets.window", "1d to"},
		{"limit zero", head + "limits:\n  max_request_bytes: 0\n", 6, "limits.max_request_bytes", "positive size"},
		{"attachments negative", head + "limits:\n  max_attachments: -1\n", 6, "limits.max_attachments", "want 0"},
		{"mime params", head + "limits:\n  allowed_attachment_mime: ['image/png; q=1']\n", 6, "limits.allowed_attachment_mime[0]", "without parameters"},
		{"mime wildcard", head + "limits:\n  allowed_attachment_mime: ['image/*']\n", 6, "limits.allowed_attachment_mime[0]", "wildcards"},
		{"mime case", head + "limits:\n  allowed_attachment_mime: ['Image/png']\n", 6, "limits.allowed_attachment_mime[0]", "lower-case"},
		{"secret both", head + "secrets:\n  k: {env: K, file: /k}\n", 6, "secrets.k", "exactly one of env or file"},
		{"secret neither", head + "secrets:\n  k: {}\n", 6, "secrets.k", "exactly one of env or file"},
		{"secret scalar", head + "secrets:\n  k: sk-live-123\n", 6, "secrets.k", "cannot use !!str; want a mapping such as {env: NAME}"},
		{"secret value as env", head + "secrets:\n  k: {env: sk-live-123}\n", 6, "secrets.k.env", "not its value"},
		{"secret value as file", head + "secrets:\n  k: {file: sk-live-123}\n", 6, "secrets.k.file", "absolute, clean"},
		{"secret name", head + "secrets:\n  Anthropic_Key: {env: K}\n", 6, "secrets.Anthropic_Key", "a-z, 0-9 and -"},
		{"secret env name", head + "secrets:\n  k: {env: 'A-B'}\n", 6, "secrets.k.env", "want the name of an environment variable"},
		{"secret relative file", head + "secrets:\n  k: {file: key.txt}\n", 6, "secrets.k.file", "absolute, clean"},
		{"secret unclean file", head + "secrets:\n  k: {file: /etc/../k}\n", 6, "secrets.k.file", "absolute, clean"},
	} {
		_, err := Parse([]byte(tc.yaml), "bad.yaml")
		e := problemLike(err, tc.line, tc.field)
		if e == nil {
			t.Errorf("%s: Parse = %v, want an *Error", tc.name, err)
			continue
		}
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Parse = %v, want errors.Is ErrInvalid", tc.name, err)
		}
		if e.Line != tc.line || e.Field != tc.field || !strings.Contains(e.Msg, tc.msg) || e.Source != "bad.yaml" {
			t.Errorf("%s: Parse = %+v\nwant line %d, field %q, msg containing %q", tc.name, *e, tc.line, tc.field, tc.msg)
		}
		if strings.Contains(err.Error(), "sk-live") {
			t.Errorf("%s: error %q echoes a pasted secret", tc.name, err)
		}
		if !strings.HasPrefix(err.Error(), "bad.yaml:") {
			t.Errorf("%s: error %q does not name the file", tc.name, err)
		}
	}
}

// TestParseAllErrors checks that every problem is reported, in line order.
func TestParseAllErrors(t *testing.T) {
	src := "version: cordon/v1\nworkload: ''\ntenant: acme\npurpose: coding\nsecrets:\n  k: {}\negress:\n  allow:\n    - host: 1.2.3.4\n"
	_, err := Parse([]byte(src), "x.yaml")
	want := "x.yaml:2:1: workload: required\n" +
		"x.yaml:6:3: secrets.k: want exactly one of env or file\n" +
		"x.yaml:9:7: egress.allow[0].host: \"1.2.3.4\" is an IP address; name the host (use egress.resolve to pin its address)\n" +
		"x.yaml:9:7: egress.allow[0].ports: required: at least one port, e.g. [443]"
	if err == nil || err.Error() != want {
		t.Errorf("Parse = %v\nwant %s", err, want)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(filepath.Join(dir, "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) = %v, want ErrNotExist", err)
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, []byte(head+"#"+strings.Repeat("x", MaxFileBytes)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(big); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("Load(big) = %v, want too large", err)
	}
}

func TestEgressRuleMatch(t *testing.T) {
	exact := EgressRule{Host: "api.github.com", Ports: []int{443}}
	wild := EgressRule{Host: "*.example.org", Ports: []int{443, 80}}
	for _, tc := range []struct {
		r    EgressRule
		host string
		port int
		want bool
	}{
		{exact, "api.github.com", 443, true},
		{exact, "API.GitHub.com.", 443, true},
		{exact, "api.github.com", 80, false},
		{exact, "x.api.github.com", 443, false},
		{exact, "github.com", 443, false},
		{wild, "a.example.org", 80, true},
		{wild, "a.b.example.org", 443, true},
		{wild, "example.org", 443, false},
		{wild, ".example.org", 443, false},
		{wild, "badexample.org", 443, false},
		{wild, "a.example.org", 8080, false},
	} {
		if got := tc.r.Match(tc.host, tc.port); got != tc.want {
			t.Errorf("%s.Match(%q, %d) = %v, want %v", tc.r.Host, tc.host, tc.port, got, tc.want)
		}
	}
}

func TestModelAllows(t *testing.T) {
	m := Model{Models: []string{"claude-*", "gpt-4o"}}
	for id, want := range map[string]bool{"claude-opus-4": true, "claude-": true, "gpt-4o": true, "gpt-4o-mini": false, "xclaude-1": false, "": false} {
		if got := m.Allows(id); got != want {
			t.Errorf("Allows(%q) = %v, want %v", id, got, want)
		}
	}
}

func TestWarnings(t *testing.T) {
	src := head + "egress:\n  unsafe_allow_ranges: [127.0.0.1/32]\nmodels:\n" +
		"  - {name: local, api: openai, upstream: 'http://127.0.0.1:9/v1', credential: k, models: [a]}\n" +
		"  - {name: far, api: openai, upstream: 'http://llm.example/v1', credential: k, models: [a]}\n" +
		"  - {name: tls, api: openai, upstream: 'https://llm.example/v1', credential: k, models: [a]}\n" +
		"secrets:\n  k: {env: K}\n"
	c, err := Parse([]byte(src), "w.yaml")
	if err != nil {
		t.Fatal(err)
	}
	w := c.Warnings()
	if len(w) != 2 || !strings.Contains(w[0], "127.0.0.1/32") || !strings.Contains(w[1], "models far") {
		t.Errorf("Warnings() = %q, want the unsafe range and the far http upstream", w)
	}
}

func TestBudgetsLimits(t *testing.T) {
	b := Budgets{Requests: 1, InputTokens: 2, OutputTokens: 3, EgressBytes: 4, Connections: 5, ConcurrentStreams: 6}
	got := b.Limits()
	if got.Requests != 1 || got.InputTokens != 2 || got.OutputTokens != 3 || got.EgressBytes != 4 || got.Connections != 5 || got.Bytes != 0 {
		t.Errorf("Limits() = %+v", got)
	}
}

func TestCheckLeaks(t *testing.T) {
	dir := t.TempDir()
	keyDir := filepath.Join(dir, "keys")
	if err := os.Mkdir(keyDir, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(keyDir, link); err != nil {
		t.Fatal(err)
	}
	src := head + "secrets:\n  env-key: {env: K}\n  file-key: {file: " + filepath.Join(link, "k") + "}\n"
	if err := os.WriteFile(filepath.Join(keyDir, "k"), []byte("v"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Parse([]byte(src), "l.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const value = "sk-live-0123456789"
	vals := map[string][]byte{"env-key": []byte(value), "file-key": []byte("file-secret-value")}
	under := func(root string) func(string) bool {
		return func(p string) bool { return p == root || strings.HasPrefix(p, root+"/") }
	}
	nothing := func(string) bool { return false }

	if err := c.CheckLeaks(nothing, []string{"HOME=/home/agent", "ANTHROPIC_API_KEY=placeholder"}, vals); err != nil {
		t.Errorf("CheckLeaks(clean) = %v, want nil", err)
	}
	for _, tc := range []struct {
		name    string
		visible func(string) bool
		env     []string
		want    LeakError
	}{
		{"env equal", nothing, []string{"KEY=" + value}, LeakError{Secret: "env-key", EnvKey: "KEY"}},
		{"env contains", nothing, []string{"AUTH=Bearer " + value + ";x"}, LeakError{Secret: "env-key", EnvKey: "AUTH"}},
		{"file via literal path", under(link), nil, LeakError{Secret: "file-key", Path: filepath.Join(link, "k")}},
		{"file via resolved path", under(keyDir), nil, LeakError{Secret: "file-key", Path: filepath.Join(link, "k")}},
	} {
		err := c.CheckLeaks(tc.visible, tc.env, vals)
		var le *LeakError
		if !errors.As(err, &le) || *le != tc.want || !errors.Is(err, ErrSecretLeak) {
			t.Errorf("%s: CheckLeaks = %v, want %+v", tc.name, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), value) || strings.Contains(err.Error(), "file-secret-value") {
			t.Errorf("%s: CheckLeaks error %q prints the secret", tc.name, err)
		}
	}
}

func TestPolicyFiles(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"policy/default.cedar", "extra.cedar"} {
		p = filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("permit (principal, action, resource);\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	abs := filepath.Join(dir, "extra.cedar")
	load := func(body string) (*Config, error) {
		t.Helper()
		cfg := filepath.Join(dir, "cordon.yaml")
		if err := os.WriteFile(cfg, []byte(head+body), 0o644); err != nil {
			t.Fatal(err)
		}
		return Load(cfg)
	}

	c, err := load("policy:\n  - policy/default.cedar\n  - " + abs + "\n")
	if err != nil {
		t.Fatalf("Load = %v", err)
	}
	want := []string{filepath.Join(dir, "policy/default.cedar"), abs}
	if d := cmp.Diff(want, c.Policy); d != "" {
		t.Errorf("Policy (-want +got):\n%s", d)
	}
	if c, err := load(""); err != nil || c.Policy != nil {
		t.Errorf("no policy key: Policy = %q, %v; want nil", c.Policy, err)
	}

	for _, tc := range []struct {
		name, yaml string
		line       int
		field, msg string
	}{
		{"missing file", "policy:\n  - nope.cedar\n", 6, "policy[0]", `"nope.cedar": no such file (` + filepath.Join(dir, "nope.cedar") + ")"},
		{"relative to the config, not the cwd", "policy: [default.cedar]\n", 5, "policy[0]", "no such file"},
		{"directory", "policy: [policy]\n", 5, "policy[0]", "not a regular file"},
		{"empty path", "policy: ['']\n", 5, "policy[0]", "want the path of a Cedar policy file"},
		{"listed twice", "policy:\n  - extra.cedar\n  - ./extra.cedar\n", 7, "policy[1]", `"./extra.cedar" is the same file as policy[0]`},
		{"a string, not a list", "policy: extra.cedar\n", 5, "policy", "want a list"},
		{"unknown key beside it", "policy: [extra.cedar]\npolicies: [extra.cedar]\n", 6, "policies", `unknown field "policies"`},
	} {
		_, err := load(tc.yaml)
		e := problemLike(err, tc.line, tc.field)
		if e == nil || !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Load = %v, want an *Error", tc.name, err)
			continue
		}
		if e.Line != tc.line || e.Field != tc.field || !strings.Contains(e.Msg, tc.msg) {
			t.Errorf("%s: Load = %+v\nwant line %d, field %q, msg containing %q", tc.name, *e, tc.line, tc.field, tc.msg)
		}
		if !strings.HasPrefix(err.Error(), filepath.Join(dir, "cordon.yaml")+":") {
			t.Errorf("%s: error %q does not name file:line", tc.name, err)
		}
	}
}

// problemLike returns the problem in err on line with field (Parse now
// lists every problem, so the one a case is about need not be first), or
// else the first, or nil when err holds no *Error.
func problemLike(err error, line int, field string) *Error {
	var first *Error
	if !errors.As(err, &first) {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, one := range j.Unwrap() {
			if e, ok := one.(*Error); ok && e.Line == line && e.Field == field {
				return e
			}
		}
	}
	return first
}
