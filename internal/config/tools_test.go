package config

import (
	"strings"
	"testing"
	"time"
)

func TestParseTools(t *testing.T) {
	c, err := Parse([]byte(head+`secrets:
  gh: {env: GH_TOKEN}
tools:
  - name: fs
    command: [/opt/mcp/bin/server, /data]
    binds: [{source: /srv/data, target: /data}, {source: /srv/out, writable: true}]
    env: {LOG: debug}
    secret_env: {GITHUB_TOKEN: gh}
    allow: ["read_*", list_directory]
    timeout: 5s
    memory: 256M
    egress:
      allow: [{host: api.github.com, ports: [443]}]
  - name: remote
    url: https://mcp.example.com/mcp
    credential: gh
approvals: {wait: 10s, ttl: 1h}
budgets: {tool_calls: 100}
limits: {max_tool_result_bytes: 64KiB}
`), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	fs := c.Tools[0]
	if fs.Name != "fs" || fs.Binds[1].Target != "/srv/out" || !fs.Binds[1].Writable || fs.Binds[0].Writable || fs.Timeout != 5*time.Second ||
		fs.Memory != 256<<20 || fs.SecretEnv["GITHUB_TOKEN"] != "gh" || len(fs.Egress.Allow) != 1 {
		t.Fatalf("fs = %+v", fs)
	}
	if r := c.Tools[1]; r.URL != "https://mcp.example.com/mcp" || r.Credential != "gh" || r.Timeout != DefaultToolTimeout {
		t.Fatalf("remote = %+v", r)
	}
	if c.Approvals.Wait != 10*time.Second || c.Approvals.TTL != time.Hour || c.Budgets.ToolCalls != 100 || c.Limits.MaxToolResultBytes != 64<<10 {
		t.Fatalf("approvals %+v budgets %+v limits %+v", c.Approvals, c.Budgets, c.Limits)
	}
}

func TestParseToolsErrors(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"tools: [{name: fs}]", "exactly one of command"},
		{"tools: [{name: fs, command: [/a], url: https://x.example}]", "exactly one of command"},
		{"tools: [{name: Fs, command: [/a]}]", "tools[0].name"},
		{"tools: [{name: a__b, command: [/a]}]", "without \"__\""},
		{"tools: [{name: fs, command: [/a]}, {name: fs, command: [/b]}]", "declared twice"},
		{"tools: [{name: fs, command: [bin/server]}]", "absolute path"},
		{"tools: [{name: fs, command: [/a], secret_env: {K: nope}}]", "names no secret"},
		{"tools: [{name: fs, url: http://mcp.example.com/}]", "plain http"},
		{"tools: [{name: fs, url: https://mcp.example.com/, binds: [{source: /a}]}]", "local (command) servers only"},
		{"tools: [{name: fs, command: [/a], binds: [{source: a/b}]}]", "absolute, clean"},
		{"tools: [{name: fs, command: [/a], timeout: 2h}]", "100ms to 1h"},
		{"tools: [{name: fs, command: [/a], allow: [\"[\"]}]", "not a valid glob"},
		{"tools: [{name: fs, command: [/a], shell: true}]", "shell"},
		{"limits: {max_tool_result_bytes: 1G}", "max_tool_result_bytes"},
		{"approvals: {wait: 1h}", "approvals.wait"},
		{"budgets: {tool_calls: -1}", "tool_calls"},
	} {
		_, err := Parse([]byte(head+c.yaml+"\n"), "t.yaml")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to mention %q", c.yaml, err, c.want)
		}
	}
}
