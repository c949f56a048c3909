package config

import (
	"fmt"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// Tool is one upstream MCP tool server. Exactly one of Command (a local
// server cordon starts in its own sandbox and speaks to over stdio) and
// URL (a remote streamable-HTTP server) is set.
type Tool struct {
	// Name prefixes the server's tools as the agent sees them
	// ("fs__read_file"): 1–32 of a-z, 0-9, '_' and '-', starting with a
	// letter, without "__". Key: name.
	Name string
	// Command is the server's argv inside its sandbox; the first element
	// is an absolute path there. Key: command.
	Command []string
	// Binds are host directories the server sees; nothing else of the
	// host is visible to it. Key: binds.
	Binds []ToolBind
	// Env is the server's environment (K: V). Key: env.
	Env map[string]string
	// SecretEnv maps an environment variable of the server to the name of
	// a custodied secret: the server gets the value, the agent never
	// does. Key: secret_env.
	SecretEnv map[string]string
	// Egress is what the server itself may reach (through its own egress
	// broker); empty: nothing. Key: egress.
	Egress Egress
	// URL is a remote server's streamable-HTTP endpoint (https, or http
	// on loopback). Key: url.
	URL string
	// Credential names the secret sent to URL as a bearer token. Key:
	// credential.
	Credential string
	// Allow lists the server's tools the agent may see (path.Match
	// globs); empty: all. Policy further decides. Key: allow.
	Allow []string
	// Timeout bounds one call; default 60s. Key: timeout.
	Timeout time.Duration
	// Memory bounds the server's sandbox (a size; default 1GiB). Key:
	// memory.
	Memory int64
}

// ToolBind is a host path the tool server sees.
type ToolBind struct {
	// Source is an absolute host path. Key: source.
	Source string
	// Target is the absolute path in the server's sandbox; default Source.
	// Key: target.
	Target string
	// Writable makes the bind read-write; default read-only. Key:
	// writable.
	Writable bool
}

// Approvals configure approval waits.
type Approvals struct {
	// Wait is how long a call waits for an operator before it answers
	// "approval pending" (the agent retries the same call later); default
	// 30s. Key: wait.
	Wait time.Duration
	// TTL is how long an approval request stays open, and how long an
	// approval stays usable once given; default 15m. Key: ttl.
	TTL time.Duration
}

// Tool limits defaults.
const (
	DefaultToolTimeout        = 60 * time.Second
	DefaultApprovalWait       = 30 * time.Second
	DefaultApprovalTTL        = 15 * time.Minute
	DefaultMaxToolArgBytes    = 64 << 10
	DefaultMaxToolResultBytes = 128 << 10
	DefaultMaxMCPMessageBytes = 1 << 20
	DefaultToolMemory         = 1 << 30
	// MaxToolResultBytesLimit is the largest max_tool_result_bytes: a
	// result travels to the privileged side in one datagram.
	MaxToolResultBytesLimit = 160 << 10
)

type rawTool struct {
	Name       string            `yaml:"name"`
	Command    []string          `yaml:"command"`
	Binds      []rawToolBind     `yaml:"binds"`
	Env        map[string]string `yaml:"env"`
	SecretEnv  map[string]string `yaml:"secret_env"`
	Egress     rawEgress         `yaml:"egress"`
	URL        string            `yaml:"url"`
	Credential string            `yaml:"credential"`
	Allow      []string          `yaml:"allow"`
	Timeout    string            `yaml:"timeout"`
	Memory     sizeValue         `yaml:"memory"`
}

type rawToolBind struct {
	Source   string `yaml:"source"`
	Target   string `yaml:"target"`
	Writable bool   `yaml:"writable"`
}

type rawApprovals struct {
	Wait string `yaml:"wait"`
	TTL  string `yaml:"ttl"`
}

var toolNameRE = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)

