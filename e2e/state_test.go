package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/testkit"
)

// stateConfig writes a config for workload and purpose (tenant acme)
// with the given state block.
func stateConfig(t *testing.T, workload, purpose, stateBlock string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "cordon.yaml")
	body := fmt.Sprintf("version: cordon/v1\nworkload: %s\ntenant: acme\npurpose: %s\n%s", workload, purpose, stateBlock)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// The agent's durable state, through the state broker: it outlives the
// sandbox that wrote it, is scoped by workload and purpose (another
// scope's entry is answered exactly like an absent one), bounded by its
// quota, versioned, and reset one scope at a time by the operator.
func TestStateBroker(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	const limits = "state: {quota_bytes: 1500, quota_entries: 10, max_value_bytes: 1KiB}\n"
	mine := stateConfig(t, "state-e2e", "testing", limits)
	otherPurpose := stateConfig(t, "state-e2e", "other", limits)
	otherWorkload := stateConfig(t, "state-e2e-2", "testing", limits)
	sh := func(cfg, script string) result {
		t.Helper()
		r := cordon(t, cordonBin, st, "run", "--config", cfg, "--", "/bin/sh", "-c", script)
		if r.Code != 0 {
			t.Fatalf("run %q: exit %d\nstdout: %s\nstderr: %s", script, r.Code, r.Stdout, r.Stderr)
		}
		return r
	}
	// curl's status line and headers (-i), as the agent sees them.
	const curl = `curl -sS -i --max-time 10 `

	// First sandbox: the agent writes a note.
	r := sh(mine, `echo "$CORDON_STATE_URL"; `+curl+`-X PUT --data-binary 'hello, mind' "$CORDON_STATE_URL/notes/a"`)
	if !strings.HasPrefix(r.Stdout, "http://127.0.0.1:83/v1/state\n") || !strings.Contains(r.Stdout, "HTTP/1.1 201 Created") ||
		!strings.Contains(r.Stdout, "Etag: \"1\"") {
		t.Fatalf("first write:\n%s", r.Stdout)
	}

	// A second sandbox of the same scope reads it: state survives the
	// sandbox (and the cordon process that ran it).
	r = sh(mine, curl+`"$CORDON_STATE_URL/notes/a"`)
	if !strings.Contains(r.Stdout, "HTTP/1.1 200 OK") || !strings.HasSuffix(r.Stdout, "\r\n\r\nhello, mind") ||
		!strings.Contains(r.Stdout, "X-Cordon-Trust: untrusted") {
		t.Fatalf("read in a new sandbox:\n%s", r.Stdout)
	}

	// Another purpose, another workload: the note does not exist for
	// them, and the answer is byte for byte the answer for a key nobody
	// ever wrote.
	for _, cfg := range []string{otherPurpose, otherWorkload} {
		r = sh(cfg, curl+`"$CORDON_STATE_URL/notes/a"; echo; echo ===; `+curl+`"$CORDON_STATE_URL/notes/never-written"`)
		foreign, absent, _ := strings.Cut(r.Stdout, "\n===\n")
		if !strings.HasPrefix(foreign, "HTTP/1.1 404 ") || foreign != absent || strings.Contains(r.Stdout, "hello") {
			t.Fatalf("foreign and absent differ:\n%s\n---\n%s", foreign, absent)
		}
	}
	sh(otherPurpose, curl+`-X PUT --data-binary 'kept' "$CORDON_STATE_URL/notes/b"`)

	// The quota: 1500 bytes of keys and values in the scope.
	r = sh(mine, `printf '%01000d' 0 > /tmp/v; `+
		`curl -sS -o /dev/null -w '%{http_code}\n' -X PUT --data-binary @/tmp/v "$CORDON_STATE_URL/big1"; `+
		curl+`-X PUT --data-binary @/tmp/v "$CORDON_STATE_URL/big2"`)
	if !strings.HasPrefix(r.Stdout, "201\n") || !strings.Contains(r.Stdout, "HTTP/1.1 507 Insufficient Storage") ||
		!strings.Contains(r.Stdout, `"type":"quota_exceeded"`) || !strings.Contains(r.Stdout, `"quota":"bytes"`) || !strings.Contains(r.Stdout, `"limit":1500`) {
		t.Fatalf("over quota:\n%s", r.Stdout)
	}
	// A value over max_value_bytes is refused whatever the quota.
	r = sh(mine, `printf '%01025d' 0 > /tmp/v; `+curl+`-X PUT --data-binary @/tmp/v "$CORDON_STATE_URL/huge"`)
	if !strings.Contains(r.Stdout, "HTTP/1.1 413 ") || !strings.Contains(r.Stdout, `"limit":1024`) {
		t.Fatalf("over max_value_bytes:\n%s", r.Stdout)
	}

	// Versions: a write based on version 1 succeeds once; the next one
	// based on version 1 is stale.
	r = sh(mine, `for i in 1 2; do curl -sS -o /dev/null -w '%{http_code}\n' -X PUT -H 'If-Match: "1"' --data-binary "edit $i" "$CORDON_STATE_URL/notes/a"; done; `+
		curl+`-X PUT -H 'If-None-Match: *' --data-binary x "$CORDON_STATE_URL/notes/a"`)
	if !strings.HasPrefix(r.Stdout, "200\n412\n") || !strings.Contains(r.Stdout, "HTTP/1.1 412 Precondition Failed") ||
		!strings.Contains(r.Stdout, `"current_etag":"\"3\""`) {
		t.Fatalf("stale writes:\n%s", r.Stdout)
	}

	// The listing and the export: metadata with provenance; the export
	// holds the values.
	r = sh(mine, `curl -sS "$CORDON_STATE_URL?prefix=notes/"; echo; curl -sS "$CORDON_STATE_URL:export"`)
	list, export, _ := strings.Cut(r.Stdout, "\n")
	var l struct {
		Entries []struct {
			Key        string `json:"key"`
			Version    int64  `json:"version"`
			Provenance struct {
				SandboxID string `json:"sandbox_id"`
				Receipt   int64  `json:"receipt"`
			} `json:"provenance"`
		} `json:"entries"`
		Usage struct {
			Entries    int64 `json:"entries"`
			QuotaBytes int64 `json:"quota_bytes"`
		} `json:"usage"`
	}
	if err := json.Unmarshal([]byte(list), &l); err != nil || len(l.Entries) != 1 || l.Entries[0].Version != 3 ||
		l.Entries[0].Provenance.SandboxID == "" || l.Entries[0].Provenance.Receipt == 0 || l.Usage.Entries != 2 || l.Usage.QuotaBytes != 1500 {
		t.Fatalf("list %s: %+v %v", list, l, err)
	}
	var doc struct {
		Scope   map[string]string `json:"scope"`
		Entries []struct {
			Key   string `json:"key"`
			Value []byte `json:"value"`
		} `json:"entries"`
	}
	if err := json.Unmarshal([]byte(export), &doc); err != nil || doc.Scope["purpose"] != "testing" || len(doc.Entries) != 2 ||
		doc.Entries[1].Key != "notes/a" || string(doc.Entries[1].Value) != "edit 1" {
		t.Fatalf("export %s: %+v %v", export, doc, err)
	}

	// Every operation has its receipt, with policy's decision.
	rcs := cordon(t, cordonBin, st, "receipts", "--json", "--broker", "state")
	if n := strings.Count(rcs.Stdout, `"broker":"state"`); n < 10 || !strings.Contains(rcs.Stdout, `"action":"put"`) ||
		!strings.Contains(rcs.Stdout, `"policy":{"digest":"sha256:`) || !strings.Contains(rcs.Stdout, `"decision":"deny"`) {
		t.Fatalf("state receipts (%d):\n%s", n, rcs.Stdout)
	}

	// The operator resets exactly one scope; a partial scope is refused.
	if r := cordon(t, cordonBin, st, "state", "reset", "--workload", "state-e2e"); r.Code != 125 {
		t.Fatalf("reset without the whole scope: exit %d %s", r.Code, r.Stderr)
	}
	ls := cordon(t, cordonBin, st, "state", "ls", "--workload", "state-e2e", "--json")
	if strings.Count(ls.Stdout, "\n") != 3 {
		t.Fatalf("state ls before the reset:\n%s", ls.Stdout)
	}
	r = cordon(t, cordonBin, st, "state", "reset", "--workload", "state-e2e", "--tenant", "acme", "--purpose", "testing")
	if r.Code != 0 || !strings.Contains(r.Stdout, "2 entries removed") {
		t.Fatalf("reset: exit %d %s %s", r.Code, r.Stdout, r.Stderr)
	}
	r = sh(mine, `curl -sS -o /dev/null -w '%{http_code}\n' "$CORDON_STATE_URL/notes/a"`)
	if r.Stdout != "404\n" {
		t.Fatalf("reset scope still answers: %q", r.Stdout)
	}
	r = sh(otherPurpose, `curl -sS "$CORDON_STATE_URL/notes/b"`)
	if r.Stdout != "kept" {
		t.Fatalf("the other purpose's entry after the reset: %q", r.Stdout)
	}
	// The agent may reset its own scope (policy permits state.write on
	// State::"*" here); only its own.
	r = sh(otherPurpose, `curl -sS -X POST "$CORDON_STATE_URL:reset"`)
	if !strings.Contains(r.Stdout, `"deleted":1`) {
		t.Fatalf("agent reset: %s", r.Stdout)
	}
}

