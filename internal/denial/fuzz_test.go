package denial

import (
	"path"
	"reflect"
	"testing"
	"unicode/utf8"

	"gopkg.in/yaml.v3"

	"github.com/cordon-project/cordon/internal/policy"
)

// FuzzSuggestCedar: whatever workload, host and port a receipt carries
// (the host is the agent's choice), the suggested permit loads as
// exactly one policy (validated against cordon's schema) that allows
// exactly that workload, host and port — and nothing next to it.
func FuzzSuggestCedar(f *testing.F) {
	f.Add("agent", "example.com", 443)
	f.Add("agent", `x" }; permit(principal, action, resource); //`, 80)
	f.Add("w\"\\", "a\nb\u2028c", 1)
	f.Fuzz(func(t *testing.T, workload, host string, port int) {
		if !utf8.ValidString(workload) || !utf8.ValidString(host) || workload == "" || host == "" {
			t.Skip("receipts carry UTF-8 text and a named workload and host")
		}
		if port < 1 || port > 65535 || policy.HostID(host) == "" {
			t.Skip("a connection names a host and a port 1–65535")
		}
		text := CedarPermit(workload, policy.ActionEgressConnect, "Host", host, port)
		set, err := policy.LoadSources(policy.Source{Name: "suggest.cedar", Data: []byte(text)})
		if err != nil {
			t.Fatalf("CedarPermit(%q, %q, %d) = %q: does not load: %v", workload, host, port, text, err)
		}
		if set.Len() != 1 {
			t.Fatalf("CedarPermit(%q, %q, %d) = %q: %d policies, want 1", workload, host, port, text, set.Len())
		}
		ask := func(w, h string, p int) bool {
			allow, _ := set.Decide(policy.Request{Workload: w, Tenant: "t", Action: policy.ActionEgressConnect,
				Resource: policy.Resource{Type: "Host", ID: h}, Context: policy.Context{Port: p}})
			return allow
		}
		if !ask(workload, host, port) {
			t.Fatalf("CedarPermit(%q, %q, %d) = %q does not allow its own question", workload, host, port, text)
		}
		for _, c := range []struct {
			w, h string
			p    int
		}{{workload + "x", host, port}, {workload, host + "x", port}, {workload, "x" + host, port}, {workload, host, port + 1}} {
			if ask(c.w, c.h, c.p) {
				t.Fatalf("CedarPermit(%q, %q, %d) = %q also allows %q %q %d", workload, host, port, text, c.w, c.h, c.p)
			}
		}
	})
}

// FuzzSuggestConfig: the egress and model snippets parse as YAML with
// exactly one entry naming exactly the target (the model's glob matches
// the model and nothing longer).
func FuzzSuggestConfig(f *testing.F) {
	f.Add("example.com", 443, "claude-sonnet-4-5")
	f.Add("a\n  - host: evil.com\n    ports: [1]", 1, "*")
	f.Add(`x"]`+"\n"+`models: ["*`, 65535, `claude-[a-z]?\`)
	f.Fuzz(func(t *testing.T, host string, port int, model string) {
		if !utf8.ValidString(host) || !utf8.ValidString(model) {
			t.Skip("receipts carry UTF-8 text")
		}
		text := EgressEntry(host, port)
		var eg map[string]map[string][]map[string]any
		if err := yaml.Unmarshal([]byte(text), &eg); err != nil {
			t.Fatalf("EgressEntry(%q, %d) = %q: %v", host, port, text, err)
		}
		want := map[string]map[string][]map[string]any{"egress": {"allow": {{"host": host, "ports": []any{port}}}}}
		if !reflect.DeepEqual(eg, want) {
			t.Fatalf("EgressEntry(%q, %d) = %q parses as %#v, want %#v", host, port, text, eg, want)
		}

		text = ModelGlob(model)
		var m map[string][]string
		if err := yaml.Unmarshal([]byte(text), &m); err != nil {
			t.Fatalf("ModelGlob(%q) = %q: %v", model, text, err)
		}
		if len(m) != 1 || len(m["models"]) != 1 {
			t.Fatalf("ModelGlob(%q) = %q parses as %#v, want one glob", model, text, m)
		}
		g := m["models"][0]
		if ok, err := path.Match(g, model); !ok || err != nil {
			t.Fatalf("ModelGlob(%q) = %q: glob %q does not match it (%v)", model, text, g, err)
		}
		for _, other := range []string{model + "x", "x" + model, model + "/"} {
			if ok, _ := path.Match(g, other); ok {
				t.Fatalf("ModelGlob(%q) = %q: glob %q also matches %q", model, text, g, other)
			}
		}
	})
}