// buildTools checks the tool servers, the approval timings and the tool
// broker's limits and budget.
func buildTools(c *Config, raw *rawConfig, ix *index) {
	seen := map[string]bool{}
	for i, t := range raw.Tools {
		p := fmt.Sprintf("tools[%d]", i)
		switch {
		case !toolNameRE.MatchString(t.Name) || strings.Contains(t.Name, "__") || strings.HasSuffix(t.Name, "_"):
			ix.errf(p+".name", "%q: want 1–32 of a-z, 0-9, '_' and '-', starting with a letter, not ending with '_', without \"__\"", t.Name)
		case seen[t.Name]:
			ix.errf(p+".name", "tool server %q is declared twice", t.Name)
		}
		seen[t.Name] = true
		c.Tools = append(c.Tools, buildTool(&t, p, raw, ix))
	}
	buildApprovals(c, &raw.Approvals, ix)
	buildToolLimits(c, raw, ix)
}

// buildTool checks one tool server declared at p (its name is checked by
// the caller) and returns it with the defaults filled in.
func buildTool(t *rawTool, p string, raw *rawConfig, ix *index) Tool {
	tool := Tool{Name: t.Name, Command: t.Command, Env: t.Env, SecretEnv: t.SecretEnv, URL: t.URL, Credential: t.Credential,
		Allow: t.Allow, Timeout: DefaultToolTimeout, Memory: DefaultToolMemory}
	checkToolKind(t, p, raw, ix)
	for j, b := range t.Binds {
		bp := fmt.Sprintf("%s.binds[%d]", p, j)
		tb := ToolBind{Source: b.Source, Target: b.Target, Writable: b.Writable}
		if tb.Target == "" {
			tb.Target = tb.Source
		}
		if !filepath.IsAbs(tb.Source) || filepath.Clean(tb.Source) != tb.Source || !filepath.IsAbs(tb.Target) || filepath.Clean(tb.Target) != tb.Target {
			ix.errf(bp, "source and target must be absolute, clean paths")
		}
		tool.Binds = append(tool.Binds, tb)
	}
	checkToolEnv(t, p, raw, ix)
	for j, g := range t.Allow {
		if _, err := path.Match(g, ""); g == "" || err != nil {
			ix.errf(fmt.Sprintf("%s.allow[%d]", p, j), "%q is not a valid glob (path.Match syntax)", g)
		}
	}
	if t.Timeout != "" {
		d, err := time.ParseDuration(t.Timeout)
		if err != nil || d < 100*time.Millisecond || d > time.Hour {
			ix.errf(p+".timeout", "%q: want a duration from 100ms to 1h", t.Timeout)
		}
		tool.Timeout = d
	}
	if t.Memory.set {
		if t.Memory.n < 8<<20 {
			ix.errf(p+".memory", "is %d; want at least 8MiB", t.Memory.n)
		}
		tool.Memory = t.Memory.n
	}
	var e Config
	buildEgress(&e, &t.Egress, ix)
	tool.Egress = e.Egress
	return tool
}

// checkToolKind checks a tool server is exactly one of a local server
// (command, which cordon contains) or a remote one (url), with only the
// settings that kind takes.
func checkToolKind(t *rawTool, p string, raw *rawConfig, ix *index) {
	switch {
	case (len(t.Command) == 0) == (t.URL == ""):
		ix.errf(p, "want exactly one of command (a local server cordon contains) or url (a remote server)")
	case len(t.Command) > 0:
		if !filepath.IsAbs(t.Command[0]) {
			ix.errf(p+".command", "the program must be an absolute path inside the server's sandbox")
		}
		if t.Credential != "" {
			ix.errf(p+".credential", "only for url servers; give a local server its secret with secret_env")
		}
	default:
		u, err := checkUpstream(t.URL)
		if err != nil {
			ix.errf(p+".url", "%v", err)
		} else if u.Scheme == "http" && !isLoopbackHost(u.Hostname()) {
			ix.errf(p+".url", "plain http beyond loopback would send the credential in clear; use https")
		}
		if len(t.Binds) > 0 || len(t.Env) > 0 || len(t.SecretEnv) > 0 || len(t.Egress.Allow) > 0 {
			ix.errf(p, "binds, env, secret_env and egress apply to local (command) servers only")
		}
		if t.Credential != "" {
			if !ix.secretDeclared(raw, t.Credential) {
				ix.errf(p+".credential", "names no secret declared under secrets")
			}
		}
	}
}