// Policy decides state operations too: a forbid on State::"*" keeps the
// agent from resetting its state, and a forbid on a key from reading it.
func TestStatePolicy(t *testing.T) {
	testkit.RequireRoot(t)
	st := newStateDir(t)
	dir := t.TempDir()
	pol := filepath.Join(dir, "state.cedar")
	if err := os.WriteFile(pol, []byte(`
@id("all") permit (principal, action, resource);
@id("no-reset") forbid (principal, action == Action::"state.write", resource == State::"*");
@id("no-secrets") forbid (principal, action, resource) when { resource is State && resource.name like "secrets/*" };
`), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := stateConfig(t, "state-policy", "testing", "policy: ["+pol+"]\n")
	r := cordon(t, cordonBin, st, "run", "--config", cfg, "--", "/bin/sh", "-c",
		`u="$CORDON_STATE_URL"; for req in "-X PUT --data-binary x $u/notes/a" "-X PUT --data-binary x $u/secrets/k" "-X POST $u:reset" "$u/notes/a"; do `+
			`curl -sS -o /dev/null -w '%{http_code}\n' $req; done`)
	if r.Code != 0 || r.Stdout != "201\n403\n403\n200\n" {
		t.Fatalf("policy on state: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	rcs := cordon(t, cordonBin, st, "receipts", "--json", "--broker", "state")
	if !strings.Contains(rcs.Stdout, `"determining":["no-reset"]`) || !strings.Contains(rcs.Stdout, `"determining":["no-secrets"]`) {
		t.Fatalf("denials do not name the forbids:\n%s", rcs.Stdout)
	}
}
