package gateway

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/broker/egress"
	"github.com/cordon-project/cordon/internal/broker/ingress"
	"github.com/cordon-project/cordon/internal/broker/model"
	"github.com/cordon-project/cordon/internal/broker/tool"
	"github.com/cordon-project/cordon/internal/gateway/dial"
)

// Each broker process gets only the secrets its broker names (plus the
// redaction-only ones nothing uses; a stdio tool server's secret_env goes
// to the tool broker alone), and only its broker's destinations in the
// dialer's policy. A zero uid is refused, never replaced by a shared one.
func TestBrokerSpecsSplitSecretsAndDestinations(t *testing.T) {
	o := StartOptions{Config: ChildConfig{
		Model: model.Config{Routes: []model.RouteConfig{{Name: "claude", API: "anthropic", Upstream: "https://192.0.2.10", Credential: "model-key"}}},
		Tool: tool.Config{Servers: []tool.ServerConfig{
			{Name: "remote", URL: "http://127.0.0.1:9000/mcp", Credential: "tool-key"},
			{Name: "local", Stdio: true, SecretEnv: []string{"local-token"}},
		}},
		Egress:  egress.Config{Allow: []egress.Rule{{Host: "allowed.test", Ports: []int{443}}}, Resolve: map[string][]netip.Addr{"allowed.test": {netip.MustParseAddr("1.2.3.4")}}},
		Secrets: map[string][]byte{"model-key": []byte("M"), "tool-key": []byte("T"), "local-token": []byte("L"), "unused": []byte("U")},
		Ingress: ingress.Config{Routes: []ingress.Route{{Name: "ui", Port: 18789, Listen: "127.0.0.1:18789", MaxConcurrent: 4}}},
	}}
	if _, err := Start(o); err == nil || !strings.Contains(err.Error(), "no uid") {
		t.Errorf("Start without a uid = %v, want refused", err)
	}
	specs, err := brokerSpecs(o)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"model":  {"model-key", "unused"}, // never a stdio tool server's secret_env
		"egress": nil,
		"tool":   {"local-token", "tool-key", "unused"},
		"state":  nil,
		// The ingress process relays bytes only: no secret.
		"ingress": nil,
	}
	if len(specs) != len(want) {
		t.Errorf("%d broker processes, want %d (one each, ingress only with routes)", len(specs), len(want))
	}
	for _, s := range specs {
		var got []string
		for n := range s.cfg.Secrets {
			got = append(got, n)
		}
		sort.Strings(got)
		if !slices.Equal(got, want[s.broker]) {
			t.Errorf("%s process secrets = %v, want %v", s.broker, got, want[s.broker])
		}
		if s.cfg.Broker != s.broker || !slices.Equal(s.cfg.Channels, []string{s.broker}) || len(s.cfg.Listeners) != 1 {
			t.Errorf("%s process config: broker %q channels %v listeners %v", s.broker, s.cfg.Broker, s.cfg.Channels, s.cfg.Listeners)
		}
		if s.broker != "model" && len(s.cfg.Model.Routes) > 0 || s.broker != "tool" && len(s.cfg.Tool.Servers) > 0 || s.broker != "egress" && len(s.cfg.Egress.Allow) > 0 ||
			s.broker != "ingress" && len(s.cfg.Ingress.Routes) > 0 {
			t.Errorf("%s process got another broker's configuration", s.broker)
		}
		if len(s.cfg.Egress.Resolve) > 0 {
			t.Errorf("%s process got the static resolve answers (the dialer holds them)", s.broker)
		}
		// The dialer policy: each broker's own destination only.
		// (IP literals: the test resolves nothing.)
		for _, d := range []struct {
			host    string
			port    int
			allowed string
		}{{"192.0.2.10", 443, "model"}, {"127.0.0.1", 9000, "tool"}, {"127.0.0.1", 18789, "ingress"}} {
			dest, allowed := d.host, map[string]bool{d.allowed: true}
			_, err := s.policy.Plan(context.Background(), d.host, d.port)
			var r *dial.Refused
			refused := errors.As(err, &r)
			if allowed[s.broker] && refused && r.Why == dial.ReasonNotDeclared {
				t.Errorf("%s policy refuses its own destination %s: %v", s.broker, dest, err)
			}
			if !allowed[s.broker] && !refused {
				t.Errorf("%s policy allows %s, another broker's destination", s.broker, dest)
			}
		}
	}
}

// Without routes there is no ingress process (nothing listens for a way in).
func TestNoIngressProcessWithoutRoutes(t *testing.T) {
	specs, err := brokerSpecs(StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		if s.broker == ingress.Name {
			t.Errorf("an ingress broker process without routes")
		}
	}
	if len(specs) != 4 {
		t.Errorf("%d broker processes, want 4", len(specs))
	}
}
