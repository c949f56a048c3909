package denial

import (
	"path"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/cordon-project/cordon/internal/crossing"
)

// A receipt's target is not always a name the agent's own broker checked:
// a compromised broker process records denials with any target (record
// keeps it), and policy explain builds one from the operator's request.
// The suggestion must still allow exactly that crossing and nothing more
// once a human pastes it: a tool name "*" must not become the glob "*"
// (every tool of the server), a host "*.com" must not become the
// wildcard entry "*.com" (every name under com).
func TestSuggestNeverBroaderThanTheCrossing(t *testing.T) {
	id := crossing.Identity{Workload: "agent"}
	tool := crossing.Receipt{Identity: id, Broker: "tool", Target: "fs/*", Decision: crossing.Deny, Reason: "tools[] does not offer it"}
	s := Suggest(tool)
	if s == nil || s.Kind != "config" {
		t.Fatalf("Suggest(tool fs/*) = %+v, want a config snippet", s)
	}
	var m map[string][]string
	if err := yaml.Unmarshal([]byte(s.Text), &m); err != nil || len(m["allow"]) != 1 {
		t.Fatalf("Suggest(tool fs/*) text %q: %v %#v", s.Text, err, m)
	}
	g := m["allow"][0]
	if ok, _ := path.Match(g, "*"); !ok {
		t.Errorf("tool glob %q does not allow the denied tool %q", g, "*")
	}
	if ok, _ := path.Match(g, "delete_everything"); ok {
		t.Errorf("tool glob %q (suggested for the tool named %q) also allows delete_everything", g, "*")
	}
	// Positive control: a plain name is suggested as itself.
	if s := Suggest(crossing.Receipt{Identity: id, Broker: "tool", Target: "fs/read_file", Decision: crossing.Deny, Reason: "tools[] does not offer it"}); s == nil || !strings.Contains(s.Text, `"read_file"`) {
		t.Errorf("Suggest(tool fs/read_file) = %+v, want allow: [\"read_file\"]", s)
	}

	for _, target := range []string{"*.com:443", "*:443", "a*b.example.com:443"} {
		rc := crossing.Receipt{Identity: id, Broker: "egress", Target: target, Decision: crossing.Deny, Reason: "host-not-allowed"}
		s := Suggest(rc)
		if s != nil && strings.Contains(s.Text, "host:") {
			t.Errorf("Suggest(egress %s) = %q: an egress.allow pattern, broader than the one connection", target, s.Text)
		}
	}
	// Positive control: a hostname gets its entry.
	if s := Suggest(crossing.Receipt{Identity: id, Broker: "egress", Target: "www.example.com:443", Decision: crossing.Deny, Reason: "host-not-allowed"}); s == nil || !strings.Contains(s.Text, `host: "www.example.com"`) {
		t.Errorf("Suggest(egress www.example.com:443) = %+v, want its entry", s)
	}
}