// checkToolEnv checks a tool server's environment: variable names, no NUL
// in values, and secret_env entries that name declared secrets.
func checkToolEnv(t *rawTool, p string, raw *rawConfig, ix *index) {
	for _, k := range sortedKeys(t.Env) {
		if !envNameRE.MatchString(k) || strings.ContainsRune(t.Env[k], 0) {
			ix.errf(join(p+".env", k), "want NAME: value with a variable name of letters, digits and _")
		}
	}
	for _, k := range sortedKeys(t.SecretEnv) {
		if !envNameRE.MatchString(k) {
			ix.errf(join(p+".secret_env", k), "want a variable name of letters, digits and _")
		}
		if !ix.secretDeclared(raw, t.SecretEnv[k]) {
			ix.errf(join(p+".secret_env", k), "names no secret declared under secrets")
		}
	}
}

// buildApprovals sets how long a tool call waits for an approval and how
// long a granted one lasts: the defaults, overridden within bounds.
func buildApprovals(c *Config, a *rawApprovals, ix *index) {
	c.Approvals = Approvals{Wait: DefaultApprovalWait, TTL: DefaultApprovalTTL}
	for _, f := range []struct {
		key, v string
		lo, hi time.Duration
		dst    *time.Duration
	}{
		{"approvals.wait", a.Wait, 0, 10 * time.Minute, &c.Approvals.Wait},
		{"approvals.ttl", a.TTL, time.Second, 7 * 24 * time.Hour, &c.Approvals.TTL},
	} {
		if f.v == "" {
			continue
		}
		d, err := time.ParseDuration(f.v)
		if err != nil || d < f.lo || d > f.hi {
			ix.errf(f.key, "%q: want a duration from %s to %s", f.v, f.lo, f.hi)
		}
		*f.dst = d
	}
}

// buildToolLimits sets the tool broker's message size limits (defaults,
// overridden up to a ceiling each) and its tool-call budget.
func buildToolLimits(c *Config, raw *rawConfig, ix *index) {
	l := &raw.Limits
	c.Limits.MaxToolArgumentBytes, c.Limits.MaxToolResultBytes, c.Limits.MaxMCPMessageBytes = DefaultMaxToolArgBytes, DefaultMaxToolResultBytes, DefaultMaxMCPMessageBytes
	for _, f := range []struct {
		key string
		v   sizeValue
		hi  int64
		dst *int64
	}{
		{"max_tool_argument_bytes", l.MaxToolArgumentBytes, 128 << 10, &c.Limits.MaxToolArgumentBytes},
		{"max_tool_result_bytes", l.MaxToolResultBytes, MaxToolResultBytesLimit, &c.Limits.MaxToolResultBytes},
		{"max_mcp_message_bytes", l.MaxMCPMessageBytes, 16 << 20, &c.Limits.MaxMCPMessageBytes},
	} {
		if !f.v.set {
			continue
		}
		if f.v.n <= 0 || f.v.n > f.hi {
			ix.errf("limits."+f.key, "is %d; want a positive size up to %d", f.v.n, f.hi)
		}
		*f.dst = f.v.n
	}
	if b := raw.Budgets.ToolCalls; b.set {
		if b.n < 0 {
			ix.errf("budgets.tool_calls", "is %d; want 0 (unlimited) or more", b.n)
		}
		c.Budgets.ToolCalls = b.n
	}
}
