package egress

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// defaultPorts are the ports a Rule allows when it lists none: HTTPS only.
var defaultPorts = []int{443}

// splitHostPort splits an authority ("host:port", "[v6]:port", or "host"
// when defaultPort is not zero) without interpreting the host. The port is
// plain decimal 1–65535: no sign, no spaces, at most five digits.
func splitHostPort(authority string, defaultPort int) (host string, port int, ok bool) {
	if authority == "" || len(authority) > 300 {
		return "", 0, false
	}
	host, ps := authority, ""
	if strings.HasPrefix(authority, "[") {
		end := strings.IndexByte(authority, ']')
		if end < 0 {
			return "", 0, false
		}
		host = authority[:end+1]
		rest := authority[end+1:]
		switch {
		case rest == "":
		case rest[0] == ':':
			ps = rest[1:]
			if ps == "" {
				return "", 0, false
			}
		default:
			return "", 0, false
		}
	} else if i := strings.LastIndexByte(authority, ':'); i >= 0 {
		host, ps = authority[:i], authority[i+1:]
		if strings.IndexByte(host, ':') >= 0 {
			// Bare IPv6 without brackets ("::1:443") is ambiguous but an
			// address either way: keep it for normalizeHost to refuse.
			if _, err := netip.ParseAddr(host); err != nil {
				host, ps = authority, ""
			}
		} else if ps == "" {
			return "", 0, false
		}
	}
	if ps == "" {
		if defaultPort == 0 || host == "" {
			return "", 0, false
		}
		return host, defaultPort, true
	}
	if len(ps) > 5 {
		return "", 0, false
	}
	for i := 0; i < len(ps); i++ {
		if ps[i] < '0' || ps[i] > '9' {
			return "", 0, false
		}
		port = port*10 + int(ps[i]-'0')
	}
	if port < 1 || port > 65535 || host == "" {
		return "", 0, false
	}
	return host, port, true
}

// normalizeHost returns h as a canonical DNS hostname: ASCII lower case,
// no trailing dot, LDH labels (underscore tolerated) of 1–63 bytes, at
// most 253 bytes. It returns ReasonIPLiteral for any spelling of an IP
// address — bracketed or bare IPv6, dotted quad, and the forms inet_aton
// and URL parsers accept ("127.1", "2130706433", "0x7f.1", "0177.0.0.1"):
// a name whose last label is a number is treated as an address, as the
// WHATWG URL standard does, so no TLD can ever be numeric here. Anything
// else that is not a hostname, including non-ASCII (IDNA must arrive as
// its xn-- form), is ReasonBadHost.
func normalizeHost(h string) (string, string) {
	if h == "" || len(h) > 300 {
		return "", ReasonBadHost
	}
	if strings.ContainsAny(h, "[]:%") {
		s := strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
		if _, err := netip.ParseAddr(s); err == nil {
			return "", ReasonIPLiteral
		}
		return "", ReasonBadHost
	}
	var b strings.Builder
	lower := true
	for i := 0; i < len(h); i++ {
		c := h[i]
		if c >= 0x80 {
			return "", ReasonBadHost
		}
		if 'A' <= c && c <= 'Z' {
			lower = false
		}
	}
	if !lower {
		b.Grow(len(h))
		for i := 0; i < len(h); i++ {
			c := h[i]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			b.WriteByte(c)
		}
		h = b.String()
	}
	h = strings.TrimSuffix(h, ".")
	if h == "" || len(h) > 253 {
		return "", ReasonBadHost
	}
	if _, err := netip.ParseAddr(h); err == nil {
		return "", ReasonIPLiteral
	}
	last := h
	for rest := h; ; {
		i := strings.IndexByte(rest, '.')
		label := rest
		if i >= 0 {
			label = rest[:i]
		}
		if !validLabel(label) {
			return "", ReasonBadHost
		}
		last = label
		if i < 0 {
			break
		}
		rest = rest[i+1:]
	}
	if numericLabel(last) {
		return "", ReasonIPLiteral
	}
	return h, ""
}

func validLabel(l string) bool {
	if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
		return false
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// numericLabel reports whether l is a number as IPv4 parsers read one:
// decimal or octal digits, or 0x followed by hex digits (possibly none).
func numericLabel(l string) bool {
	if len(l) >= 2 && l[0] == '0' && l[1] == 'x' {
		for i := 2; i < len(l); i++ {
			c := l[i]
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				return false
			}
		}
		return true
	}
	for i := 0; i < len(l); i++ {
		if l[i] < '0' || l[i] > '9' {
			return false
		}
	}
	return l != ""
}

// allowlist is the compiled form of Options.Allow. Matching uses names
// only and happens before any resolution.
type allowlist struct {
	exact map[string][]rulePorts
	wild  []wildRule
}

type rulePorts struct {
	pattern string
	ports   []int
}

type wildRule struct {
	suffix string // ".example.org"
	rulePorts
}

func compileAllow(rules []Rule) (*allowlist, error) {
	a := &allowlist{exact: map[string][]rulePorts{}}
	for i, r := range rules {
		ports := r.Ports
		if len(ports) == 0 {
			ports = defaultPorts
		}
		for _, p := range ports {
			if p < 1 || p > 65535 {
				return nil, fmt.Errorf("egress: allow rule %d (%q): port %d out of range", i, r.Host, p)
			}
		}
		ports = slices.Clone(ports)
		slices.Sort(ports)
		name, wild := r.Host, strings.HasPrefix(r.Host, "*.")
		if wild {
			name = name[2:]
		}
		n, why := normalizeHost(name)
		if why != "" || strings.Contains(name, "*") {
			return nil, fmt.Errorf("egress: allow rule %d (%q): not a hostname or *.hostname pattern", i, r.Host)
		}
		if wild {
			pattern := "*." + n
			a.wild = append(a.wild, wildRule{"." + n, rulePorts{pattern, ports}})
		} else {
			a.exact[n] = append(a.exact[n], rulePorts{n, ports})
		}
	}
	return a, nil
}

// match reports which rule allows host (already normalized) on port. It
// returns the deciding rule's pattern and "" when allowed, or the reason
// for a denial: ReasonHostNotAllowed when no rule names the host,
// ReasonPortNotAllowed when some do but none lists the port (rule is then
// the first rule naming the host). A wildcard "*.example.org" matches any
// name below example.org at any depth, never example.org itself. Several
// matching rules union their ports.
func (a *allowlist) match(host string, port int) (rule, reason string) {
	for _, r := range a.exact[host] {
		if rule == "" {
			rule = r.pattern
		}
		if slices.Contains(r.ports, port) {
			return r.pattern, ""
		}
	}
	for _, w := range a.wild {
		if len(host) > len(w.suffix) && strings.HasSuffix(host, w.suffix) {
			if rule == "" {
				rule = w.pattern
			}
			if slices.Contains(w.ports, port) {
				return w.pattern, ""
			}
		}
	}
	if rule == "" {
		return "", ReasonHostNotAllowed
	}
	return rule, ReasonPortNotAllowed
}
