package config

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseIngress(t *testing.T) {
	lo := func(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }
	for _, c := range []struct {
		yaml string
		want []IngressRoute
	}{
		{"", nil},
		{"ingress:\n  - {name: ui, port: 18789}\n",
			[]IngressRoute{{Name: "ui", Port: 18789, Listen: lo("127.0.0.1:18789"), MaxConcurrent: DefaultIngressMaxConcurrent}}},
		{"ingress:\n  - {name: ui, port: 8000, listen: '127.0.0.1:0', max_concurrent: 3}\n  - {name: api, port: 8080, listen: '[::1]:9000'}\n",
			[]IngressRoute{
				{Name: "ui", Port: 8000, Listen: lo("127.0.0.1:0"), MaxConcurrent: 3},
				{Name: "api", Port: 8080, Listen: lo("[::1]:9000"), MaxConcurrent: DefaultIngressMaxConcurrent},
			}},
		{"ingress:\n  - {name: ui, port: 8000, listen: '0.0.0.0:8080', unsafe_listen: true}\n",
			[]IngressRoute{{Name: "ui", Port: 8000, Listen: lo("0.0.0.0:8080"), UnsafeListen: true, MaxConcurrent: DefaultIngressMaxConcurrent}}},
	} {
		got, err := Parse([]byte(head+c.yaml), "i.yaml")
		if err != nil {
			t.Errorf("Parse(%q) = %v", c.yaml, err)
			continue
		}
		if diff := cmp.Diff(c.want, got.Ingress, cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
			t.Errorf("Parse(%q).Ingress: (-want +got)\n%s", c.yaml, diff)
		}
	}
}

func TestParseIngressErrors(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"ingress:\n  - {port: 8000}", "ingress[0].name: required"},
		{"ingress:\n  - {name: 'a b', port: 8000}", "ingress[0].name"},
		{"ingress:\n  - {name: ui}", "ingress[0].port: required"},
		{"ingress:\n  - {name: ui, port: 0}", "ingress[0].port: 0 is not a port"},
		{"ingress:\n  - {name: ui, port: 65536}", "not a port"},
		{"ingress:\n  - {name: ui, port: '80'}", "want an integer"},
		{"ingress:\n  - {name: ui, port: 8000}\n  - {name: ui, port: 8001}", `route "ui" is declared twice`},
		{"ingress:\n  - {name: a, port: 8000}\n  - {name: b, port: 8000, listen: '127.0.0.1:81'}", "port 8000 is already the port of ingress[0]"},
		{"ingress:\n  - {name: a, port: 8000, listen: '127.0.0.1:90'}\n  - {name: b, port: 8001, listen: '127.0.0.1:90'}", "127.0.0.1:90 is already the address of ingress[0]"},
		{"ingress:\n  - {name: ui, port: 8000, listen: 'localhost:80'}", "not an IP address and port"},
		{"ingress:\n  - {name: ui, port: 8000, listen: '127.0.0.1'}", "not an IP address and port"},
		{"ingress:\n  - {name: ui, port: 8000, listen: '[fe80::1%eth0]:80'}", "zone"},
		// Not loopback: refused without unsafe_listen.
		{"ingress:\n  - {name: ui, port: 8000, listen: '0.0.0.0:80'}", "ingress[0].listen: 0.0.0.0:80 is not a loopback address"},
		{"ingress:\n  - {name: ui, port: 8000, listen: '192.0.2.1:80'}", "set unsafe_listen: true"},
		{"ingress:\n  - {name: ui, port: 8000, max_concurrent: 0}", "ingress[0].max_concurrent: is 0"},
		{"ingress:\n  - {name: ui, port: 8000, max_concurrent: 5000}", "want 1 to 4096"},
		{"ingress:\n  - {name: ui, port: 8000, host: x}", "host"},
		{"ingress: {name: ui}", "ingress"},
		// Inside the sandbox, ports below 1024 are the gateway's (80–83:
		// model, egress, tools, state): a route there would hand any
		// local user the sandbox's brokers — its model key, its egress,
		// its managed state. The program cannot listen below 1024.
		{"ingress:\n  - {name: m, port: 80}", "ingress[0].port: 80 is below 1024"},
		{"ingress:\n  - {name: s, port: 83, listen: '127.0.0.1:0'}", "ingress[0].port: 83 is below 1024"},
		{"ingress:\n  - {name: s, port: 1023}", "ingress[0].port: 1023 is below 1024"},
		{"budgets: {ingress_connections: -1}", "budgets.ingress_connections: is -1"},
		{"budgets: {ingress_bytes: lots}", "size"},
	} {
		_, err := Parse([]byte(head+c.yaml+"\n"), "i.yaml")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", c.yaml, err, c.want)
		}
	}
}

func TestIngressBudgetsAndWarnings(t *testing.T) {
	c, err := Parse([]byte(head+"budgets: {ingress_connections: 5, ingress_bytes: 1MiB}\ningress:\n  - {name: ui, port: 8000}\n  - {name: pub, port: 8001, listen: '0.0.0.0:8081', unsafe_listen: true}\n"), "i.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if l := c.Budgets.Limits(); l.IngressConnections != 5 || l.IngressBytes != 1<<20 {
		t.Errorf("Budgets.Limits() = %+v, want ingress_connections 5, ingress_bytes 1MiB", l)
	}
	w := c.Warnings()
	if len(w) != 1 || !strings.Contains(w[0], "ingress pub") || !strings.Contains(w[0], "0.0.0.0:8081") {
		t.Errorf("Warnings() = %q, want one warning for route pub only", w)
	}
}
