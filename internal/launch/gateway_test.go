package launch

import (
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/policy"
)

// A daemon client's configuration is parsed without reading any path it
// names: a tool server with binds (host paths) is refused, a secret the
// client sent no value for is refused, and the policy files must be the
// ones the configuration names. The same configuration without the
// offending part is the positive control.
func TestDetachedPlan(t *testing.T) {
	head := "version: cordon/v1\nworkload: demo\ntenant: acme\npurpose: coding\n"
	tool := "tools:\n  - name: t\n    command: [/bin/cat]\n"
	tests := []struct {
		name     string
		d        Detached
		wantErr  string
		toolsLen int
	}{
		{"tool server", Detached{Config: []byte(head + tool)}, "", 1},
		{"tool server with binds", Detached{Config: []byte(head + tool + "    binds: [{source: /opt, target: /opt}]\n")}, "never opens", 0},
		{"secret sent", Detached{Config: []byte(head + "secrets:\n  k: {env: K}\n"), Secrets: map[string][]byte{"k": []byte("v")}}, "", 0},
		{"secret not sent", Detached{Config: []byte(head + "secrets:\n  k: {env: K}\n"), Secrets: map[string][]byte{}}, "no value", 0},
		{"policy not sent", Detached{Config: []byte(head + "policy: [p.cedar]\n")}, "policy files", 0},
		// Re-allowing address ranges is the host operator's decision: a
		// non-root daemon client is refused, root (the control) is not.
		{"unsafe ranges from a user", Detached{Config: []byte(head + "egress:\n  unsafe_allow_ranges: [127.0.0.0/8]\n"), Unprivileged: true}, "only root may re-allow", 0},
		{"a tool server's unsafe ranges from a user", Detached{Config: []byte(head + tool + "    egress:\n      unsafe_allow_ranges: [127.0.0.0/8]\n"), Unprivileged: true}, "only root may re-allow", 0},
		{"a tool server's unsafe ranges from root", Detached{Config: []byte(head + tool + "    egress:\n      unsafe_allow_ranges: [127.0.0.0/8]\n")}, "", 1},
		{"unsafe ranges from root", Detached{Config: []byte(head + "egress:\n  unsafe_allow_ranges: [127.0.0.0/8]\n")}, "", 0},
		// A route's host listener is opened by root: a non-root client
		// may not have it take a privileged port (one only root can bind,
		// which local clients trust as root's). Root, port 0 and a port
		// from 1024 on are the controls. (The default listen,
		// 127.0.0.1:<port>, is never privileged: a route's sandbox port
		// is 1024 or more.)
		{"an ingress route on a privileged host port from a user", Detached{Config: []byte(head + "ingress:\n  - {name: ui, port: 8080, listen: \"127.0.0.1:443\"}\n"), Unprivileged: true}, "privileged", 0},
		{"an ingress route on a privileged IPv6 host port from a user", Detached{Config: []byte(head + "ingress:\n  - {name: ui, port: 8080, listen: \"[::1]:1023\"}\n"), Unprivileged: true}, "privileged", 0},
		{"an ingress route on a privileged host port from root", Detached{Config: []byte(head + "ingress:\n  - {name: ui, port: 8080, listen: \"127.0.0.1:22\"}\n")}, "", 0},
		{"an ingress route on port 0 from a user", Detached{Config: []byte(head + "ingress:\n  - {name: ui, port: 8080, listen: \"127.0.0.1:0\"}\n"), Unprivileged: true}, "", 0},
		{"an ingress route on port 1024 from a user", Detached{Config: []byte(head + "ingress:\n  - {name: ui, port: 8080, listen: \"127.0.0.1:1024\"}\n"), Unprivileged: true}, "", 0},
		{"another policy sent", Detached{Config: []byte(head + "policy: [p.cedar]\n"), Policies: []policy.Source{{Name: "q.cedar", Data: []byte("permit(principal, action, resource);")}}}, "configuration names p.cedar", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.d.Source = "test.yaml"
			p, err := DetachedPlan(tt.d, nil, false)
			if tt.wantErr == "" {
				if err != nil || len(p.Config().Tools) != tt.toolsLen || p.PolicyDigest() == "" {
					t.Fatalf("DetachedPlan(%s) = %v, %v; want a plan with %d tool servers", tt.name, p, err, tt.toolsLen)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("DetachedPlan(%s) = %v, want an error mentioning %q", tt.name, err, tt.wantErr)
			}
		})
	}
}
