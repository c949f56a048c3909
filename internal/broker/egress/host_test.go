package egress

import (
	"net/netip"
	"strings"
	"testing"
)

func TestNormalizeHost(t *testing.T) {
	tests := []struct {
		in, want, why string
	}{
		{"example.org", "example.org", ""},
		{"Example.ORG.", "example.org", ""},
		{"api.github.com", "api.github.com", ""},
		{"xn--bcher-kva.example", "xn--bcher-kva.example", ""},
		{"_dmarc.example.org", "_dmarc.example.org", ""},
		{"1e100.net", "1e100.net", ""},
		{"127.0.0.1.nip.io", "127.0.0.1.nip.io", ""}, // a name: its addresses are checked
		{"127.0.0.1", "", ReasonIPLiteral},
		{"127.0.0.1.", "", ReasonIPLiteral},
		{"127.1", "", ReasonIPLiteral},
		{"2130706433", "", ReasonIPLiteral},
		{"0x7f.1", "", ReasonIPLiteral},
		{"0x7F000001", "", ReasonIPLiteral},
		{"0177.0.0.1", "", ReasonIPLiteral},
		{"foo.0x", "", ReasonIPLiteral},
		{"example.123", "", ReasonIPLiteral},
		{"[::1]", "", ReasonIPLiteral},
		{"::1", "", ReasonIPLiteral},
		{"[::ffff:127.0.0.1]", "", ReasonIPLiteral},
		{"[fe80::1%25eth0]", "", ReasonIPLiteral},
		{"169.254.169.254", "", ReasonIPLiteral},
		{"", "", ReasonBadHost},
		{".", "", ReasonBadHost},
		{"example.org..", "", ReasonBadHost},
		{"a..b", "", ReasonBadHost},
		{"bücher.example", "", ReasonBadHost},
		{"exa mple.org", "", ReasonBadHost},
		{"ex%41mple.org", "", ReasonBadHost},
		{"-a.example", "", ReasonBadHost},
		{"a-.example", "", ReasonBadHost},
		{"*.example.org", "", ReasonBadHost},
		{"[example.org]", "", ReasonBadHost},
		{strings.Repeat("a", 64) + ".org", "", ReasonBadHost},
		{strings.Repeat("a.", 127) + "org", "", ReasonBadHost},
	}
	for _, tt := range tests {
		got, why := normalizeHost(tt.in)
		if got != tt.want || why != tt.why {
			t.Errorf("normalizeHost(%q) = %q, %q, want %q, %q", tt.in, got, why, tt.want, tt.why)
		}
	}
}

func TestSplitHostPort(t *testing.T) {
	tests := []struct {
		in     string
		def    int
		host   string
		port   int
		wantOK bool
	}{
		{"example.org:443", 0, "example.org", 443, true},
		{"example.org", 80, "example.org", 80, true},
		{"example.org", 0, "", 0, false},
		{"example.org:", 80, "", 0, false},
		{"example.org:+443", 0, "", 0, false},
		{"example.org:0", 0, "", 0, false},
		{"example.org:65536", 0, "", 0, false},
		{"example.org:000443", 0, "", 0, false},
		{"[::1]:443", 0, "[::1]", 443, true},
		{"[::1]", 80, "[::1]", 80, true},
		{"[::1]x", 80, "", 0, false},
		{"::1:443", 0, "::1", 443, true}, // bare IPv6: still a literal
		{"fe80::1", 80, "fe80::1", 80, true},
		{"fe80::1", 0, "", 0, false},
		{":443", 0, "", 0, false},
	}
	for _, tt := range tests {
		h, p, ok := splitHostPort(tt.in, tt.def)
		if h != tt.host || p != tt.port || ok != tt.wantOK {
			t.Errorf("splitHostPort(%q, %d) = %q, %d, %v, want %q, %d, %v", tt.in, tt.def, h, p, ok, tt.host, tt.port, tt.wantOK)
		}
	}
}

func TestAllowMatch(t *testing.T) {
	a, err := compileAllow([]Rule{
		{Host: "api.github.com"},
		{Host: "*.example.org", Ports: []int{443, 8443}},
		{Host: "Plain.Example.COM.", Ports: []int{80}},
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		host      string
		port      int
		rule, why string
	}{
		{"api.github.com", 443, "api.github.com", ""},
		{"api.github.com", 80, "api.github.com", ReasonPortNotAllowed},
		{"github.com", 443, "", ReasonHostNotAllowed},
		{"evilapi.github.com", 443, "", ReasonHostNotAllowed},
		{"sub.example.org", 443, "*.example.org", ""},
		{"a.b.example.org", 8443, "*.example.org", ""},
		{"example.org", 443, "", ReasonHostNotAllowed},
		{"badexample.org", 443, "", ReasonHostNotAllowed},
		{"sub.example.org", 22, "*.example.org", ReasonPortNotAllowed},
		{"plain.example.com", 80, "plain.example.com", ""},
		{"plain.example.com", 443, "plain.example.com", ReasonPortNotAllowed},
	}
	for _, tt := range tests {
		rule, why := a.match(tt.host, tt.port)
		if rule != tt.rule || why != tt.why {
			t.Errorf("match(%q, %d) = %q, %q, want %q, %q", tt.host, tt.port, rule, why, tt.rule, tt.why)
		}
	}
	for _, bad := range []Rule{{Host: "*"}, {Host: "*.*.org"}, {Host: "a.*.org"}, {Host: "10.0.0.1"}, {Host: "[::1]"}, {Host: "*.1"}, {Host: "x.org", Ports: []int{0}}, {Host: "x.org", Ports: []int{70000}}, {Host: ""}} {
		if _, err := compileAllow([]Rule{bad}); err == nil {
			t.Errorf("compileAllow(%+v) = nil error, want an error", bad)
		}
	}
}

// FuzzHostPort checks authority splitting, host normalization and the
// allowlist on arbitrary input: an accepted host is canonical, never an
// IP address in any form, and matches only what the rules say.
func FuzzHostPort(f *testing.F) {
	for _, s := range []string{"example.org:443", "Sub.Example.ORG.:8443", "127.1:443", "[::1]:443", "0x7f.1:80", "2130706433:443", "a.b.example.org:443", "bücher.example:443"} {
		f.Add(s)
	}
	a, err := compileAllow([]Rule{{Host: "api.example.com"}, {Host: "*.example.org", Ports: []int{443, 8443}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, authority string) {
		host, port, ok := splitHostPort(authority, 0)
		if !ok {
			return
		}
		if port < 1 || port > 65535 {
			t.Fatalf("splitHostPort(%q) port %d", authority, port)
		}
		n, why := normalizeHost(host)
		if why != "" {
			if n != "" {
				t.Fatalf("normalizeHost(%q) = %q with reason %q", host, n, why)
			}
			return
		}
		if n2, why2 := normalizeHost(n); n2 != n || why2 != "" {
			t.Fatalf("normalizeHost not idempotent: %q -> %q -> %q, %q", host, n, n2, why2)
		}
		if _, err := netip.ParseAddr(n); err == nil {
			t.Fatalf("normalizeHost(%q) = %q, an IP literal", host, n)
		}
		if strings.ContainsAny(n, ":[]%/ ") || strings.HasSuffix(n, ".") || strings.ToLower(n) != n {
			t.Fatalf("normalizeHost(%q) = %q, not canonical", host, n)
		}
		for i := 0; i < len(n); i++ {
			if n[i] >= 0x80 {
				t.Fatalf("normalizeHost(%q) = %q, not ASCII", host, n)
			}
		}
		rule, why := a.match(n, port)
		if why == "" {
			switch {
			case rule == "api.example.com" && n == "api.example.com" && port == 443:
			case rule == "*.example.org" && strings.HasSuffix(n, ".example.org") && (port == 443 || port == 8443):
			default:
				t.Fatalf("match(%q, %d) allowed by %q", n, port, rule)
			}
		}
	})
}
